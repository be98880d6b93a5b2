"""Service settings: one pydantic-settings class, read from `LLMMEM_*` environment variables.

Validated once at start-up (a bad value stops the process with a message naming the variable);
handed to routes through the cached `get_settings` dependency, which tests override.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of the service; the README lists them with their environment variables."""

    model_config = SettingsConfigDict(env_prefix="LLMMEM_", extra="ignore", frozen=True)

    host: str = Field("127.0.0.1", description="Interface uvicorn binds to.")
    port: int = Field(8000, ge=1, le=65535, description="TCP port uvicorn listens on.")
    log_level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        "info", description="Level of the service's JSON logs."
    )
    access_log: bool = Field(True, description="Write one JSON access-log line per request.")
    max_body_bytes: int = Field(
        1_048_576, ge=1024, le=64 * 1_048_576, description="Largest request body accepted (413)."
    )
    gpu_catalog_path: Path | None = Field(
        None, description="GPU catalog TOML file; default: the one embedded in the package."
    )
    model_catalog_path: Path | None = Field(
        None, description="Model catalog directory; default: the one embedded in the package."
    )
    docs_enabled: bool = Field(True, description="Serve /docs and /redoc (from local assets).")
    timeout_keep_alive_s: int = Field(
        5, ge=1, le=300, description="Seconds an idle keep-alive connection is held open."
    )
    request_read_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="Seconds a request's whole body may take to arrive after its headers (408).",
    )
    response_cache_bytes: int = Field(
        16 * 1_048_576,
        ge=0,
        le=1024 * 1_048_576,
        description="Memory for replaying repeated estimate answers byte for byte; 0 turns the "
        "cache off.",
    )
    response_cache_max_request_bytes: int = Field(
        16_384,
        ge=256,
        le=1_048_576,
        description="Largest request body whose answer the response cache keeps.",
    )
    cache_bytes: int = Field(
        32 * 1_048_576,
        ge=0,
        le=1024 * 1_048_576,
        description="Memory for the estimator's cache of derived values (serving setups, "
        "training states, minimum GPU counts), in bytes; 0 turns it off.",
    )
    graceful_shutdown_s: int = Field(
        20, ge=1, le=600, description="Seconds in-flight requests get to finish after SIGTERM."
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment once."""
    return Settings()
