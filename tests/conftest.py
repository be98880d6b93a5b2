"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import settings

from service.app import create_app
from service.settings import Settings

REPO = Path(__file__).resolve().parents[1]

# Property tests draw the same examples on every run, so that `make test` and CI pass or
# fail together; HYPOTHESIS_PROFILE=explore draws new ones (what found the blank-name bug).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def app_settings() -> Settings:
    return Settings(access_log=False)


@pytest.fixture(scope="session")
def client(app_settings: Settings) -> Iterator[TestClient]:
    """One app for the session, with its lifespan run (catalogs loaded)."""
    with TestClient(create_app(app_settings), raise_server_exceptions=False) as test_client:
        yield test_client
