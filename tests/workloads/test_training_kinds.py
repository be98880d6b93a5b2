"""Kubernetes objects that run training jobs, read into trainer containers with their pods,
GPUs and world size. Field names from the published API types (cited in
service/workloads/training/kinds.py); pod specs built with the official client's models."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from service.workloads.kubernetes import read_workloads
from service.workloads.quantities import memory_bytes
from service.workloads.training.kinds import TrainingReading
from service.workloads.training.objects import read_training
from tests.workloads.objects import container, pod_spec

TRL = "trl sft --model_name_or_path Qwen/Qwen2.5-7B --use_peft"


def spec_json(*containers: Any, product: str | None = None) -> Any:
    return k8s.ApiClient().sanitize_for_serialization(pod_spec(*containers, product=product))


def trainer(command: str, gpus: str = "1", **kwargs: Any) -> Any:
    return container(
        "trainer",
        image="trainer",
        command=["sh", "-c", command],
        gpus={"nvidia.com/gpu": gpus},
        **kwargs,
    )


def read(obj: Any) -> TrainingReading:
    found = read_training(obj)
    assert isinstance(found, TrainingReading), found
    return found


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        ("16Gi", 16 * 2**30),
        ("500M", 500 * 10**6),
        ("1.5Gi", 3 * 2**29),
        ("128974848", 128974848),
        ("129e6", 129 * 10**6),
        ("123Mi", 123 * 2**20),
        ("100m", 1),  # 0.1 byte, rounded up as the kubelet does
        (1024, 1024),
        ("lots", None),
        ("-1Gi", None),
    ],
)
def test_memory_quantities(quantity: object, expected: int | None) -> None:
    # k8s.io/apimachinery pkg/api/resource/quantity.go: binary and decimal suffixes, exponents.
    assert memory_bytes(quantity) == expected


def test_job_with_plain_python_counts_one_rank_per_pod() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}},
        "spec": {
            "parallelism": 4,
            "template": {
                "spec": spec_json(trainer("python train.py --model_name_or_path m/x --bf16"))
            },
        },
    }
    (workload,) = read(job).workloads
    assert workload.pods.value == 4 and workload.nodes.value == 4
    assert workload.command.launch.nnodes.value == 4  # one process per pod, four pods
    assert any("Kueue queue gpu-queue" in note for note in workload.notes)


def test_jobset_replicated_jobs_with_torchrun() -> None:
    command = "torchrun --nnodes 4 --nproc_per_node 8 train.py --model_name_or_path m/x"
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "template": {"spec": spec_json(trainer(command, "8"))},
                        }
                    },
                }
            ]
        },
    }
    (workload,) = read(jobset).workloads
    assert workload.pods.value == 4  # 2 Jobs × 2 pods
    assert workload.command.launch.nnodes.value == 4
    assert workload.role == "workers"


def test_kueue_workload_pod_sets() -> None:
    workload_obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w"},
        "spec": {
            "podSets": [
                {"name": "main", "count": 2, "template": {"spec": spec_json(trainer(TRL, "4"))}}
            ]
        },
    }
    (found,) = read(workload_obj).workloads
    assert found.pods.value == 2 and found.gpus is not None and found.gpus.count == 4


def test_rayjob_runs_the_entrypoint_on_the_gpu_workers() -> None:
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "r"},
        "spec": {
            "entrypoint": "llamafactory-cli train cfg.yaml",
            "runtimeEnvYAML": "env_vars:\n  USE_RAY: '1'\n",
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": spec_json(container("head", image="ray"))}},
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": 3,
                        "template": {
                            "spec": spec_json(
                                container("worker", image="ray", gpus={"nvidia.com/gpu": "2"})
                            )
                        },
                    }
                ],
            },
        },
    }
    (found,) = read(rayjob).workloads
    assert found.role == "gpu" and found.nodes.value == 3
    assert found.command.trainer == "llamafactory"
    assert found.command.launch.nproc_per_node.value is None  # every worker GPU
    assert found.command.env["USE_RAY"].source == "spec.runtimeEnvYAML env_vars.USE_RAY"


def test_configmaps_mount_with_items_and_subpath() -> None:
    mounts = [
        k8s.V1VolumeMount(name="a", mount_path="/etc/recipes"),
        k8s.V1VolumeMount(name="b", mount_path="/cfg/ds.json", sub_path="ds.json"),
    ]
    command = "llamafactory-cli train /etc/recipes/lora.yaml"
    spec = pod_spec(
        container("t", image="lf", command=["sh", "-c", command], gpus={"nvidia.com/gpu": "1"}),
        product="NVIDIA-H100-80GB-HBM3",
    )
    spec.containers[0].volume_mounts = mounts
    spec.volumes = [
        k8s.V1Volume(
            name="a",
            config_map=k8s.V1ConfigMapVolumeSource(
                name="recipes", items=[k8s.V1KeyToPath(key="qwen", path="lora.yaml")]
            ),
        ),
        k8s.V1Volume(name="b", config_map=k8s.V1ConfigMapVolumeSource(name="ds")),
    ]
    pod = k8s.ApiClient().sanitize_for_serialization(
        k8s.V1Pod(api_version="v1", kind="Pod", metadata=k8s.V1ObjectMeta(name="p"), spec=spec)
    )
    recipe = "model_name_or_path: Qwen/Qwen3-4B\nfinetuning_type: full\ndeepspeed: /cfg/ds.json\n"
    maps = [
        {"kind": "ConfigMap", "metadata": {"name": "recipes"}, "data": {"qwen": recipe}},
        {
            "kind": "ConfigMap",
            "metadata": {"name": "ds"},
            "data": {"ds.json": '{"zero_optimization": {"stage": 2}}'},
        },
    ]
    (found,) = read({"kind": "List", "items": [*maps, pod]}).workloads
    settings = found.command.settings
    assert settings["method"].value == "full" and settings["zero_stage"].value == 2
    sources = [c.read_from for c in found.command.configs]
    assert sources == [
        "ConfigMap recipes key qwen at /etc/recipes/lora.yaml",
        "ConfigMap ds key ds.json",
    ]


def test_training_kinds_are_read_for_serving_too() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "serve"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "leader",
                    "template": {
                        "spec": {
                            "template": {
                                "spec": spec_json(
                                    container(
                                        "vllm",
                                        args=["--model", "meta-llama/Llama-3.1-8B-Instruct"],
                                        gpus={"nvidia.com/gpu": "1"},
                                    )
                                )
                            }
                        }
                    },
                }
            ]
        },
    }
    reading = read_workloads(jobset)
    assert not isinstance(reading, Exception) and getattr(reading, "workloads", ())
    assert read_training(jobset) is None
