"""Property-based API tests from the committed OpenAPI document: positive and negative data,
every default schemathesis check (no 5xx, responses match the schema, status codes declared,
content types declared, negative data rejected, ...)."""

from __future__ import annotations

import os

import schemathesis
from hypothesis import HealthCheck, settings

from service.app import create_app, load_catalogs
from service.settings import Settings
from tests.conftest import REPO

_settings = Settings(access_log=False)
_app = create_app(_settings)
# Schemathesis drives the ASGI app directly; load the catalogs as the lifespan would.
load_catalogs(_app, _settings)

schema = schemathesis.openapi.from_path(REPO / "openapi" / "openapi.json")
schema.app = _app

# CI runs a modest number per operation; `make fuzz` runs many more against a live server.
EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "40"))


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_conforms_to_its_schema(case: schemathesis.Case) -> None:
    case.call_and_validate()
