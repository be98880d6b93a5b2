"""What a node's GPU Feature Discovery labels and allocatable resources say about its GPUs.

Label names and meanings follow NVIDIA's GPU Feature Discovery, now part of
github.com/NVIDIA/k8s-device-plugin: ``docs/gpu-feature-discovery/README.md`` ("Generated
labels", "MIG 'single' strategy", "MIG 'mixed' strategy"), the device plugin's README
("Catalog of Labels", "Shared Access to GPUs") and the labeller source ``internal/lm/``:

- ``nvidia.com/gpu.product``: the GPU model with characters outside ``[A-Za-z0-9-_. ]``
  dropped and spaces turned into ``-``; under the ``single`` MIG strategy ``-MIG-<profile>``
  is appended (``-MIG-INVALID`` with ``count``, ``memory`` and ``replicas`` 0 when the node's
  MIG layout does not fit that strategy); with sharing and ``renameByDefault: false``,
  ``-SHARED`` is appended last (``resource.go``: ``getProductName``).
- ``nvidia.com/gpu.memory``: memory per GPU in MiB; under ``single`` the memory of one MIG
  device as NVML reports it (``nvml-mig-device.go``: ``MemorySizeMB``).
- ``nvidia.com/gpu.count``: GPUs, or MIG devices under ``single``.
- ``nvidia.com/gpu.replicas``: replicas per GPU under sharing, 1 without
  (``resource.go``: ``getReplicas``); ``nvidia.com/gpu.sharing-strategy``: ``none``,
  ``time-slicing`` or ``mps`` (``api/config/v1/sharing.go``).
- ``nvidia.com/gpu.compute.major``/``.minor``, ``nvidia.com/gpu.family``: compute capability.
- ``nvidia.com/mig.strategy``: ``single`` or ``mixed``; under ``mixed`` each profile has
  ``nvidia.com/mig-<profile>.count``, ``.memory``, ``.product``, ``.replicas`` and the slice
  labels (``mig-strategy.go``), while ``nvidia.com/gpu.*`` describe the parent GPUs.

A node without GPU Feature Discovery's product label is read from its provider's labels
(GKE's ``cloud.google.com/gke-accelerator``, ``node.kubernetes.io/instance-type``, Karpenter's
``karpenter.k8s.aws/instance-gpu-name``; :mod:`.cloud_gpus`), as the product GPU Feature
Discovery would have written.

Sharing (device plugin README, "Shared Access to GPUs"): time-slicing does nothing to isolate
the workloads given replicas of one GPU; each sees all of its memory and all share it, so a
pod's memory is not reserved for it. MPS limits each client to an equal fraction of the
device memory, so a replica has memory / replicas.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from service.workloads.cloud_gpus import node_product
from service.workloads.gpus import mig_profile_nvml_name
from service.workloads.quantities import memory_bytes
from service.workloads.sources import ReadProblem, Sourced

__all__ = ["MigDevices", "NodeGpus", "Sharing", "read_node"]

_PREFIX = "nvidia.com/"
_SHARED_SUFFIX = "-SHARED"
_MIG_PRODUCT = re.compile(r"^(?P<parent>.+)-MIG-(?P<profile>[^-]+)$")
_MIG_LABEL = re.compile(r"^nvidia\.com/mig-(?P<profile>.+)\.count$")

SharingStrategy = Literal["none", "time-slicing", "mps"]


@dataclass(frozen=True)
class Sharing:
    """How the node's GPUs are shared between pods, and what that means for memory."""

    strategy: SharingStrategy
    replicas: int
    """Pods one GPU (or MIG device) is handed to; 1 without sharing."""
    source: str
    memory_isolated: bool
    """False under time-slicing: a pod sees the whole memory but shares it with the others."""
    memory_fraction: float
    """The share of the device memory one replica may count on: 1 unshared, 1/replicas
    under MPS (enforced) and under time-slicing (not enforced: a fair share, not a limit)."""
    note: str


@dataclass(frozen=True)
class MigDevices:
    """MIG devices of one profile on the node."""

    profile: str
    """As the labels and the resource name write it (``1g.10gb``, ``1g.10gb.me``)."""
    count: int
    resource: str
    """``nvidia.com/mig-<profile>`` (mixed) or ``nvidia.com/gpu`` (single)."""
    memory_mib: int | None
    source: str
    replicas: int = 1
    allocatable: int | None = None

    @property
    def profile_nvml(self) -> str:
        """The profile as NVML and the GPU catalog name it (``1g.10gb+me``)."""
        return mig_profile_nvml_name(self.profile)


