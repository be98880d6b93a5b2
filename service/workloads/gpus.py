"""What a pod asks of GPUs: the extended resources it requests and the products it is pinned to.

Resource names follow the NVIDIA device plugin (github.com/NVIDIA/k8s-device-plugin):
``nvidia.com/gpu`` for whole GPUs; under the ``mixed`` MIG strategy ``nvidia.com/mig-<profile>``
per MIG profile, the profile written as NVML names it with ``+`` turned into ``.``
(``internal/lm/mig-strategy.go``, ``internal/resource/nvml-mig-device.go``: ``1g.10gb``,
``1g.10gb.me``, ``1c.3g.40gb`` for a compute-instance slice); with time-slicing or MPS and
``renameByDefault: true``, ``nvidia.com/gpu.shared`` (README, "Shared Access to GPUs"). AMD's
device plugin uses ``amd.com/gpu``. Kubernetes counts extended resources in whole units; a
container may give them in ``limits``, ``requests`` or both (equal), so limits are read first.

The GPU product comes from the pod's ``nodeSelector`` or its required node affinity on GPU
Feature Discovery's ``nvidia.com/gpu.product`` label (``docs/gpu-feature-discovery/README.md``)
or a label a cloud or provisioner writes (GKE's ``cloud.google.com/gke-accelerator``, the
instance type, Karpenter's GPU name: :mod:`.cloud_gpus`), translated to the product GPU
Feature Discovery would name. Required node-selector terms are ORed and the expressions inside
a term ANDed, as in the Kubernetes scheduler; the ``nodeSelector`` and the affinity must both
hold; a term that does not constrain the product leaves it open, and so does an instance type
the table does not know (its GPU could be any).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from service.workloads.cloud_gpus import GPU_PRODUCT_LABEL, exact_products, products_named
from service.workloads.sources import ReadProblem

__all__ = [
    "GPU_PRODUCT_LABEL",
    "GpuRequest",
    "ProductSelector",
    "gpu_request",
    "gpu_requests",
    "mig_profile_nvml_name",
    "product_selector",
]

_WHOLE_GPU = "nvidia.com/gpu"
_SHARED_GPU = "nvidia.com/gpu.shared"
_AMD_GPU = "amd.com/gpu"
_MIG = re.compile(r"^nvidia\.com/mig-(?P<profile>(?:\d+c\.)?\d+g\.\d+gb(?:\.[a-z][a-z0-9]*)*)$")
_MIG_PARTS = re.compile(r"^(?P<base>(?:\d+c\.)?\d+g\.\d+gb)(?:\.(?P<attrs>.+))?$")


@dataclass(frozen=True)
class GpuRequest:
    """GPUs one container asks for."""

    resource: str
    """The extended resource name, e.g. ``nvidia.com/gpu`` or ``nvidia.com/mig-1g.10gb``."""
    count: int
    source: str
    vendor: Literal["nvidia", "amd"] = "nvidia"
    mig_profile: str | None = None
    """The MIG profile as the resource names it (``1g.10gb``, ``1g.10gb.me``), else None."""
    shared: bool = False
    """A replica of a time-sliced or MPS-shared GPU (``nvidia.com/gpu.shared``)."""

    @property
    def mig_profile_nvml(self) -> str | None:
        """The MIG profile as NVML and the GPU catalog name it (``1g.10gb+me``)."""
        return None if self.mig_profile is None else mig_profile_nvml_name(self.mig_profile)


def mig_profile_nvml_name(profile: str) -> str:
    """``1g.10gb.me`` (resource and label form) -> ``1g.10gb+me`` (NVML form)."""
    match = _MIG_PARTS.match(profile)
    if match is None or match.group("attrs") is None:
        return profile
    return f"{match.group('base')}+{match.group('attrs')}"


def gpu_request(resource: str, count: int, source: str) -> GpuRequest | None:
    """A request for ``count`` of ``resource`` if it is a GPU resource, else None."""
    if resource == _WHOLE_GPU:
        return GpuRequest(resource, count, source)
    if resource == _SHARED_GPU:
        return GpuRequest(resource, count, source, shared=True)
    if resource == _AMD_GPU:
        return GpuRequest(resource, count, source, vendor="amd")
    match = _MIG.match(resource)
    if match is not None:
        return GpuRequest(resource, count, source, mig_profile=match.group("profile"))
    return None


def _count(value: object) -> int | None:
    """A whole, non-negative resource count (``2`` or ``"2"``); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def gpu_requests(
    resources: object, path: str
) -> tuple[tuple[GpuRequest, ...], tuple[ReadProblem, ...]]:
    """The GPU resources of a container's ``resources`` (limits first, then requests).

    ``path`` is the JSON path of the ``resources`` object. A count of 0 is no request. A count
    that is not a whole number is a problem (Kubernetes itself refuses it for extended
    resources).
    """
    if not isinstance(resources, Mapping):
        return (), ()
    found: dict[str, GpuRequest] = {}
    problems: list[ReadProblem] = []
    for section in ("limits", "requests"):
        entries = resources.get(section)
        if not isinstance(entries, Mapping):
            continue
        for name, raw in entries.items():
            if not isinstance(name, str) or name in found:
                continue
            source = f'{path}.{section}["{name}"]'
            if gpu_request(name, 1, source) is None:
                continue
            count = _count(raw)
            if count is None:
                problems.append(
                    ReadProblem(
                        source,
                        f"{raw!r} is not a whole number of {name}",
                        "extended resources are counted in whole units, e.g. 1 or 2",
                    )
                )
                continue
            request = gpu_request(name, count, source)
            if request is not None and count > 0:
                found[name] = request
    return tuple(found.values()), tuple(problems)


