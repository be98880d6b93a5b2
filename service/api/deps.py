"""Dependencies handed to routes: settings and the catalogs loaded at start-up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request

from service.settings import Settings, get_settings

if TYPE_CHECKING:
    from service.catalog.gpu_catalog import GpuCatalog
    from service.catalog.model_catalog import ModelCatalog

__all__ = ["get_gpu_catalog", "get_model_catalog", "get_settings"]


# `async def` on purpose: a plain `def` dependency runs in the thread pool, and each hop there
# costs more than the whole estimate on a busy machine (GIL hand-offs; see bench/results.md).
async def get_gpu_catalog(request: Request) -> GpuCatalog:
    return request.app.state.gpu_catalog  # type: ignore[no-any-return]


async def get_model_catalog(request: Request) -> ModelCatalog:
    return request.app.state.model_catalog  # type: ignore[no-any-return]


def settings_of(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]