@dataclass(frozen=True)
class NodeGpus:
    """The GPUs of one node as GPU Feature Discovery labels them."""

    name: str | None
    product: Sourced[str] | None
    """``nvidia.com/gpu.product`` as written (what a ``nodeSelector`` takes)."""
    parent_product: str | None
    """The product without ``-MIG-<profile>`` and ``-SHARED`` (the catalog's GFD name)."""
    memory_mib: Sourced[int] | None
    """Per GPU; per MIG device under the single strategy."""
    count: Sourced[int] | None
    compute_capability: Sourced[tuple[int, int]] | None
    family: str | None
    mig_strategy: Literal["none", "single", "mixed"]
    mig_profile: str | None
    """The profile every device has under the single strategy."""
    mig_invalid: bool
    """GFD found a MIG layout the single strategy cannot describe (``-MIG-INVALID``)."""
    mig_devices: tuple[MigDevices, ...]
    sharing: Sharing
    allocatable: Mapping[str, int] = field(default_factory=dict)
    """GPU resources the scheduler can hand out (``status.allocatable``)."""
    memory_bytes: int | None = None
    """Host memory the scheduler can hand out (``status.allocatable.memory``)."""
    driver_version: str | None = None
    labels_source: str = "metadata.labels"

    @property
    def has_gpus(self) -> bool:
        return self.product is not None or bool(self.allocatable) or bool(self.mig_devices)


def _int_label(labels: Mapping[str, str], key: str, where: str) -> Sourced[int] | None:
    value = labels.get(key)
    if value is None or not value.strip().isdigit():
        return None
    return Sourced(int(value), f'{where}["{key}"]')


def _sharing(labels: Mapping[str, str], base: str, where: str, shared_suffix: bool) -> Sharing:
    replicas_label = _int_label(labels, f"{base}.replicas", where)
    replicas = replicas_label.value if replicas_label and replicas_label.value > 0 else 1
    strategy_key = f"{base}.sharing-strategy"
    written = labels.get(strategy_key)
    source = f'{where}["{strategy_key}"]'
    if written in ("time-slicing", "mps", "none"):
        strategy: SharingStrategy = written  # type: ignore[assignment]
    elif replicas > 1 or shared_suffix:
        # GFD before v0.15 wrote no sharing-strategy label; time-slicing was the only kind.
        strategy = "time-slicing"
        origin = replicas_label.source if replicas_label else where
        source = f"{origin} (no sharing-strategy label: time-slicing assumed)"
    else:
        strategy = "none"
    if strategy == "mps":
        return Sharing(
            strategy,
            replicas,
            source,
            memory_isolated=True,
            memory_fraction=1 / replicas,
            note=f"MPS limits each of the {replicas} replicas to 1/{replicas} of the memory",
        )
    if strategy == "time-slicing":
        return Sharing(
            strategy,
            replicas,
            source,
            memory_isolated=False,
            memory_fraction=1 / replicas,
            note=(
                f"time-slicing isolates no memory: {replicas} pods share each GPU's memory and "
                "none is reserved for a pod, so a fit holds only if the others leave room"
            ),
        )
    return Sharing("none", 1, source, memory_isolated=True, memory_fraction=1.0, note="not shared")


def _split_product(value: str) -> tuple[str, str | None, bool, bool]:
    """(parent product, MIG profile, invalid MIG layout, -SHARED suffix)."""
    shared = value.endswith(_SHARED_SUFFIX)
    core = value[: -len(_SHARED_SUFFIX)] if shared else value
    match = _MIG_PRODUCT.match(core)
    if match is None:
        return core, None, False, shared
    profile = match.group("profile")
    if profile == "INVALID":
        return match.group("parent"), None, True, shared
    return match.group("parent"), profile, False, shared


def _allocatable(status: object) -> dict[str, int]:
    out: dict[str, int] = {}
    entries = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(entries, Mapping):
        return out
    for name, raw in entries.items():
        if not isinstance(name, str) or not (
            name.startswith("nvidia.com/gpu") or name.startswith("nvidia.com/mig-")
        ):
            continue
        text = str(raw).strip()
        if text.isdigit():
            out[name] = int(text)
    return out


