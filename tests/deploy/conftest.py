"""Fixtures for the deployment checks (helpers live in support.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.support import OVERLAYS, OVERLAYS_DIR, render


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Every overlay, rendered once per session: {overlay name: [resource, ...]}."""
    return {name: render(OVERLAYS_DIR / name) for name in OVERLAYS}
