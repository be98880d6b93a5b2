"""Kubernetes objects for the scheduler-facing route tests, built with the official client's
models (``kubernetes.client``) and serialized by its own ApiClient, so their shapes are the ones
the API server and the scheduler send. Builders shared with tests/workloads."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from tests.workloads.objects import container, pod_spec, product_affinity, template

__all__ = ["container", "node", "pod", "pod_spec", "product_affinity", "template", "to_json"]

_API = k8s.ApiClient()


def to_json(obj: object) -> Any:
    """A client model (or a dict holding them) as JSON, as the API server would send it."""
    return _API.sanitize_for_serialization(obj)


def pod(
    *containers: Any,
    product: str | None = None,
    name: str = "llm",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> Any:
    return k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=k8s.V1ObjectMeta(
            name=name, namespace="ml", annotations=annotations, labels=labels
        ),
        spec=pod_spec(*containers, product=product),
    )


def node(name: str, labels: dict[str, str], allocatable: dict[str, str] | None = None) -> Any:
    return k8s.V1Node(
        api_version="v1",
        kind="Node",
        metadata=k8s.V1ObjectMeta(name=name, labels=labels),
        status=k8s.V1NodeStatus(allocatable=allocatable) if allocatable else None,
    )
