"""The GPU a node label names, however the cluster's provider writes it.

GPU Feature Discovery writes ``nvidia.com/gpu.product``; clouds and provisioners write their
own names: GKE's ``cloud.google.com/gke-accelerator`` (``nvidia-l4``), the well-known
``node.kubernetes.io/instance-type`` (``g6.xlarge``, ``a3-highgpu-8g``,
``Standard_NC24ads_A100_v4``), Karpenter's ``karpenter.k8s.aws/instance-gpu-name`` (``a100``,
told apart by ``karpenter.k8s.aws/instance-gpu-memory``). Each name maps, as data
(``cloud_gpus.toml``, every row with its source), to the product name GPU Feature Discovery
would write, which the GPU catalog resolves; pods pinned with those labels and nodes carrying
them are read the same way.

Plain Python; the table is read once, at import.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "GPU_PRODUCT_LABEL",
    "INSTANCE_TYPE_LABELS",
    "LABELS",
    "CloudProduct",
    "GpuLabel",
    "InstanceType",
    "exact_products",
    "instance_type",
    "node_product",
    "products_named",
    "ray_accelerator_products",
]

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# The well-known label and its deprecated beta name (kubernetes.io/docs/reference/labels-
# annotations-taints: node.kubernetes.io/instance-type; beta.kubernetes.io/instance-type).
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
_TABLE = Path(__file__).with_name("cloud_gpus.toml")


@dataclass(frozen=True)
class CloudProduct:
    """A GPU a label value may stand for, by its GPU Feature Discovery product name."""

    product: str
    memory_mib: int | None = None
    """The per-GPU memory the label's `memory_key` shows for it, where one name covers several
    GPUs (Karpenter's ``a100``)."""


@dataclass(frozen=True)
class GpuLabel:
    """A node label whose value names the GPU model."""

    key: str
    values: Mapping[str, tuple[CloudProduct, ...]]
    source: str
    memory_key: str | None = None


@dataclass(frozen=True)
class InstanceType:
    """A cloud instance type with GPUs: which, and how many per node."""

    name: str
    product: str
    gpus: int
    cloud: str
    source: str


def _load(
    path: Path,
) -> tuple[dict[str, GpuLabel], dict[str, InstanceType], dict[str, tuple[str, ...]]]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    labels: dict[str, GpuLabel] = {}
    for entry in data.get("label", []):
        values = {
            name: tuple(CloudProduct(p["product"], p.get("memory_mib")) for p in products)
            for name, products in entry["values"].items()
        }
        labels[entry["key"]] = GpuLabel(
            entry["key"], values, entry["source"], entry.get("memory_key")
        )
    types: dict[str, InstanceType] = {}
    for family in data.get("instance_types", []):
        for name, row in family["types"].items():
            types[name] = InstanceType(
                name, row["product"], row["gpus"], family["cloud"], family["source"]
            )
    ray = {
        name: tuple(products)
        for name, products in data.get("ray_accelerator_types", {}).get("values", {}).items()
    }
    return labels, types, ray


LABELS, _INSTANCE_TYPES, _RAY_ACCELERATORS = _load(_TABLE)


def ray_accelerator_products(name: str) -> tuple[str, ...]:
    """The GPU products a Ray accelerator type covers; a name the table does not map stays as
    written (reported as a GPU the catalog does not know)."""
    return _RAY_ACCELERATORS.get(name, (name,))


def instance_type(name: str) -> InstanceType | None:
    """The GPU instance type of this name, or None when the table holds none."""
    return _INSTANCE_TYPES.get(name)


def products_named(key: str, value: str) -> tuple[str, ...] | None:
    """The GPU products a node labelled ``key=value`` may carry, as GPU Feature Discovery names
    them; None when the label does not say (not a GPU label, or an instance type the table does
    not hold). A GPU label value the table does not map stays as written, so a pod pinned to it
    is reported as pinned to a GPU the catalog does not know."""
    if key == GPU_PRODUCT_LABEL:
        return (value,)
    if key in INSTANCE_TYPE_LABELS:
        found = instance_type(value)
        return None if found is None else (found.product,)
    label = LABELS.get(key)
    if label is None:
        return None
    products = label.values.get(value)
    return tuple(p.product for p in products) if products else (value,)


def exact_products(key: str) -> bool:
    """Whether excluding a value of this label excludes its GPUs (``NotIn``): true of labels
    naming the GPU model, not of instance types (another type may have the same GPU)."""
    return key == GPU_PRODUCT_LABEL or key in LABELS


def node_product(labels: Mapping[str, str], where: str) -> tuple[str, str] | None:
    """(product, where it was read) from a node's provider labels, for a node without GPU
    Feature Discovery's product label; None when none of them names a GPU the table knows."""
    for key in INSTANCE_TYPE_LABELS:
        value = labels.get(key)
        found = instance_type(value) if value else None
        if found is not None:
            return found.product, f'{where}["{key}"] ({value}: {found.gpus} x {found.product})'
    for key, label in LABELS.items():
        value = labels.get(key)
        products = label.values.get(value) if value else None
        if not products:
            continue
        memory = labels.get(label.memory_key or "")
        if memory is not None:
            # The memory tells the GPUs of one name apart, and a fractional slice from a GPU.
            products = tuple(p for p in products if str(p.memory_mib) == memory.strip())
        if len(products) != 1:
            continue
        return products[0].product, f'{where}["{key}"] ({value} = {products[0].product})'
    return None
