"""Reading GPU Feature Discovery labels. Label sets follow the examples of
NVIDIA/k8s-device-plugin ``docs/gpu-feature-discovery/README.md`` and ``README.md``
("Shared Access to GPUs"); nodes are built with the official client's ``V1Node``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from service.workloads.nodes import NodeGpus, read_node
from service.workloads.sources import ReadProblem

ToJson = Callable[[object], Any]


def _node(to_json: ToJson, labels: dict[str, str], allocatable: dict[str, str]) -> Any:
    return to_json(
        k8s.V1Node(
            api_version="v1",
            kind="Node",
            metadata=k8s.V1ObjectMeta(name="gpu-1", labels=labels),
            status=k8s.V1NodeStatus(allocatable={"cpu": "64", **allocatable}),
        )
    )


def _read(obj: object) -> NodeGpus:
    result = read_node(obj)
    assert isinstance(result, NodeGpus), result
    return result


def test_full_gpus(to_json: ToJson) -> None:
    labels = {
        "nvidia.com/cuda.driver.major": "455",
        "nvidia.com/cuda.driver.minor": "06",
        "nvidia.com/cuda.driver.rev": "",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.memory": "39538",
        "nvidia.com/gpu.product": "A100-SXM4-40GB",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
    }
    node = _read(_node(to_json, labels, {"nvidia.com/gpu": "8"}))
    assert node.name == "gpu-1"
    assert node.product is not None and node.product.value == "A100-SXM4-40GB"
    assert node.product.source == 'metadata.labels["nvidia.com/gpu.product"]'
    assert node.parent_product == "A100-SXM4-40GB"
    assert node.memory_mib is not None and node.memory_mib.value == 39538
    assert node.count is not None and node.count.value == 8
    assert node.compute_capability is not None and node.compute_capability.value == (8, 0)
    assert node.family == "ampere"
    assert node.driver_version == "455.06"
    assert node.mig_strategy == "none" and node.mig_devices == ()
    assert node.sharing.strategy == "none" and node.sharing.memory_isolated
    assert node.allocatable == {"nvidia.com/gpu": 8}
    assert node.has_gpus


def test_mig_single_strategy(to_json: ToJson) -> None:
    # README "MIG 'single' strategy": 8 GPUs cut into 7 x 1g.5gb = 56 devices of 5120 MB.
    labels = {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/gpu.count": "56",
        "nvidia.com/gpu.memory": "5120",
        "nvidia.com/gpu.multiprocessors": "14",
        "nvidia.com/gpu.slices.gi": "1",
        "nvidia.com/gpu.slices.ci": "1",
    }
    node = _read(_node(to_json, labels, {"nvidia.com/gpu": "56"}))
    assert node.mig_strategy == "single"
    assert node.parent_product == "A100-SXM4-40GB"
    assert node.mig_profile == "1g.5gb"
    (devices,) = node.mig_devices
    assert (devices.profile, devices.count, devices.memory_mib) == ("1g.5gb", 56, 5120)
    assert (devices.resource, devices.allocatable) == ("nvidia.com/gpu", 56)


def test_mig_single_invalid_layout() -> None:
    labels = {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-INVALID",
        "nvidia.com/gpu.count": "0",
        "nvidia.com/gpu.memory": "0",
        "nvidia.com/gpu.replicas": "0",
    }
    node = _read(labels)
    assert node.mig_invalid and node.mig_profile is None
    assert node.memory_mib is None
    assert node.labels_source == "labels"


def test_mig_mixed_strategy(to_json: ToJson) -> None:
    labels = {
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/mig-3g.40gb.count": "2",
        "nvidia.com/mig-3g.40gb.memory": "40192",
        "nvidia.com/mig-3g.40gb.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
        "nvidia.com/mig-1g.10gb.me.count": "1",
        "nvidia.com/mig-1g.10gb.me.memory": "9856",
    }
    node = _read(
        _node(to_json, labels, {"nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-1g.10gb.me": "1"})
    )
    assert node.mig_strategy == "mixed"
    assert node.memory_mib is not None and node.memory_mib.value == 81559
    by_profile = {d.profile: d for d in node.mig_devices}
    assert set(by_profile) == {"3g.40gb", "1g.10gb.me"}
    three = by_profile["3g.40gb"]
    assert (three.count, three.memory_mib, three.resource, three.allocatable) == (
        2,
        40192,
        "nvidia.com/mig-3g.40gb",
        2,
    )
    assert three.source == 'metadata.labels["nvidia.com/mig-3g.40gb.count"]'
    assert by_profile["1g.10gb.me"].profile_nvml == "1g.10gb+me"


def test_time_slicing_shares_memory_without_isolation(to_json: ToJson) -> None:
    labels = {
        "nvidia.com/gpu.product": "Tesla-T4-SHARED",
        "nvidia.com/gpu.memory": "15360",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    node = _read(_node(to_json, labels, {"nvidia.com/gpu": "4"}))
    assert node.parent_product == "Tesla-T4"
    assert node.sharing.strategy == "time-slicing"
    assert node.sharing.replicas == 4
    assert not node.sharing.memory_isolated
    assert "isolates no memory" in node.sharing.note


def test_mps_limits_each_replica() -> None:
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.replicas": "2",
        "nvidia.com/gpu.sharing-strategy": "mps",
    }
    sharing = _read(labels).sharing
    assert sharing.strategy == "mps" and sharing.memory_isolated
    assert sharing.memory_fraction == 0.5


def test_old_labeller_without_sharing_strategy_means_time_slicing() -> None:
    sharing = _read(
        {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "3"}
    ).sharing
    assert sharing.strategy == "time-slicing" and "assumed" in sharing.source


def test_node_without_gpu_labels(to_json: ToJson) -> None:
    node = _read(_node(to_json, {"kubernetes.io/os": "linux"}, {}))
    assert not node.has_gpus
    assert node.product is None and node.memory_mib is None


@pytest.mark.parametrize("bad", [None, [], "node", {"metadata": {"labels": ["a"]}}])
def test_unreadable_node(bad: object) -> None:
    assert isinstance(read_node(bad), ReadProblem)
