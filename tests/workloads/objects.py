"""Builders for Kubernetes objects from the official client's models (``kubernetes.client``)."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s


def container(
    name: str,
    *,
    image: str = "vllm/vllm-openai:v0.10.1",
    command: list[str] | None = None,
    args: list[str] | None = None,
    gpus: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> Any:
    return k8s.V1Container(
        name=name,
        image=image,
        command=command,
        args=args,
        env=[k8s.V1EnvVar(name=k, value=v) for k, v in (env or {}).items()] or None,
        resources=k8s.V1ResourceRequirements(limits=gpus, requests=requests),
    )


def pod_spec(*containers: Any, product: str | None = None, affinity: Any = None) -> Any:
    return k8s.V1PodSpec(
        containers=list(containers),
        node_selector={"nvidia.com/gpu.product": product} if product else None,
        affinity=affinity,
    )


def template(spec: Any) -> Any:
    return k8s.V1PodTemplateSpec(metadata=k8s.V1ObjectMeta(labels={"app": "llm"}), spec=spec)


def product_affinity(*terms: list[str], operator: str = "In") -> Any:
    return k8s.V1Affinity(
        node_affinity=k8s.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                node_selector_terms=[
                    k8s.V1NodeSelectorTerm(
                        match_expressions=[
                            k8s.V1NodeSelectorRequirement(
                                key="nvidia.com/gpu.product", operator=operator, values=values
                            )
                        ]
                    )
                    for values in terms
                ]
            )
        )
    )
