"""GPUs pinned and labelled the way clouds and provisioners do it (service/workloads/cloud_gpus.py).

Label names and values from their public sources: GKE's ``cloud.google.com/gke-accelerator``
(cloud.google.com/kubernetes-engine/docs/how-to/gpus), the well-known
``node.kubernetes.io/instance-type``, Karpenter's ``karpenter.k8s.aws/instance-gpu-name`` and
``-gpu-memory`` (aws/karpenter-provider-aws website/content/en/docs/reference/instance-types.md).
Pods and nodes are built with the official client's models.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from service.catalog.gpu_catalog import load_gpu_catalog
from service.workloads import cloud_gpus
from service.workloads.kubernetes import WorkloadReading, read_workloads
from service.workloads.nodes import NodeGpus, read_node
from tests.workloads.objects import container

ToJson = Callable[[object], Any]
TABLE = Path(cloud_gpus.__file__).with_name("cloud_gpus.toml")


def _table_products() -> list[tuple[str, str, int | None]]:
    """(where, product, memory MiB) of every row of the table, read from the file itself."""
    data = tomllib.loads(TABLE.read_text())
    rows: list[tuple[str, str, int | None]] = []
    for label in data["label"]:
        for value, products in label["values"].items():
            rows += [
                (f"{label['key']}={value}", p["product"], p.get("memory_mib")) for p in products
            ]
    for family in data["instance_types"]:
        rows += [(name, row["product"], None) for name, row in family["types"].items()]
    for name, products in data["ray_accelerator_types"]["values"].items():
        rows += [(f"ray accelerator_type={name}", product, None) for product in products]
    return rows


@pytest.mark.parametrize(("where", "product", "memory_mib"), _table_products())
def test_every_product_of_the_table_is_a_catalog_gpu_label(
    where: str, product: str, memory_mib: int | None
) -> None:
    catalog = load_gpu_catalog()
    labels = {gpu.k8s_product_label: gpu for gpu in catalog.all() if gpu.k8s_product_label}
    assert product in labels, f"{where}: {product} is no k8s_product_label of the catalog"
    if memory_mib is not None:
        # The provisioner's memory figure names the same card the catalog holds (within 7%:
        # EC2 reports MiB after its own reservation, the catalog the driver's total).
        catalog_mib = labels[product].memory_mib
        assert abs(memory_mib - catalog_mib) / catalog_mib < 0.07, (where, catalog_mib)


def test_every_row_names_its_source() -> None:
    data = tomllib.loads(TABLE.read_text())
    for section in data["label"] + data["instance_types"]:
        assert len(section["source"]) > 40


def _pod(to_json: ToJson, *, selector: dict[str, str] | None = None, affinity: Any = None) -> Any:
    spec = k8s.V1PodSpec(
        containers=[
            container(
                "vllm",
                args=["meta-llama/Llama-3.3-70B-Instruct", "--max-model-len", "4096"],
                gpus={"nvidia.com/gpu": "1"},
            )
        ],
        node_selector=selector,
        affinity=affinity,
    )
    return to_json(
        k8s.V1Pod(api_version="v1", kind="Pod", metadata=k8s.V1ObjectMeta(name="p"), spec=spec)
    )


def _affinity(key: str, values: list[str], operator: str = "In") -> Any:
    return k8s.V1Affinity(
        node_affinity=k8s.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                node_selector_terms=[
                    k8s.V1NodeSelectorTerm(
                        match_expressions=[
                            k8s.V1NodeSelectorRequirement(key=key, operator=operator, values=values)
                        ]
                    )
                ]
            )
        )
    )


def _products(obj: Any) -> tuple[tuple[str, ...], str] | None:
    reading = read_workloads(obj)
    assert isinstance(reading, WorkloadReading), reading
    selector = reading.workloads[0].gpu_product
    return None if selector is None else (selector.values, selector.source)


def test_gke_accelerator_in_the_node_selector_pins_the_product(to_json: ToJson) -> None:
    found = _products(_pod(to_json, selector={"cloud.google.com/gke-accelerator": "nvidia-l4"}))
    assert found is not None
    assert found[0] == ("NVIDIA-L4",)
    assert 'nodeSelector["cloud.google.com/gke-accelerator"] (nvidia-l4 = NVIDIA-L4)' in found[1]


def test_instance_types_in_required_affinity_pin_their_gpus(to_json: ToJson) -> None:
    affinity = _affinity("node.kubernetes.io/instance-type", ["p4d.24xlarge", "p5.48xlarge"])
    found = _products(_pod(to_json, affinity=affinity))
    assert found is not None
    assert found[0] == ("NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3")


def test_an_instance_type_the_table_does_not_know_leaves_the_gpu_open(to_json: ToJson) -> None:
    affinity = _affinity("node.kubernetes.io/instance-type", ["g6.xlarge", "p9.96xlarge"])
    assert _products(_pod(to_json, affinity=affinity)) is None


def test_karpenter_gpu_name_pins_every_gpu_of_that_name(to_json: ToJson) -> None:
    found = _products(_pod(to_json, selector={"karpenter.k8s.aws/instance-gpu-name": "a100"}))
    assert found is not None
    assert found[0] == ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB")


def test_selector_and_affinity_must_both_hold(to_json: ToJson) -> None:
    obj = _pod(
        to_json,
        selector={"karpenter.k8s.aws/instance-gpu-name": "a100"},
        affinity=_affinity("node.kubernetes.io/instance-type", ["p4de.24xlarge"]),
    )
    found = _products(obj)
    assert found is not None and found[0] == ("NVIDIA-A100-SXM4-80GB",)


def test_a_gke_value_the_table_does_not_map_stays_as_written(to_json: ToJson) -> None:
    found = _products(
        _pod(to_json, selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-p100"})
    )
    assert found is not None and found[0] == ("nvidia-tesla-p100",)


def test_not_in_on_an_instance_type_excludes_no_gpu(to_json: ToJson) -> None:
    obj = _pod(
        to_json, affinity=_affinity("node.kubernetes.io/instance-type", ["g6.xlarge"], "NotIn")
    )
    assert _products(obj) is None


def _node(to_json: ToJson, labels: dict[str, str]) -> NodeGpus:
    node = read_node(to_json(k8s.V1Node(metadata=k8s.V1ObjectMeta(name="n", labels=labels))))
    assert isinstance(node, NodeGpus), node
    return node


@pytest.mark.parametrize(
    ("labels", "product"),
    [
        ({"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}, "NVIDIA-H100-80GB-HBM3"),
        ({"node.kubernetes.io/instance-type": "g6e.12xlarge"}, "NVIDIA-L40S"),
        ({"node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"}, "NVIDIA-A100-80GB-PCIe"),
        (
            {
                "karpenter.k8s.aws/instance-gpu-name": "a100",
                "karpenter.k8s.aws/instance-gpu-memory": "81920",
            },
            "NVIDIA-A100-SXM4-80GB",
        ),
        # GFD's label wins where both are present.
        (
            {
                "nvidia.com/gpu.product": "NVIDIA-L4",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
            },
            "NVIDIA-L4",
        ),
    ],
)
def test_nodes_without_gfd_are_read_from_their_provider_labels(
    to_json: ToJson, labels: dict[str, str], product: str
) -> None:
    node = _node(to_json, labels)
    assert node.product is not None and node.product.value == product


@pytest.mark.parametrize(
    "labels",
    [
        # Karpenter's "a100" without the memory that tells the two cards apart.
        {"karpenter.k8s.aws/instance-gpu-name": "a100"},
        # A fractional L4 (g6f.large: 2861 MiB), not a whole L4.
        {
            "karpenter.k8s.aws/instance-gpu-name": "l4",
            "karpenter.k8s.aws/instance-gpu-memory": "2861",
        },
        {"node.kubernetes.io/instance-type": "m5.large"},
    ],
)
def test_provider_labels_that_do_not_name_one_gpu_name_none(
    to_json: ToJson, labels: dict[str, str]
) -> None:
    assert _node(to_json, labels).product is None
