"""Public manifests read as published (tests/workloads/manifests/, sources in SOURCES.toml).

Each expectation is read off the manifest text by hand (the comment beside it says how), not
from the reader: the model, the GPUs of one copy, the layout flags, the copies.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.workloads.kubernetes import ServingWorkload, WorkloadReading, read_workloads

MANIFESTS = Path(__file__).with_name("manifests")
SOURCES = tomllib.loads((MANIFESTS / "SOURCES.toml").read_text())["manifest"]
SKIPPED_KINDS = {"Secret", "ConfigMap", "Service"}


def workload_documents(name: str) -> list[dict[str, Any]]:
    """The documents of a manifest file that are workloads (Secrets, ConfigMaps... left out)."""
    with (MANIFESTS / name).open() as handle:
        return [
            doc
            for doc in yaml.safe_load_all(handle)
            if isinstance(doc, dict) and doc.get("kind") not in SKIPPED_KINDS
        ]


def test_every_manifest_file_has_a_source_and_every_source_a_file() -> None:
    files = {p.name for p in MANIFESTS.glob("*.yaml")}
    assert files == {entry["file"] for entry in SOURCES}
    for entry in SOURCES:
        commit = entry["source"].split(" at ")[1].split()[0]
        assert len(commit) == 40 and int(commit, 16) >= 0, entry["source"]


def _read(name: str) -> WorkloadReading:
    (doc,) = workload_documents(name)
    reading = read_workloads(doc)
    assert isinstance(reading, WorkloadReading), reading
    return reading


def _one(reading: WorkloadReading, role: str | None = None) -> ServingWorkload:
    found = [w for w in reading.workloads if role is None or w.role == role]
    assert len(found) == 1, reading
    return found[0]


def _values(work: ServingWorkload) -> dict[str, object]:
    return {name: read.value for name, read in work.options.items()}


def test_llm_d_wide_ep_decode_reads_the_lws_group_arithmetic() -> None:
    reading = _read("llm-d-wide-ep-decode.yaml")
    # vLLM reads `--kv-cache-memory-bytes=` (KV_CACHE_MEMORY_BYTES unset) as "not set"
    # (EngineArgs' optional_type): no problem, no value, a note that says so.
    assert not reading.problems, reading.problems
    work = _one(reading)
    assert "kv_cache_memory_bytes" not in work.options
    assert any("--kv-cache-memory-bytes is empty" in n for n in work.command.notes)
    assert _values(work)["data_parallel_size"] == 16
    # the LeaderWorkerSet and its pods carry `llm-d.ai/role: decode` (one template, no leader's)
    assert work.role == "decode"


def test_an_llm_d_deployment_takes_the_role_of_its_label() -> None:
    """llm-d's P/D guides label the prefill Deployment's pods `llm-d.ai/role: prefill`."""
    template = {
        "metadata": {"labels": {"llm-d.ai/role": "prefill"}},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.11.0",
                    "command": ["vllm", "serve", "Qwen/Qwen3-0.6B"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "prefill"},
        "spec": {"replicas": 2, "template": template},
    }
    reading = read_workloads(deployment)
    assert isinstance(reading, WorkloadReading), reading
    assert [w.role for w in reading.workloads] == ["prefill"]
    del template["metadata"]["labels"]["llm-d.ai/role"]
    reading = read_workloads(deployment)
    assert isinstance(reading, WorkloadReading), reading
    assert [w.role for w in reading.workloads] == ["main"]


def test_llm_d_wide_ep_decode_with_its_kv_size_set_is_dp_16_over_the_group() -> None:
    (doc,) = workload_documents("llm-d-wide-ep-decode.yaml")
    container = doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["env"].append({"name": "KV_CACHE_MEMORY_BYTES", "value": "21474836480"})
    reading = read_workloads(doc)
    assert isinstance(reading, WorkloadReading) and not reading.problems, reading
    work = _one(reading)
    # size: 2 (LWS_GROUP_SIZE) × DP_SIZE_LOCAL "8" = 16; TP_SIZE "1"; 8 GPUs per pod, 2 pods.
    assert _values(work)["data_parallel_size"] == 16
    assert _values(work)["tensor_parallel_size"] == 1
    assert _values(work)["enable_expert_parallel"] is True
    source = work.options["data_parallel_size"].source
    assert "$((LWS_GROUP_SIZE * DP_SIZE_LOCAL)) = 16" in source
    assert "LWS_GROUP_SIZE from LWS_GROUP_SIZE = spec.leaderWorkerTemplate.size" in source
    assert work.gpus is not None and work.gpus.count == 8
    assert work.gpus_per_group is not None and work.gpus_per_group.value == 16
    assert work.model is not None and work.model.repo_id == "deepseek-ai/DeepSeek-R1-0528"


def test_lws_vllm_example_is_tp_8_pp_2_over_two_pods() -> None:
    work = _one(_read("lws-vllm-gpu.yaml"), "leader")
    assert work.model is not None and work.model.repo_id == "meta-llama/Llama-3.1-405B-Instruct"
    assert _values(work) == {"tensor_parallel_size": 8, "pipeline_parallel_size": 2}
    # 8 GPUs in the leader + 8 in the one worker (size 2); replicas 2.
    assert work.gpus_per_group is not None and work.gpus_per_group.value == 16
    assert work.replicas.value == 2


def test_kserve_model_id_names_the_model_and_is_not_ignored() -> None:
    work = _one(_read("kserve-huggingface-llama3-vllm.yaml"))
    assert work.model is not None and work.model.repo_id == "meta-llama/meta-llama-3-8b-instruct"
    assert [a.text for a in work.ignored_args] == ["--model_name=llama3"]


def test_production_stack_v100_values() -> None:
    (doc,) = workload_documents("production-stack-values-25-v100-multi-gpu-tp2.yaml")
    reading = read_workloads(doc)
    assert isinstance(reading, WorkloadReading)
    work = _one(reading)
    assert work.model is not None and work.model.repo_id == "Qwen/Qwen2.5-7B-Instruct"
    values = _values(work)
    assert (values["tensor_parallel_size"], values["max_model_len"]) == (2, 8192)
    assert (values["dtype"], values["enforce_eager"]) == ("half", True)
    assert work.gpus is not None and work.gpus.count == 2


@pytest.mark.parametrize(
    ("name", "repo", "gpus", "tp", "pp", "product"),
    [
        # resource.count 2 × Standard_NC48ads_A100_v4 (2 × A100 80GB PCIe each).
        (
            "kaito-workspace-llama-3.3-70b-instruct.yaml",
            "meta-llama/Llama-3.3-70B-Instruct",
            4,
            2,
            2,
            "NVIDIA-A100-80GB-PCIe",
        ),
        # one Standard_NC96ads_A100_v4 (4 GPUs).
        (
            "kaito-workspace-llama-3.1-8b-instruct.yaml",
            "meta-llama/Llama-3.1-8B-Instruct",
            4,
            4,
            None,
            "NVIDIA-A100-80GB-PCIe",
        ),
        (
            "kaito-workspace-phi-4-mini.yaml",
            "microsoft/Phi-4-mini-instruct",
            1,
            1,
            None,
            "NVIDIA-A100-80GB-PCIe",
        ),
    ],
)
def test_kaito_workspaces_run_their_preset_on_their_instance_type(
    name: str, repo: str, gpus: int, tp: int, pp: int | None, product: str
) -> None:
    work = _one(_read(name))
    assert work.model is not None and work.model.repo_id == repo
    values = _values(work)
    assert values["tensor_parallel_size"] == tp and values.get("pipeline_parallel_size") == pp
    assert values["max_model_len"] == -1  # KAITO passes --max-model-len=auto
    assert work.gpus_per_group is not None and work.gpus_per_group.value == gpus
    assert work.gpu_product is not None and work.gpu_product.values == (product,)


def test_aibrix_storm_service_reads_both_roles_and_lists_the_router() -> None:
    reading = _read("aibrix-stormservice-pd-model.yaml")
    assert {w.role for w in reading.workloads} == {"prefill", "decode"}
    for work in reading.workloads:
        assert work.model is not None
        assert work.model.repo_id == "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"
        assert work.gpus is not None and work.gpus.count == 1
    sglang = _read("aibrix-stormservice-sglang-tp-1p1d.yaml")
    # podGroupSize 2, one GPU per pod, --tp-size 2; the routing role runs no engine.
    prefill = _one(sglang, "prefill")
    assert prefill.gpus_per_group is not None and prefill.gpus_per_group.value == 2
    assert _values(prefill)["tp_size"] == 2
    assert "POD_GROUP_INDEX" in prefill.command.env
    assert [o.path for o in sglang.others] == [
        "spec.template.spec.roles[0].template.spec.containers[0]"
    ]


def test_aibrix_ray_cluster_fleet_runs_vllm_in_the_head() -> None:
    work = _one(_read("aibrix-rayclusterfleet.yaml"))
    assert work.model is not None and work.model.repo_id == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert _values(work)["tensor_parallel_size"] == 2
    assert work.gpus_per_group is not None and work.gpus_per_group.value == 2


def test_kuberay_ray_service_reads_the_ray_serve_llm_config() -> None:
    work = _one(_read("kuberay-rayservice-llm-serve.yaml"))
    assert work.model is not None and work.model.repo_id == "Qwen/Qwen2.5-7B-Instruct"
    assert _values(work) == {
        "dtype": "bfloat16",
        "max_model_len": 1024,
        "gpu_memory_utilization": 0.75,
    }
    assert work.replicas.value == 1  # autoscaling_config.min_replicas


def test_a_ray_service_importing_its_own_code_is_a_problem_not_a_guess() -> None:
    reading = _read("kuberay-rayservice-vllm-custom.yaml")
    assert reading.workloads == ()
    assert "import_path" in reading.problems[0].field


def test_dynamo_disagg_reads_a_prefill_and_a_decode_worker() -> None:
    reading = _read("dynamo-vllm-disagg.yaml")
    # Two workers (subComponentType prefill / decode), each `python3 -m dynamo.vllm --model
    # Qwen/Qwen3-0.6B` with `resources.limits.gpu: "1"`; the Frontend runs no engine.
    assert {w.role for w in reading.workloads} == {"prefill", "decode"}
    for work in reading.workloads:
        assert work.engine.value == "vllm"
        assert work.model is not None and work.model.repo_id == "Qwen/Qwen3-0.6B"
        assert work.gpus is not None and work.gpus.count == 1
        assert work.gpus.resource == "nvidia.com/gpu"
        assert work.replicas.value == 1
    assert [o.path for o in reading.others] == ["spec.services.Frontend.extraPodSpec.containers[0]"]
    # The prefill worker's Dynamo flag is its own, not vLLM's.
    prefill = _one(reading, "prefill")
    assert any("--is-prefill-worker" in arg.words for arg in prefill.command.ignored_args)


def test_dynamo_multinode_workers_span_their_nodes() -> None:
    reading = _read("dynamo-vllm-disagg-multinode.yaml")
    # `multinode.nodeCount: 2` pods of one GPU each run `--tensor-parallel-size 2`; the roles
    # come from the service names (decode, prefill) and --is-prefill-worker.
    assert {w.role for w in reading.workloads} == {"prefill", "decode"}
    for work in reading.workloads:
        assert _values(work)["tensor_parallel_size"] == 2
        assert work.pods_per_group.value == 2
        assert work.gpus_per_group is not None and work.gpus_per_group.value == 2
