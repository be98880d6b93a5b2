"""Every numeric field of every estimate request is bounded above and below in the published
schema, and out-of-range values (huge, negative, non-finite-looking, fractional) are 422s,
never a 5xx and never an estimate of an absurd size. Numbers inside a posted `hf_config` are
bounded by the config reader the same way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from bench.harness import LLAMA_CONFIG

ENDPOINTS = ("/v1/estimate/inference", "/v1/estimate/finetune")
BASE = {"parameter_count": 7e9, "estimator": "simple"}
# A Llama-3.1-8B-shaped config.json, written out by hand (the public config's field names).
SHAPE_FIELDS = [
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "max_position_embeddings",
]


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = schema["components"]["schemas"][name]
    return node


def _numeric_fields(
    schema: dict[str, Any], node: dict[str, Any], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], list[dict[str, Any]]]]:
    """(path, the numeric variants of the field) for every number/integer property."""
    node = _resolve(schema, node)
    for name, prop in (node.get("properties") or {}).items():
        variants = [_resolve(schema, v) for v in prop.get("anyOf", [prop])]
        numeric = [v for v in variants if v.get("type") in ("integer", "number")]
        if numeric:
            yield (*path, name), [{**prop, **v} for v in numeric]
        for variant in variants:
            if variant.get("type") == "object" or "properties" in variant:
                yield from _numeric_fields(schema, variant, (*path, name))


def _request_schemas(client: TestClient) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    schema = client.get("/openapi.json").json()
    out = {}
    for path in ENDPOINTS:
        body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        out[path] = (schema, body["schema"])
    return out


def _all_fields(client: TestClient) -> list[tuple[str, tuple[str, ...], list[dict[str, Any]]]]:
    fields = []
    for endpoint, (schema, root) in _request_schemas(client).items():
        fields += [(endpoint, p, v) for p, v in _numeric_fields(schema, root)]
    return fields


def test_there_are_numeric_fields_to_check(client: TestClient) -> None:
    names = {p[-1] for _, p, _ in _all_fields(client)}
    # Fields API.md names; the walk must find them or it checks nothing.
    assert {"batch_size", "sequence_length", "concurrency", "tensor_parallel_size"} <= names
    assert {"gpu_count", "zero_stage", "rank"} <= names


def _unbounded(client: TestClient) -> list[str]:
    unbounded = []
    for endpoint, path, variants in _all_fields(client):
        for v in variants:
            if "enum" in v or "const" in v:
                continue
            low = "minimum" in v or "exclusiveMinimum" in v
            high = "maximum" in v or "exclusiveMaximum" in v
            if not (low and high):
                unbounded.append(f"{endpoint} {'.'.join(path)}")
    return sorted(set(unbounded))


def test_every_numeric_field_is_bounded_in_the_schema(client: TestClient) -> None:
    unbounded = _unbounded(client)
    assert not unbounded, f"numeric fields without both bounds: {unbounded}"


def _with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    body: dict[str, Any] = dict(BASE)
    if path[0] in BASE:
        body[path[0]] = value
        return body
    node = body
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return body


@pytest.mark.parametrize("value", [10**40, 1e300, -1, -(10**40), 2**63, 0.5])
def test_out_of_range_numbers_are_422(client: TestClient, value: Any) -> None:
    answered = []
    for endpoint, path, variants in _all_fields(client):
        if value == 0.5 and all(v.get("type") == "number" for v in variants):
            continue  # a fraction is a valid value of a float field
        response = client.post(endpoint, json=_with(path, value))
        if response.status_code != 422:
            answered.append(f"{endpoint} {'.'.join(path)}={value!r}: {response.status_code}")
    assert not answered


@pytest.mark.parametrize("field", SHAPE_FIELDS)
@pytest.mark.parametrize("value", [10**30, 1e300, -1, 0, 2.5, True, "4096", [1]])
def test_absurd_config_numbers_are_422(client: TestClient, field: str, value: Any) -> None:
    config = {**LLAMA_CONFIG, field: value}
    response = client.post("/v1/estimate/inference", json={"hf_config": config})
    assert response.status_code == 422, response.text[:300]
    assert response.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize(
    # `null` where transformers has no default to fall back on (unlike num_key_value_heads,
    # whose null means "as many as the attention heads").
    "field",
    ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"],
)
def test_null_required_config_numbers_are_422(client: TestClient, field: str) -> None:
    config = {**LLAMA_CONFIG, field: None}
    response = client.post("/v1/estimate/inference", json={"hf_config": config})
    assert response.status_code == 422, response.text[:300]


def test_the_unmodified_config_is_estimated(client: TestClient) -> None:
    # The control for the test above: the same config, unmodified, is a valid request.
    response = client.post("/v1/estimate/inference", json={"hf_config": LLAMA_CONFIG})
    assert response.status_code == 200, response.text[:300]


@pytest.mark.parametrize("kind", ["inference", "finetune"])
def test_an_answer_beyond_64_bits_is_a_422_naming_the_field(client: TestClient, kind: str) -> None:
    # 126 layers × 128 heads × (16.8M tokens)² eager scores × 59 sequences: beyond 2^63 bytes.
    body = {
        "model": "meta-llama/Llama-3.1-405B",
        "attention": "eager",
        "sequence_length": 16_777_216,
        "batch_size": 59,
    }
    r = client.post(f"/v1/estimate/{kind}", json=body)
    assert r.status_code == 422, r.text[:200]
    problem = r.json()
    assert problem["errors"][0]["field"] == "sequence_length"
    assert "2^63" in problem["detail"]


def test_a_huge_config_value_is_not_echoed_back(client: TestClient) -> None:
    body = {"hf_config": {"model_type": "x" * 500_000, "hidden_size": 64}}
    r = client.post("/v1/estimate/inference", json=body)
    assert r.status_code == 422
    assert len(r.content) < 4096  # the value is cut, not echoed (twice) in full
    assert r.json()["errors"][0]["field"] == "model_type"


def test_a_huge_class_name_is_refused_not_echoed(client: TestClient) -> None:
    # A config the generic reader would otherwise accept, with a 500 kB class name.
    config = {**LLAMA_CONFIG, "model_type": "newdecoder", "architectures": ["Y" * 500_000]}
    r = client.post("/v1/estimate/inference", json={"hf_config": config})
    assert r.status_code == 422
    assert len(r.content) < 4096
    assert r.json()["errors"][0]["field"] == "architectures"