@dataclass(frozen=True)
class ProductSelector:
    """The GPU products a pod may be scheduled on, from its node selection."""

    values: tuple[str, ...]
    """Allowed products, as GPU Feature Discovery's ``nvidia.com/gpu.product`` names them
    (a cloud's label translated; a value the table does not map kept as written); more than
    one when several are allowed."""
    source: str
    excluded: tuple[str, ...] = ()
    """Products a ``NotIn`` expression rules out."""
    label: str = GPU_PRODUCT_LABEL

    @property
    def several(self) -> bool:
        """Whether more than one product is allowed (the node is not chosen yet)."""
        return len(self.values) > 1


def _translated(key: str, value: str, products: tuple[str, ...]) -> str:
    if key == GPU_PRODUCT_LABEL:
        return ""
    return f"{value} = {', '.join(products)}"


def _intersect(allowed: list[str] | None, products: Sequence[str]) -> list[str]:
    return (
        list(dict.fromkeys(products)) if allowed is None else [v for v in allowed if v in products]
    )


def _term_products(term: object, notes: list[str]) -> tuple[list[str] | None, list[str]]:
    """(allowed products or None when the term leaves them open, excluded products)."""
    if not isinstance(term, Mapping):
        return None, []
    allowed: list[str] | None = None
    excluded: list[str] = []
    expressions = term.get("matchExpressions")
    if not isinstance(expressions, list):
        return None, []
    for expression in expressions:
        if not isinstance(expression, Mapping) or not isinstance(expression.get("key"), str):
            continue
        key = str(expression["key"])
        values = [v for v in expression.get("values") or [] if isinstance(v, str)]
        named = [(v, products_named(key, v)) for v in values]
        if not named or any(products is None for _, products in named):
            continue  # not a GPU label, or an instance type the table does not know: open
        products = [p for _, found in named for p in found or ()]
        notes.extend(t for v, found in named if (t := _translated(key, v, found or ())))
        operator = expression.get("operator")
        if operator == "In":
            allowed = _intersect(allowed, products)
        elif operator == "NotIn" and exact_products(key):
            excluded.extend(products)
    return allowed, excluded


def _selector_products(selector: object, path: str) -> tuple[list[str] | None, list[str]]:
    """(products the ``nodeSelector`` allows or None, where each was read)."""
    if not isinstance(selector, Mapping):
        return None, []
    allowed: list[str] | None = None
    sources: list[str] = []
    for key, value in selector.items():
        if not isinstance(key, str) or not isinstance(value, str):
            continue
        products = products_named(key, value)
        if products is None:
            continue
        allowed = _intersect(allowed, products)
        translated = _translated(key, value, products)
        sources.append(f'{path}.nodeSelector["{key}"]' + (f" ({translated})" if translated else ""))
    return allowed, sources


def product_selector(
    pod_spec: object, path: str, *, extra_terms: object = None, extra_path: str = ""
) -> ProductSelector | None:
    """The products a pod spec pins it to, or None when it leaves the product open.

    Read from the ``nodeSelector`` and the required node affinity, on GPU Feature Discovery's
    product label or any label `products_named` reads (GKE's accelerator, the instance type,
    Karpenter's GPU name). ``extra_terms`` adds required node-selector terms given outside a
    pod spec (the vLLM production-stack chart's ``nodeSelectorTerms``), found at ``extra_path``.
    """
    spec = pod_spec if isinstance(pod_spec, Mapping) else {}
    from_selector, sources = _selector_products(spec.get("nodeSelector"), path)

    terms: object = extra_terms
    terms_path = extra_path
    affinity = spec.get("affinity")
    if terms is None and isinstance(affinity, Mapping):
        node = affinity.get("nodeAffinity")
        required = (
            node.get("requiredDuringSchedulingIgnoredDuringExecution")
            if isinstance(node, Mapping)
            else None
        )
        if isinstance(required, Mapping):
            terms = required.get("nodeSelectorTerms")
            terms_path = (
                f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                ".nodeSelectorTerms"
            )
    from_affinity: list[str] | None = None
    excluded: list[str] = []
    notes: list[str] = []
    if isinstance(terms, list) and terms:
        union: list[str] = []
        open_term = False
        for term in terms:
            allowed, term_excluded = _term_products(term, notes)
            excluded.extend(term_excluded)
            if allowed is None:
                open_term = True
            else:
                union.extend(v for v in allowed if v not in union)
        if not open_term:
            from_affinity = union
            notes = list(dict.fromkeys(notes))
            sources.append(terms_path + (f" ({'; '.join(notes)})" if notes else ""))

    if from_selector is None and from_affinity is None:
        if excluded:
            return ProductSelector((), terms_path, excluded=tuple(excluded))
        return None
    if from_selector is not None and from_affinity is not None:
        values = [v for v in from_selector if v in from_affinity]
    else:
        values = from_selector if from_selector is not None else from_affinity or []
    values = [v for v in values if v not in excluded]
    return ProductSelector(tuple(values), " and ".join(sources), excluded=tuple(excluded))
