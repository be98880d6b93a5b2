"""The committed OpenAPI document is the live one (run `make openapi` after changing the API)."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from service.openapi import render
from tests.conftest import REPO


def test_committed_schema_matches_live_schema(client: TestClient) -> None:
    committed = json.loads((REPO / "openapi" / "openapi.json").read_text())
    live = client.get("/openapi.json").json()
    assert committed == live, "openapi/openapi.json is stale: run `make openapi`"
    assert json.loads(render()) == live


def test_operation_ids_are_stable_names(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    ids = {
        op["operationId"]
        for path in schema["paths"].values()
        for op in path.values()
        if isinstance(op, dict) and "operationId" in op
    }
    for expected in (
        "estimate_inference",
        "estimate_finetune",
        "estimate_batch",
        "list_gpus",
        "get_gpu",
        "list_models",
        "get_model",
        "healthz",
        "readyz",
        "metrics",
    ):
        assert expected in ids


def test_every_route_declares_its_error_statuses(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if path.startswith("/v1/estimate"):
                for status in ("400", "404", "413", "422"):
                    assert status in op["responses"], f"{method} {path} lacks {status}"
            if "{" in path:
                assert "404" in op["responses"], f"{method} {path} lacks 404"


def test_request_fields_carry_descriptions_and_bounds(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    inference = schemas["InferenceRequestBody"]["properties"]
    assert inference["batch_size"]["minimum"] == 1 and "maximum" in inference["batch_size"]
    assert inference["sequence_length"]["description"]
    assert schemas["InferenceRequestBody"].get("additionalProperties") is False


def test_every_error_response_is_a_problem_document() -> None:
    """No operation advertises FastAPI's HTTPValidationError: every error status it can give
    is declared with the one problem-document shape."""
    schema = json.loads((REPO / "openapi" / "openapi.json").read_text())
    assert "HTTPValidationError" not in json.dumps(schema)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for status, response in operation.get("responses", {}).items():
                # /readyz's 503 is the readiness report itself (what a probe reads).
                if status.startswith(("4", "5")) and (path, status) != ("/readyz", "503"):
                    ref = json.dumps(response)
                    assert "#/components/schemas/Problem" in ref, (path, method, status)
