"""Reading Kubernetes objects into serving workloads.

Core objects come from the official client's models (``tests/workloads/objects.py``). CRDs the
client lacks are dicts following their published Go types, with the pod templates inside them
again built from the client's models:

- LeaderWorkerSet: kubernetes-sigs/lws ``api/leaderworkerset/v1/leaderworkerset_types.go``
- InferenceService: kserve/kserve ``pkg/apis/serving/v1beta1/predictor.go`` (``PredictorSpec``,
  ``WorkerSpec``, ``PredictorExtensionSpec`` with the container inline)
- LLMInferenceService: kserve/kserve ``pkg/apis/serving/v1alpha2/llm_inference_service_types.go``
- production-stack values: vllm-project/production-stack ``helm/values.yaml`` and
  ``helm/templates/deployment-vllm-multi.yaml``
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s

from service.workloads.kubernetes import WorkloadReading, read_workloads
from service.workloads.sources import ReadProblem
from tests.workloads.objects import container, pod_spec, product_affinity, template

ToJson = Callable[[object], Any]


def _reading(obj: object) -> WorkloadReading:
    result = read_workloads(obj)
    assert isinstance(result, WorkloadReading), result
    return result


def test_deployment_with_vllm_and_a_sidecar(to_json: ToJson) -> None:
    deployment = k8s.V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=k8s.V1ObjectMeta(
            name="llama", namespace="serving", annotations={"llm-mem/admission": "deny"}
        ),
        spec=k8s.V1DeploymentSpec(
            replicas=2,
            selector=k8s.V1LabelSelector(match_labels={"app": "llm"}),
            template=template(
                pod_spec(
                    container(
                        "engine",
                        command=["vllm", "serve"],
                        args=[
                            "meta-llama/Llama-3.3-70B-Instruct",
                            "--tensor-parallel-size",
                            "4",
                            "--max-model-len",
                            "32768",
                            "--port",
                            "8000",
                        ],
                        gpus={"nvidia.com/gpu": "4"},
                    ),
                    container("metrics", image="prom/exporter", args=["--listen", ":9100"]),
                    product="NVIDIA-H100-80GB-HBM3",
                )
            ),
        ),
    )
    reading = _reading(to_json(deployment))
    assert (reading.kind, reading.name, reading.namespace) == ("Deployment", "llama", "serving")
    assert reading.requests_gpus
    (work,) = reading.workloads
    assert work.container == "engine"
    assert work.path == "spec.template.spec.containers[0]"
    assert work.engine.value == "vllm"
    assert work.engine.source == "spec.template.spec.containers[0].command[0]"
    assert work.model is not None and work.model.repo_id == "meta-llama/Llama-3.3-70B-Instruct"
    assert work.model.source == "spec.template.spec.containers[0].args[0]"
    tp = work.options["tensor_parallel_size"]
    assert (tp.value, tp.source) == (4, "spec.template.spec.containers[0].args[2]")
    assert work.options["max_model_len"].value == 32768
    assert [a.text for a in work.ignored_args] == ["--port 8000"]
    assert work.gpus is not None and work.gpus.count == 4
    assert work.gpus.source == 'spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]'
    assert (work.replicas.value, work.replicas.source) == (2, "spec.replicas")
    assert (work.pods_per_group.value, work.gpus_per_group) == (1, work.gpus_per_group)
    assert work.gpus_per_group is not None and work.gpus_per_group.value == 4
    assert work.gpu_product is not None
    assert work.gpu_product.values == ("NVIDIA-H100-80GB-HBM3",)
    assert not work.gpu_product.several
    assert work.gpu_product.source == 'spec.template.spec.nodeSelector["nvidia.com/gpu.product"]'
    assert work.annotations["llm-mem/admission"] == "deny"
    (other,) = reading.others
    assert (other.name, other.reason, other.gpus) == ("metrics", "runs no vLLM or SGLang", None)


def test_pod_with_shell_wrapper_kubernetes_variables_and_a_mig_slice(to_json: ToJson) -> None:
    pod = k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=k8s.V1ObjectMeta(name="qwen"),
        spec=pod_spec(
            container(
                "sglang",
                image="lmsysorg/sglang:latest",
                command=["/bin/sh", "-c"],
                args=[
                    "exec python3 -m sglang.launch_server --model-path $(MODEL) "
                    "--tp $TP --mem-fraction-static 0.85 --context-length 32k"
                ],
                env={"MODEL": "Qwen/Qwen3-4B", "TP": "1"},
                gpus={"nvidia.com/mig-3g.40gb": "1"},
            )
        ),
    )
    (work,) = _reading(to_json(pod)).workloads
    assert work.engine.value == "sglang"
    assert work.model is not None and work.model.repo_id == "Qwen/Qwen3-4B"
    assert "$(MODEL) from spec.containers[0].env[0].value" in work.model.source
    assert work.options["tp_size"].value == 1
    assert "$TP from spec.containers[0].env[1].value" in work.options["tp_size"].source
    assert work.options["context_length"].value == 32_000
    assert work.gpus is not None
    assert (work.gpus.resource, work.gpus.mig_profile) == ("nvidia.com/mig-3g.40gb", "3g.40gb")
    assert work.replicas.value == 1
    assert work.gpu_product is None


def test_statefulset_with_several_products_allowed_and_requests_only(to_json: ToJson) -> None:
    sts = k8s.V1StatefulSet(
        api_version="apps/v1",
        kind="StatefulSet",
        metadata=k8s.V1ObjectMeta(name="s"),
        spec=k8s.V1StatefulSetSpec(
            service_name="s",
            selector=k8s.V1LabelSelector(match_labels={"app": "llm"}),
            template=template(
                pod_spec(
                    container(
                        "c",
                        command=["vllm", "serve", "org/m"],
                        requests={"nvidia.com/gpu": "1"},
                    ),
                    affinity=product_affinity(
                        ["NVIDIA-A100-SXM4-80GB"], ["NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"]
                    ),
                )
            ),
        ),
    )
    (work,) = _reading(to_json(sts)).workloads
    assert work.replicas.source == "default (Kubernetes: 1)"
    assert work.gpus is not None and "requests" in work.gpus.source
    assert work.gpu_product is not None and work.gpu_product.several
    assert work.gpu_product.values == (
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-H100-80GB-HBM3",
        "NVIDIA-L40S",
    )


def test_node_selector_and_affinity_intersect(to_json: ToJson) -> None:
    spec = pod_spec(
        container("c", command=["vllm", "serve", "org/m"], gpus={"nvidia.com/gpu": "1"}),
        product="NVIDIA-L40S",
        affinity=product_affinity(["NVIDIA-L40S", "NVIDIA-L4"]),
    )
    pod = to_json(k8s.V1Pod(api_version="v1", kind="Pod", spec=spec))
    (work,) = _reading(pod).workloads
    assert work.gpu_product is not None and work.gpu_product.values == ("NVIDIA-L40S",)


def test_not_in_alone_leaves_the_product_open_but_says_what_is_excluded(to_json: ToJson) -> None:
    spec = pod_spec(
        container("c", command=["vllm", "serve", "org/m"], gpus={"nvidia.com/gpu": "1"}),
        affinity=product_affinity(["Tesla-T4"], operator="NotIn"),
    )
    (work,) = _reading(to_json(k8s.V1Pod(api_version="v1", kind="Pod", spec=spec))).workloads
    assert work.gpu_product is not None
    assert (work.gpu_product.values, work.gpu_product.excluded) == ((), ("Tesla-T4",))


def test_job_running_the_vllm_image_with_args_only(to_json: ToJson) -> None:
    job = k8s.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=k8s.V1ObjectMeta(name="bench"),
        spec=k8s.V1JobSpec(
            parallelism=3,
            template=template(
                pod_spec(
                    container(
                        "vllm",
                        image="docker.io/vllm/vllm-openai:v0.10.1",
                        args=["--model", "org/m", "--tensor-parallel-size", "2"],
                        gpus={"nvidia.com/gpu": "2"},
                    )
                )
            ),
        ),
    )
    (work,) = _reading(to_json(job)).workloads
    assert work.engine.value == "vllm"
    assert "vllm/vllm-openai" in work.engine.source
    assert work.options["tensor_parallel_size"].value == 2
    assert (work.replicas.value, work.replicas.source) == (3, "spec.parallelism")
    assert work.gpus is not None and work.gpus.count == 2


def test_pod_without_gpus_or_engine_is_reported_as_such(to_json: ToJson) -> None:
    pod = k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        spec=pod_spec(container("web", image="nginx:1.27")),
    )
    reading = _reading(to_json(pod))
    assert reading.workloads == ()
    assert not reading.requests_gpus
    (other,) = reading.others
    assert other.reason == "gives no command"


def test_gpu_container_that_is_not_an_engine_still_counts_as_gpu(to_json: ToJson) -> None:
    pod = k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        spec=pod_spec(
            container(
                "train",
                image="pytorch",
                command=["python", "train.py"],
                gpus={"nvidia.com/gpu": "8"},
            )
        ),
    )
    reading = _reading(to_json(pod))
    assert reading.workloads == () and reading.requests_gpus
    assert reading.others[0].gpus is not None and reading.others[0].gpus.count == 8


def test_a_bad_container_is_a_problem_next_to_the_good_ones(to_json: ToJson) -> None:
    pod = k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        spec=pod_spec(
            container("good", command=["vllm", "serve", "org/a"], gpus={"nvidia.com/gpu": "1"}),
            container(
                "bad",
                command=["vllm", "serve", "org/b", "-tp", "two"],
                gpus={"nvidia.com/gpu": "1"},
            ),
            container("frac", command=["vllm", "serve", "org/c"], gpus={"nvidia.com/gpu": "0.5"}),
        ),
    )
    reading = _reading(to_json(pod))
    assert [w.container for w in reading.workloads] == ["good", "frac"]
    fields = [p.field for p in reading.problems]
    assert fields == [
        "spec.containers[1].command[4]",
        'spec.containers[2].resources.limits["nvidia.com/gpu"]',
    ]
    assert "-tp" in reading.problems[0].detail


# ------------------------------------------------------------------ LeaderWorkerSet


def _lws(to_json: ToJson, leader: Any, worker: Any, size: int | None) -> dict[str, Any]:
    # kubernetes-sigs/lws LeaderWorkerSetSpec: replicas, leaderWorkerTemplate{leaderTemplate,
    # workerTemplate, size}; the templates are core PodTemplateSpecs.
    lwt: dict[str, Any] = {"workerTemplate": to_json(template(worker))}
    if leader is not None:
        lwt["leaderTemplate"] = to_json(template(leader))
    if size is not None:
        lwt["size"] = size
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "deepseek"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": lwt, "startupPolicy": "LeaderCreated"},
    }


def test_lws_vllm_leader_with_ray_workers(to_json: ToJson) -> None:
    leader = pod_spec(
        container(
            "vllm-leader",
            command=["sh", "-c"],
            args=[
                "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh leader "
                "--ray_cluster_size=$(LWS_GROUP_SIZE); "
                "python3 -m vllm.entrypoints.openai.api_server --port 8080 "
                "--model deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 "
                "--pipeline_parallel_size 2"
            ],
            gpus={"nvidia.com/gpu": "8"},
        ),
        product="NVIDIA-H100-80GB-HBM3",
    )
    worker = pod_spec(
        container(
            "vllm-worker",
            command=["sh", "-c"],
            args=["bash multi-node-serving.sh worker --ray_address=$(LWS_LEADER_ADDRESS)"],
            gpus={"nvidia.com/gpu": "8"},
        )
    )
    reading = _reading(_lws(to_json, leader, worker, 2))
    (work,) = reading.workloads
    assert work.role == "leader"
    assert work.path == "spec.leaderWorkerTemplate.leaderTemplate.spec.containers[0]"
    assert work.options["tensor_parallel_size"].value == 8
    assert work.options["pipeline_parallel_size"].value == 2
    assert (work.pods_per_group.value, work.pods_per_group.source) == (
        2,
        "spec.leaderWorkerTemplate.size",
    )
    # One leader with 8 GPUs and size - 1 = 1 worker with 8 GPUs: 16 GPUs per group.
    assert work.gpus_per_group is not None and work.gpus_per_group.value == 16
    assert (work.replicas.value, work.replicas.source) == (2, "spec.replicas")
    assert work.gpu_product is not None and work.gpu_product.values == ("NVIDIA-H100-80GB-HBM3",)
    (other,) = reading.others
    assert other.reason == "runs no vLLM or SGLang" and other.gpus is not None


def test_lws_sglang_on_every_pod_reads_leader_and_worker(to_json: ToJson) -> None:
    def node(rank: str) -> Any:
        return pod_spec(
            container(
                "sglang",
                image="lmsysorg/sglang",
                command=[
                    "python3",
                    "-m",
                    "sglang.launch_server",
                    "--model-path",
                    "deepseek-ai/DeepSeek-R1",
                    "--tp",
                    "16",
                    "--nnodes",
                    "$(LWS_GROUP_SIZE)",
                    "--node-rank",
                    rank,
                ],
                gpus={"nvidia.com/gpu": "8"},
            )
        )

    reading = _reading(_lws(to_json, node("0"), node("1"), 2))
    assert [w.role for w in reading.workloads] == ["leader", "worker"]
    for work in reading.workloads:
        assert work.options["tp_size"].value == 16
        assert work.gpus_per_group is not None and work.gpus_per_group.value == 16


def test_lws_without_leader_template_and_size_uses_the_defaults(to_json: ToJson) -> None:
    worker = pod_spec(
        container("c", command=["vllm", "serve", "org/m"], gpus={"nvidia.com/gpu": "2"})
    )
    (work,) = _reading(_lws(to_json, None, worker, None)).workloads
    assert work.role == "leader"
    assert work.path == "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0]"
    assert (work.pods_per_group.value, work.pods_per_group.source) == (
        1,
        "default (LeaderWorkerSet: 1)",
    )
    assert work.gpus_per_group is not None and work.gpus_per_group.value == 2


# ------------------------------------------------------------------ KServe


def _isvc(predictor: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llama", "namespace": "kserve"},
        "spec": {"predictor": predictor},
    }


def test_inference_service_huggingface_runtime(to_json: ToJson) -> None:
    resources = to_json(k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "2", "cpu": "8"}))
    obj = _isvc(
        {
            "minReplicas": 2,
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L40S"},
            "model": {
                "modelFormat": {"name": "huggingface"},
                "storageUri": "hf://meta-llama/Llama-3.1-8B-Instruct",
                "args": [
                    "--model_name=llama",
                    "--max-model-len=8192",
                    "--tensor-parallel-size",
                    "2",
                ],
                "resources": resources,
            },
        }
    )
    (work,) = _reading(obj).workloads
    assert work.engine.value == "vllm"
    assert work.engine.source == "spec.predictor.model.modelFormat.name (huggingface)"
    assert work.model is not None
    assert (work.model.scheme, work.model.repo_id) == ("hf", "meta-llama/Llama-3.1-8B-Instruct")
    assert work.model.source == "spec.predictor.model.storageUri"
    assert work.options["max_model_len"].value == 8192
    assert work.options["max_model_len"].source == "spec.predictor.model.args[1]"
    assert work.gpus is not None and work.gpus.count == 2
    assert (work.replicas.value, work.replicas.source) == (2, "spec.predictor.minReplicas")
    assert work.gpu_product is not None and work.gpu_product.values == ("NVIDIA-L40S",)
    assert work.gpu_product.source == 'spec.predictor.nodeSelector["nvidia.com/gpu.product"]'


def test_inference_service_model_id_argument_names_the_model() -> None:
    obj = _isvc(
        {
            "model": {
                "modelFormat": {"name": "huggingface"},
                "args": ["--model_id=Qwen/Qwen3-8B"],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        }
    )
    (work,) = _reading(obj).workloads
    assert work.model is not None and work.model.repo_id == "Qwen/Qwen3-8B"
    assert work.model.source == "spec.predictor.model.args[0]"
    # Read, so not reported as ignored (issue 25 item 6); the server's other flags still are.
    assert work.ignored_args == ()


def test_inference_service_model_id_with_its_value_apart_is_read_not_ignored() -> None:
    obj = _isvc(
        {
            "model": {
                "modelFormat": {"name": "huggingface"},
                "args": [
                    "--model_name=qwen",
                    "--model_id",
                    "Qwen/Qwen3-8B",
                    "--max-model-len=4096",
                ],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        }
    )
    (work,) = _reading(obj).workloads
    assert work.model is not None and work.model.repo_id == "Qwen/Qwen3-8B"
    assert [arg.text for arg in work.ignored_args] == ["--model_name=qwen"]
    assert work.options["max_model_len"].value == 4096


def test_inference_service_transformers_backend_and_other_formats_are_not_read() -> None:
    hf = _isvc(
        {
            "model": {
                "modelFormat": {"name": "huggingface"},
                "args": ["--backend=huggingface"],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        }
    )
    reading = _reading(hf)
    assert reading.workloads == () and reading.requests_gpus
    assert "transformers backend" in reading.others[0].reason
    sk = _reading(_isvc({"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "gs://x"}}))
    assert "sklearn" in sk.others[0].reason


def test_inference_service_multi_node_worker_spec() -> None:
    gpus = {"limits": {"nvidia.com/gpu": "8"}}
    obj = _isvc(
        {
            "model": {
                "modelFormat": {"name": "huggingface"},
                "storageUri": "pvc://models/llama-405b",
                "resources": gpus,
            },
            "workerSpec": {
                "tensorParallelSize": 8,
                "pipelineParallelSize": 2,
                "containers": [{"name": "worker-container", "resources": gpus}],
            },
        }
    )
    (work,) = _reading(obj).workloads
    assert work.model is not None and work.model.scheme == "pvc"
    assert work.options["tensor_parallel_size"].value == 8
    assert work.options["pipeline_parallel_size"].source == (
        "spec.predictor.workerSpec.pipelineParallelSize"
    )
    assert work.pods_per_group.value == 2
    assert work.gpus_per_group is not None and work.gpus_per_group.value == 16


def test_inference_service_custom_predictor_containers(to_json: ToJson) -> None:
    spec = to_json(
        pod_spec(
            container(
                "kserve-container",
                command=["python", "-m", "vllm.entrypoints.openai.api_server"],
                args=["--model", "/mnt/models", "--served-model-name", "llama"],
                gpus={"nvidia.com/gpu": "1"},
            )
        )
    )
    (work,) = _reading(_isvc(spec)).workloads
    assert work.path == "spec.predictor.containers[0]"
    assert work.model is not None and work.model.scheme == "local"


def _llmisvc(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": "qwen"},
        "spec": spec,
    }


def test_llm_inference_service_parallelism_and_workers(to_json: ToJson) -> None:
    main = to_json(
        pod_spec(
            container(
                "main", args=["--max-model-len=16384"], gpus={"nvidia.com/gpu": "4"}, image="x"
            ),
            product="NVIDIA-H200",
        )
    )
    obj = _llmisvc(
        {
            "model": {"uri": "hf://Qwen/Qwen3-235B-A22B", "name": "qwen"},
            "replicas": 2,
            "parallelism": {"tensor": 4, "data": 2, "expert": True},
            "template": main,
            "worker": to_json(pod_spec(container("main", gpus={"nvidia.com/gpu": "4"}))),
        }
    )
    (work,) = _reading(obj).workloads
    assert work.engine.value == "vllm"
    assert work.model is not None and work.model.repo_id == "Qwen/Qwen3-235B-A22B"
    assert {k: v.value for k, v in work.options.items()} == {
        "max_model_len": 16384,
        "tensor_parallel_size": 4,
        "data_parallel_size": 2,
        "enable_expert_parallel": True,
    }
    assert work.options["tensor_parallel_size"].source == "spec.parallelism.tensor"
    # tensor 4 x data 2 = 8 GPUs at 4 per pod: 2 pods per group, 8 GPUs.
    assert work.pods_per_group.value == 2
    assert work.gpus_per_group is not None and work.gpus_per_group.value == 8
    assert (work.replicas.value, work.replicas.source) == (2, "spec.replicas")
    assert work.gpu_product is not None and work.gpu_product.values == ("NVIDIA-H200",)


def test_llm_inference_service_prefill_and_no_template() -> None:
    obj = _llmisvc(
        {
            "model": {"uri": "hf://org/m"},
            "parallelism": {"tensor": 2},
            "prefill": {
                "replicas": 3,
                "template": {
                    "containers": [
                        {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ]
                },
            },
        }
    )
    reading = _reading(obj)
    assert [w.role for w in reading.workloads] == ["decode", "prefill"]
    decode, prefill = reading.workloads
    assert decode.path == "spec.template" and decode.gpus is None
    assert any("preset" in note for note in decode.notes)
    assert prefill.replicas.value == 3 and prefill.gpus is not None


def test_llm_inference_service_without_uri_is_a_problem() -> None:
    problem = read_workloads(_llmisvc({"model": {}}))
    assert isinstance(problem, ReadProblem) and problem.field == "spec.model.uri"


# ------------------------------------------------------------------ production-stack values


def test_production_stack_values() -> None:
    values = {
        "servingEngineSpec": {
            "modelSpec": [
                {
                    "name": "llama3",
                    "repository": "vllm/vllm-openai",
                    "tag": "latest",
                    "modelURL": "meta-llama/Llama-3.1-8B-Instruct",
                    "replicaCount": 2,
                    "requestCPU": 10,
                    "requestMemory": "16Gi",
                    "requestGPU": 1,
                    "requestGPUType": "nvidia.com/mig-4g.71gb",
                    "vllmConfig": {
                        "enablePrefixCaching": True,
                        "maxModelLen": 16384,
                        "dtype": "bfloat16",
                        "tensorParallelSize": 1,
                        "gpuMemoryUtilization": 0.8,
                        "extraArgs": ["--kv-cache-dtype", "fp8", "--disable-log-requests"],
                    },
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.product",
                                    "operator": "In",
                                    "values": ["NVIDIA-H200-MIG-4g.71gb"],
                                }
                            ]
                        }
                    ],
                }
            ]
        }
    }
    reading = _reading(values)
    assert reading.kind == "vllm-production-stack values"
    (work,) = reading.workloads
    path = "servingEngineSpec.modelSpec[0]"
    assert work.model is not None and work.model.source == f"{path}.modelURL"
    assert {k: v.value for k, v in work.options.items()} == {
        "max_model_len": 16384,
        "dtype": "bfloat16",
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.8,
        "kv_cache_dtype": "fp8",
    }
    assert work.options["max_model_len"].source == f"{path}.vllmConfig.maxModelLen"
    assert work.options["kv_cache_dtype"].source == f"{path}.vllmConfig.extraArgs[1]"
    assert [a.text for a in work.ignored_args] == [
        "--enable-prefix-caching",
        "--disable-log-requests",
    ]
    assert work.gpus is not None
    assert (work.gpus.count, work.gpus.mig_profile) == (1, "4g.71gb")
    assert (work.replicas.value, work.replicas.source) == (2, f"{path}.replicaCount")
    assert work.gpu_product is not None
    assert work.gpu_product.values == ("NVIDIA-H200-MIG-4g.71gb",)
    assert work.gpu_product.source == f"{path}.nodeSelectorTerms"


# ------------------------------------------------------------------ what cannot be read


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ([], "object"),
        ("Pod", "object"),
        ({}, "kind"),
        ({"kind": "ConfigMap", "data": {}}, "kind"),
        ({"kind": "Deployment", "spec": {}}, "spec.template.spec"),
        ({"kind": "Pod"}, "spec"),
        ({"kind": "LeaderWorkerSet", "spec": {}}, "spec.leaderWorkerTemplate"),
        ({"kind": "InferenceService", "spec": {"predictor": {}}}, "spec.predictor.model"),
        ({"servingEngineSpec": {}}, "servingEngineSpec.modelSpec"),
    ],
)
def test_unreadable_input_is_a_problem_naming_what_is_missing(obj: object, field: str) -> None:
    problem = read_workloads(obj)
    assert isinstance(problem, ReadProblem)
    assert problem.field == field
    assert problem.detail


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "kind",
                    "spec",
                    "template",
                    "containers",
                    "command",
                    "args",
                    "resources",
                    "limits",
                    "nvidia.com/gpu",
                    "model",
                    "predictor",
                    "leaderWorkerTemplate",
                    "workerTemplate",
                    "size",
                    "env",
                    "name",
                    "value",
                    "servingEngineSpec",
                    "modelSpec",
                    "vllmConfig",
                    "parallelism",
                    "nodeSelector",
                    "affinity",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        ["Pod", "Deployment", "Job", "LeaderWorkerSet", "InferenceService", "LLMInferenceService"]
    ),
    _JSON,
)
def test_any_json_reads_or_gives_a_problem(kind: str, body: object) -> None:
    obj = dict(body) if isinstance(body, dict) else {"spec": body}
    obj["kind"] = kind
    result = read_workloads(obj)
    assert isinstance(result, WorkloadReading | ReadProblem)
