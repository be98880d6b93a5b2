"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def app_settings() -> Settings:
    return Settings(access_log=False)


@pytest.fixture(scope="session")
def client(app_settings: Settings) -> Iterator[TestClient]:
    """One app for the session, with its lifespan run (catalogs loaded)."""
    with TestClient(create_app(app_settings), raise_server_exceptions=False) as test_client:
        yield test_client
