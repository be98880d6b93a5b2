"""Every kustomize overlay renders and validates strictly against the target Kubernetes version."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate.utils import SchemaNotFoundError, all_versions

from tests.deploy.support import K8S_DIR, KUBERNETES_VERSION, OVERLAYS, one, render

# Custom resources have no bundled schema; they may only warn.
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
}


def _validate(resource: dict[str, Any]) -> bool:
    """True if validated, False if no schema exists (custom resource); raises if invalid."""
    try:
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
    except SchemaNotFoundError:
        return False
    return True


def test_at_least_dev_and_prod_overlays() -> None:
    assert {"dev", "prod", "admission-webhook"} <= set(OVERLAYS), OVERLAYS


def test_target_version_is_bundled() -> None:
    # deploy/k8s/KUBERNETES_VERSION was the newest schema set kubernetes-validate bundled when
    # chosen; validating against a version it lacks would silently fall back to an older one.
    assert KUBERNETES_VERSION in all_versions(), all_versions()[-3:]


def test_base_renders() -> None:
    kinds = {r["kind"] for r in render(K8S_DIR / "base")}
    assert {
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceMonitor",
        "ConfigMap",
        "ServiceAccount",
    } <= kinds


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_validates_strictly(
    overlay: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    unvalidated = set()
    for resource in rendered[overlay]:
        try:
            if not _validate(resource):
                unvalidated.add((resource["apiVersion"], resource["kind"]))
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            pytest.fail(
                f"{overlay}: {resource['kind']}/{resource['metadata']['name']} "
                f"invalid at {path}: {error.message}",
                pytrace=False,
            )
    assert unvalidated <= CUSTOM_KINDS, f"no schema for {unvalidated - CUSTOM_KINDS}"


def test_strict_validation_is_not_vacuous(rendered: dict[str, list[dict[str, Any]]]) -> None:
    deployment = copy.deepcopy(one(rendered["prod"], "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(deployment)
