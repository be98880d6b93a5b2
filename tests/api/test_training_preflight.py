"""POST /v1/preflight with training jobs: trainer commands, their real configs, PyTorchJob and
TrainJob objects.

Each verdict's per-GPU bytes are checked against ``POST /v1/estimate/finetune`` on a body
written out here from what the trainer's own definitions say the command does (the readers'
tests cite them), never against the body the service built. Objects follow the published API
types (kubeflow/training-operator v1.9.0 ``pytorch_types.go``, kubeflow/trainer
``trainjob_types.go``); pod specs are built with the official client's models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kubernetes import client as k8s

from service.estimator.calibration import value as calibrated
from tests.api.k8s_objects import pod_spec, to_json

DATA = Path(__file__).parents[1] / "workloads" / "data" / "training"
H100 = "NVIDIA-H100-80GB-HBM3"


def text(name: str) -> str:
    return (DATA / name).read_text()


def preflight(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/preflight", json=body)
    assert response.status_code == 200, response.text[:800]
    answer = response.json()
    assert answer["results"] == []
    return answer  # type: ignore[no-any-return]


def finetune(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/estimate/finetune", json=body)
    assert response.status_code == 200, response.text[:800]
    return response.json()  # type: ignore[no-any-return]


def per_gpu(result: dict[str, Any]) -> int:
    return int(result["estimate"]["per_gpu"]["total_bytes"])


# The fields each trainer sets by default, worked out from its definitions (see the readers'
# tests): TRL (ModelConfig.dtype float32, _BaseConfig bf16, fused AdamW, SDPA).
TRL_LORA_QWEN = {
    "model": "Qwen/Qwen2.5-7B",
    "method": "lora",
    "lora": {"rank": 32, "target_modules": ["q_proj", "v_proj"]},
    "weight_format": "fp32",
    "precision": "bf16-mixed",
    "optimizer": "adamw",
    "optimizer_foreach": False,
    "batch_size": 4,
    "sequence_length": 2048,
    "gradient_checkpointing": "full",
    "attention": "sdpa",
}
TRL_COMMAND = (
    "trl sft --model_name_or_path Qwen/Qwen2.5-7B --per_device_train_batch_size 4 "
    "--max_length 2048 --use_peft --lora_r 32 --gradient_checkpointing"
)
# axolotl examples/llama-3/lora-8b.yml under torchrun with 8 processes.
AXOLOTL_LORA_8B = {
    "model": "meta-llama/Meta-Llama-3-8B",
    "method": "qlora",
    "weight_format": "int8",
    "kbit_preparation": "peft",
    "lora": {"rank": 32, "target_modules": "all-linear"},
    "precision": "bf16-mixed",
    "optimizer": "adamw-8bit",
    "optimizer_foreach": False,
    "batch_size": 2,
    "sequence_length": 4096,
    "gradient_checkpointing": "full",
    "attention": "flash",
}


def test_trl_sft_command(client: TestClient) -> None:
    answer = preflight(client, {"command": TRL_COMMAND, "gpu": H100})
    (result,) = answer["training"]
    assert answer["kind"] == "command"
    expected = finetune(client, {**TRL_LORA_QWEN, "gpu": H100, "gpu_count": 1})
    assert per_gpu(result) == expected["per_gpu"]["total_bytes"]
    assert result["verdict"] == ("fits" if expected["fit"]["fits"] else "does_not_fit")
    read = {o["name"]: o for o in result["options"]}
    assert read["lora_r"] == {
        "name": "lora_r",
        "value": 32,
        "source": "command word 10",
        "priced": True,
        "note": "",
        "target": "lora.rank",
    }
    # TRL's chunked_nll loss is not modelled: the verdict is marked so.
    assert "loss_implementation" in result["unpriced"] and not result["exact"]


def test_torchrun_axolotl_command(client: TestClient) -> None:
    body = {
        "command": "torchrun --nproc_per_node 8 -m axolotl.cli.train config.yml",
        "files": {"config.yml": text("axolotl_lora-8b.yml")},
        "model": "meta-llama/Meta-Llama-3-8B",
        "gpu": H100,
    }
    (result,) = preflight(client, body)["training"]
    assert result["launcher"]["world_size"] == 8
    expected = finetune(client, {**AXOLOTL_LORA_8B, "gpu": H100, "gpu_count": 8})
    assert per_gpu(result) == expected["per_gpu"]["total_bytes"]
    assert result["configs"] == [
        {
            "path": "config.yml",
            "named_at": "command word 5",
            "role": "axolotl config",
            "read_from": "files['config.yml']",
        }
    ]


def test_llamafactory_command(client: TestClient) -> None:
    body = {
        "command": "llamafactory-cli train examples/train_lora/qwen3_lora_sft.yaml",
        "files": {"examples/train_lora/qwen3_lora_sft.yaml": text("lf_qwen3_lora_sft.yaml")},
        "gpu": H100,
        "gpu_count": 4,
    }
    (result,) = preflight(client, body)["training"]
    # LLaMA-Factory examples/train_lora/qwen3_lora_sft.yaml with its hparams defaults.
    expected = finetune(
        client,
        {
            "model": "Qwen/Qwen3-4B-Instruct-2507",
            "method": "lora",
            "lora": {"rank": 8, "target_modules": "all-linear"},
            "weight_format": "bf16",
            "precision": "bf16-mixed",
            "optimizer": "adamw",
            "optimizer_foreach": False,
            "batch_size": 1,
            "sequence_length": 2048,
            "gradient_checkpointing": "full",
            "attention": "sdpa",
            "gpu": H100,
            "gpu_count": 4,
        },
    )
    assert per_gpu(result) == expected["per_gpu"]["total_bytes"]
    assert result["exact"] is True
    assert result["launcher"]["nproc_per_node"]["value"] == 4


def test_accelerate_fsdp_command(client: TestClient) -> None:
    command = (
        "accelerate launch --config_file fsdp.yaml train.py --model_name_or_path "
        "meta-llama/Llama-3.1-8B"
    )
    body = {"command": command, "files": {"fsdp.yaml": text("accelerate_fsdp.yaml")}, "gpu": H100}
    (result,) = preflight(client, body)["training"]
    # accelerate's examples/config_yaml_templates/fsdp.yaml: 2 processes, FSDP1 FULL_SHARD
    # (ZeRO stage 3), bf16 mixed precision; the script's TrainingArguments defaults.
    expected = finetune(
        client,
        {
            "model": "meta-llama/Llama-3.1-8B",
            "method": "full",
            "precision": "bf16-mixed",
            "zero_stage": 3,
            "sharding_implementation": "deepspeed",
            "optimizer": "adamw",
            "optimizer_foreach": False,
            "batch_size": 8,
            "sequence_length": 2048,
            "attention": "sdpa",
            "gpu": H100,
            "gpu_count": 2,
        },
    )
    assert per_gpu(result) == expected["per_gpu"]["total_bytes"]
    # Without the file: named as unknown, priced unsharded, never grounds for a refusal.
    (unknown,) = preflight(client, {"command": command, "gpu": H100})["training"]
    assert unknown["configs"][0]["read_from"] is None and "fsdp.yaml" in unknown["unpriced"]
    assert unknown["refusable"] is False


def _axolotl_pytorchjob() -> dict[str, Any]:
    """kubeflow/training-operator examples/pytorch/deepspeed-demo's shape (Master and Worker
    running torchrun), with the axolotl command, 8 GPUs per pod and its config in a
    ConfigMap."""

    def replica() -> Any:
        spec = pod_spec(
            k8s.V1Container(
                name="pytorch",
                image="axolotlai/axolotl:main-latest",
                command=["torchrun", "-m", "axolotl.cli.train", "/etc/axolotl/config.yml"],
                resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "8"}),
                volume_mounts=[k8s.V1VolumeMount(name="config", mount_path="/etc/axolotl")],
            ),
            product=H100,
        )
        spec.volumes = [
            k8s.V1Volume(name="config", config_map=k8s.V1ConfigMapVolumeSource(name="axolotl"))
        ]
        return {"replicas": 1, "template": to_json(k8s.V1PodTemplateSpec(spec=spec))}

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama3-lora", "namespace": "ml"},
        "spec": {
            "nprocPerNode": "8",
            "pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()},
        },
    }
    config_map = to_json(
        k8s.V1ConfigMap(
            api_version="v1",
            kind="ConfigMap",
            metadata=k8s.V1ObjectMeta(name="axolotl"),
            data={"config.yml": text("axolotl_lora-8b.yml")},
        )
    )
    return {"apiVersion": "v1", "kind": "List", "items": [config_map, job]}


def test_pytorchjob_wrapping_axolotl(client: TestClient) -> None:
    answer = preflight(
        client, {"object": _axolotl_pytorchjob(), "model": "meta-llama/Meta-Llama-3-8B"}
    )
    assert answer["kind"] == "PyTorchJob"
    roles = {r["role"]: r for r in answer["training"]}
    assert set(roles) == {"Master", "Worker"}
    # PET_NNODES = 2 replicas, PET_NPROC_PER_NODE = nprocPerNode 8: 16 ranks.
    expected = finetune(client, {**AXOLOTL_LORA_8B, "gpu": H100, "gpu_count": 16})
    for result in roles.values():
        assert result["launcher"]["world_size"] == 16
        assert per_gpu(result) == expected["per_gpu"]["total_bytes"]
        assert result["gpu"] == {"values": [H100], "source": result["gpu"]["source"]}
        assert result["configs"][0]["read_from"].startswith("ConfigMap axolotl key config.yml")


def test_trainjob_wrapping_trl(client: TestClient) -> None:
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "qwen-lora"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"},
            "trainer": {
                "command": TRL_COMMAND.split(),
                "numNodes": 1,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}},
            },
            "runtimePatches": [
                {
                    "manager": "alice",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": "node",
                                        "template": {
                                            "spec": {
                                                "template": {
                                                    "spec": {
                                                        "nodeSelector": {
                                                            "nvidia.com/gpu.product": H100
                                                        }
                                                    }
                                                }
                                            }
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }
    answer = preflight(client, {"object": trainjob})
    (result,) = answer["training"]
    # trl launches accelerate: one process per visible GPU, 4 here.
    assert result["launcher"]["world_size"] == 4
    expected = finetune(client, {**TRL_LORA_QWEN, "gpu": H100, "gpu_count": 4})
    assert per_gpu(result) == expected["per_gpu"]["total_bytes"]
    assert result["gpus"]["source"] == 'spec.trainer.resourcesPerNode.limits["nvidia.com/gpu"]'
    assert result["path"] == "spec.trainer"


def test_the_torch_distributed_runtime_sets_the_default_node_count(client: TestClient) -> None:
    import yaml

    runtime = yaml.safe_load(text("kubeflow_torch_distributed_runtime.yaml"))
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "command": [
                    "torchrun",
                    "train.py",
                    "--model_name_or_path",
                    "meta-llama/Llama-3.1-8B",
                ],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}},
            },
        },
    }
    listed = {"apiVersion": "v1", "kind": "List", "items": [runtime, trainjob]}
    (result,) = preflight(client, {"object": listed, "gpu": H100})["training"]
    # mlPolicy.numNodes 1; numProcPerNode defaults to auto: one per GPU of the node.
    assert result["launcher"]["nnodes"]["value"] == 1
    assert result["launcher"]["world_size"] == 2


def test_zero3_on_8_gpus_saves_what_the_sharding_rules_say(client: TestClient) -> None:
    """ZeRO-3 over 8 GPUs against plain data parallelism, fp32 throughout (no mixed precision,
    so the dtypes match and only the sharding differs). service/estimator/training/sharding.py
    (DeepSpeed ZeRO stage 3): parameters, gradients and optimizer states are split over the 8
    ranks; each rank also holds the gathered parameters of two modules (the largest linear of
    a decoder layer, the MLP's hidden × intermediate) and a gradient reduce bucket of hidden²
    elements; the caching allocator's fragmentation (training.fragmentation_fraction) applies
    to the allocated peak."""
    base = (
        "torchrun --nproc_per_node 8 train.py --model_name_or_path meta-llama/Llama-3.1-8B "
        "--dtype float32 --per_device_train_batch_size 1 --max_seq_length 1024 "
        "--gradient_checkpointing --optim adamw_torch_fused"
    )
    ds = {"ds.json": text("lf_ds_z3_config.json")}
    (sharded,) = preflight(
        client, {"command": f"{base} --deepspeed ds.json", "files": ds, "gpu": H100}
    )["training"]
    (plain,) = preflight(client, {"command": base, "gpu": H100})["training"]
    assert sharded["request"]["zero_stage"] == 3 and sharded["request"]["precision"] == "fp32"
    one = plain["estimate"]["per_gpu"]["breakdown"]
    three = sharded["estimate"]["per_gpu"]["breakdown"]
    hidden, intermediate, fp32, ranks = 4096, 14336, 4, 8  # Llama-3.1-8B config.json
    gathered = 2 * hidden * intermediate * fp32
    bucket = hidden * hidden * fp32
    assert three["optimizer_states"] == -(-one["optimizer_states"] // ranks)
    assert three["gradients"] == -(-one["gradients"] // ranks)
    assert three["weights"] == -(-one["weights"] // ranks) + gathered + bucket
    assert three["activations"] == one["activations"]
    saved = sum(one[k] - three[k] for k in ("weights", "gradients", "optimizer_states"))
    fragmentation = calibrated("training.fragmentation_fraction")
    difference = per_gpu(plain) - per_gpu(sharded)
    assert difference > 0
    assert abs(difference - saved * (1 + fragmentation)) <= 2  # integer rounding of two figures


def test_suggestions_are_priced_by_the_finetune_estimate(client: TestClient) -> None:
    command = (
        "torchrun train.py --model_name_or_path meta-llama/Llama-3.1-8B --dtype float32 "
        "--bf16 --per_device_train_batch_size 16 --max_seq_length 4096"
    )
    (result,) = preflight(client, {"command": command, "gpu": H100})["training"]
    assert result["verdict"] == "does_not_fit"
    changes = {s["change"]: s for s in result["suggestions"]}
    assert "gradient checkpointing" in changes and "LoRA instead of a full fine-tune" in changes
    for suggestion in changes.values():
        answer = finetune(client, {**suggestion["request"], "gpu": H100})
        assert suggestion["per_gpu_bytes"] == answer["fit"]["required_bytes"]
        assert suggestion["fits"] == answer["fit"]["fits"]
    assert changes["gradient checkpointing"]["how"] == "--gradient_checkpointing"


def test_host_memory_of_cpu_offload_against_the_pod_limit(client: TestClient) -> None:
    ds = text("lf_ds_z3_offload_config.json")
    spec = pod_spec(
        k8s.V1Container(
            name="trainer",
            image="pytorch/pytorch",
            command=[
                "torchrun",
                "--nproc_per_node",
                "4",
                "train.py",
                "--model_name_or_path",
                "meta-llama/Llama-3.1-8B",
                "--bf16",
                "--deepspeed",
                "/cfg/ds.json",
                "--per_device_train_batch_size",
                "2",
                "--max_seq_length",
                "1024",
                "--dataloader_num_workers",
                "4",
            ],
            resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "4", "memory": "16Gi"}),
            volume_mounts=[k8s.V1VolumeMount(name="cfg", mount_path="/cfg")],
        ),
        product=H100,
    )
    spec.volumes = [k8s.V1Volume(name="cfg", config_map=k8s.V1ConfigMapVolumeSource(name="ds"))]
    pod = to_json(
        k8s.V1Pod(api_version="v1", kind="Pod", metadata=k8s.V1ObjectMeta(name="p"), spec=spec)
    )
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ds"},
        "data": {"ds.json": ds},
    }
    listed = {"apiVersion": "v1", "kind": "List", "items": [config_map, pod]}
    (result,) = preflight(client, {"object": listed})["training"]
    host = result["host_memory"]
    # One node runs all 4 ranks: it holds all of the estimate's host bytes. The data loaders
    # pin, per rank, 4 workers × prefetch_factor 2 batches plus the one in use, each of
    # 2 × 1024 tokens × 3 int64 tensors.
    assert host["offload_bytes"] == result["estimate"]["cpu_bytes"] > 16 * 2**30
    assert host["pinned_bytes"] == 4 * (4 * 2 + 1) * 2 * 1024 * 3 * 8
    assert host["limit"] == {
        "value": 16 * 2**30,
        "source": "spec.containers[0].resources.limits.memory",
    }
    assert host["fits"] is False
    assert result["verdict"] == "does_not_fit" and result["refusable"] is True


def test_a_job_that_names_no_model_is_a_problem(client: TestClient) -> None:
    response = client.post(
        "/v1/preflight",
        json={"command": "torchrun train.py --bf16 --per_device_train_batch_size 2"},
    )
    assert response.status_code == 422
    assert "names no model" in response.json()["detail"]


@pytest.mark.parametrize(
    "command",
    [
        "vllm serve meta-llama/Llama-3.1-8B-Instruct",
        "python3 /opt/pytorch-mnist/mnist.py --epochs=1",
    ],
)
def test_serving_and_unknown_scripts_keep_their_answers(client: TestClient, command: str) -> None:
    response = client.post("/v1/preflight", json={"command": command})
    if command.startswith("vllm"):
        assert response.status_code == 200 and response.json().get("training", []) == []
    else:
        assert response.status_code == 422  # no engine, no trainer


def test_the_kubeflow_deepspeed_demo_runs_no_llm_trainer(client: TestClient) -> None:
    import yaml

    job = yaml.safe_load(text("kubeflow_pytorch_deepspeed_demo.yaml"))
    response = client.post("/v1/preflight", json={"object": job})
    # torchrun /train_bert_ds.py --checkpoint_dir ...: no Hugging Face trainer flags.
    assert response.status_code == 422
