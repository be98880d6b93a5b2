"""Public manifests (tests/workloads/manifests/, sources in SOURCES.toml) through the webhook in
deny mode and pre-flight: none is denied, and none is judged not to fit the hardware its source
documents it running on.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.workloads.test_manifests import SOURCES, workload_documents

DENIED_VERDICTS = {"does_not_fit", "will_not_start"}


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "manifest",
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": "x"},
            "operation": "CREATE",
            "userInfo": {"username": "ci"},
            "object": obj,
        },
    }


def _objects() -> list[Any]:
    return [
        pytest.param(entry, doc, id=entry["file"])
        for entry in SOURCES
        for doc in workload_documents(entry["file"])
        if "kind" in doc  # Helm values are no Kubernetes object: pre-flight reads them
    ]


@pytest.mark.parametrize(("entry", "obj"), _objects())
def test_no_public_manifest_is_denied(
    client: TestClient, entry: dict[str, str], obj: dict[str, Any]
) -> None:
    response = client.post("/v1/admission/deny", json=_review(obj))
    assert response.status_code == 200
    answer = response.json()["response"]
    assert answer["allowed"] is True, (entry["source"], answer.get("status"))


def _documented() -> list[Any]:
    cases = []
    for entry in SOURCES:
        if not entry["documented_gpu"]:
            continue
        marks: list[Any] = []
        for doc in workload_documents(entry["file"]):
            cases.append(pytest.param(entry, doc, id=entry["file"], marks=marks))
    return cases


@pytest.mark.parametrize(("entry", "obj"), _documented())
def test_no_public_manifest_is_judged_not_to_fit_its_documented_gpu(
    client: TestClient, entry: dict[str, str], obj: dict[str, Any]
) -> None:
    response = client.post("/v1/preflight", json={"object": obj, "gpu": entry["documented_gpu"]})
    assert response.status_code == 200, response.text[:400]
    for result in response.json()["results"]:
        assert result["verdict"] not in DENIED_VERDICTS, (entry["documented_by"], result)