def read_node(node: object) -> NodeGpus | ReadProblem:
    """Read a Kubernetes Node object, or a mapping of its labels; never raises."""
    if not isinstance(node, Mapping):
        return ReadProblem("node", "expected a Node object or a mapping of labels")
    name: str | None = None
    allocatable: dict[str, int] = {}
    host_memory: int | None = None
    if node.get("kind") == "Node" or "metadata" in node or "status" in node:
        metadata = node.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        raw_labels = metadata.get("labels")
        name = metadata.get("name") if isinstance(metadata.get("name"), str) else None
        allocatable = _allocatable(node.get("status"))
        status = node.get("status")
        if isinstance(status, Mapping) and isinstance(status.get("allocatable"), Mapping):
            host_memory = memory_bytes(status["allocatable"].get("memory"))
        where = "metadata.labels"
    else:
        raw_labels = node
        where = "labels"
    if raw_labels is None:
        raw_labels = {}
    if not isinstance(raw_labels, Mapping):
        return ReadProblem(where, "labels must be a mapping of strings")
    labels = {k: v for k, v in raw_labels.items() if isinstance(k, str) and isinstance(v, str)}

    product_value = labels.get(f"{_PREFIX}gpu.product")
    product = Sourced(product_value, f'{where}["{_PREFIX}gpu.product"]') if product_value else None
    if product is None:
        # No GPU Feature Discovery: the provider's own labels (GKE, instance type, Karpenter).
        found = node_product(labels, where)
        if found is not None:
            product_value = found[0]
            product = Sourced(found[0], found[1])
    parent, profile, invalid, shared = _split_product(product_value or "")

    strategy_label = labels.get(f"{_PREFIX}mig.strategy")
    mig_strategy: Literal["none", "single", "mixed"] = (
        strategy_label if strategy_label in ("single", "mixed") else "none"  # type: ignore[assignment]
    )
    if profile is not None and mig_strategy == "none":
        mig_strategy = "single"  # the product suffix is only written under the single strategy

    major = _int_label(labels, f"{_PREFIX}gpu.compute.major", where)
    minor = _int_label(labels, f"{_PREFIX}gpu.compute.minor", where)
    capability = (
        Sourced((major.value, minor.value), f"{major.source}, {minor.source}")
        if major is not None and minor is not None
        else None
    )
    count = _int_label(labels, f"{_PREFIX}gpu.count", where)
    memory = _int_label(labels, f"{_PREFIX}gpu.memory", where)

    devices: list[MigDevices] = []
    if profile is not None and count is not None:
        sharing_single = _sharing(labels, f"{_PREFIX}gpu", where, shared)
        devices.append(
            MigDevices(
                profile,
                count.value,
                f"{_PREFIX}gpu",
                memory.value if memory else None,
                count.source,
                replicas=sharing_single.replicas,
                allocatable=allocatable.get(f"{_PREFIX}gpu"),
            )
        )
    for key in sorted(labels):
        match = _MIG_LABEL.match(key)
        if match is None:
            continue
        mig = match.group("profile")
        base = f"{_PREFIX}mig-{mig}"
        mig_count = _int_label(labels, key, where)
        if mig_count is None:
            continue
        mig_memory = _int_label(labels, f"{base}.memory", where)
        mig_shared = labels.get(f"{base}.product", "").endswith(_SHARED_SUFFIX)
        devices.append(
            MigDevices(
                mig,
                mig_count.value,
                base,
                mig_memory.value if mig_memory else None,
                mig_count.source,
                replicas=_sharing(labels, base, where, mig_shared).replicas,
                allocatable=allocatable.get(base),
            )
        )
    family = labels.get(f"{_PREFIX}gpu.family")
    driver = labels.get(f"{_PREFIX}cuda.driver-version.full")
    if driver is None and f"{_PREFIX}cuda.driver.major" in labels:
        driver = ".".join(
            labels.get(f"{_PREFIX}cuda.driver.{part}", "") for part in ("major", "minor", "rev")
        ).rstrip(".")
    return NodeGpus(
        name=name,
        product=product,
        parent_product=parent or None,
        memory_mib=memory if memory and memory.value > 0 else None,
        count=count,
        compute_capability=capability,
        family=family,
        mig_strategy=mig_strategy,
        mig_profile=profile,
        mig_invalid=invalid,
        mig_devices=tuple(devices),
        sharing=_sharing(labels, f"{_PREFIX}gpu", where, shared),
        allocatable=allocatable,
        memory_bytes=host_memory,
        driver_version=driver,
        labels_source=where,
    )
