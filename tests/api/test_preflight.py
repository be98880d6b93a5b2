"""POST /v1/preflight: command lines and manifests read, sized and judged over HTTP.

Expected verdicts come from another route: the explicit request a person would write for the
same deployment, posted to /v1/estimate/inference, must get the same `fit` (a cross-route
consistency check). Which flag was read from where is checked against the positions written
in each test's own manifest.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from kubernetes import client as k8s

from service.estimator.engines import all_options
from tests.api.k8s_objects import container, pod, pod_spec, template, to_json

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"


def preflight(client: TestClient, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    response = client.post("/v1/preflight", json=body)
    assert response.status_code == status, response.text[:600]
    return response.json()  # type: ignore[no-any-return]


def estimate(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/estimate/inference", json=body)
    assert response.status_code == 200, response.text[:600]
    return response.json()  # type: ignore[no-any-return]


def test_a_command_line_gets_the_verdict_of_the_same_explicit_estimate(
    client: TestClient,
) -> None:
    answer = preflight(
        client,
        {
            "command": f"vllm serve {LLAMA_70B} -tp 2 --max-model-len 32768 --port 8000",
            "gpu": "NVIDIA-H100-80GB-HBM3",
        },
    )
    (result,) = answer["results"]
    explicit = estimate(
        client,
        {
            "model": LLAMA_70B,
            "engine": "vllm",
            "tensor_parallel_size": 2,
            "engine_options": {"max_model_len": 32768},
            "gpu": "h100-sxm-80gb",
            "gpu_count": 2,
        },
    )
    assert result["fit"] == explicit["fit"]
    assert result["estimate"]["total_bytes"] == explicit["total_bytes"]
    assert result["fits"] is explicit["fit"]["fits"]
    assert result["engine_args"] == explicit["fit"]["engine_args"]
    assert result["ignored_args"] == [{"text": "--port 8000", "source": "command word 7"}]
    options = {o["name"]: o for o in result["options"]}
    assert options["tensor_parallel_size"]["value"] == 2
    assert options["tensor_parallel_size"]["source"] == "command word 4"
    assert options["max_model_len"]["source"] == "command word 6"
    # The label the caller gave is the catalog's GFD product string for that GPU.
    assert "NVIDIA-H100-80GB-HBM3" in client.get("/v1/gpus/h100-sxm-80gb").text


@pytest.mark.parametrize("label", ["Tesla-T4", "NVIDIA-L4", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H200"])
def test_fits_on_lists_a_product_exactly_when_the_estimate_says_it_fits(
    client: TestClient, label: str
) -> None:
    command = ["vllm", "serve", LLAMA_8B, "--max-model-len", "16384"]
    result = preflight(client, {"command": command})["results"][0]
    assert result["verdict"] == "unknown" and result["fit"] is None  # no GPU pinned
    fit = estimate(
        client,
        {
            "model": LLAMA_8B,
            "engine": "vllm",
            "engine_options": {"max_model_len": 16384},
            "gpu": label,
        },
    )["fit"]
    assert (label in result["fits_on"]) is fit["fits"]
    # argv positions are named as exec receives them
    assert {o["source"] for o in result["options"]} == {"argv[4]"}


def test_a_deployment_is_read_field_by_field(client: TestClient) -> None:
    args = ["--model", LLAMA_70B, "--tensor-parallel-size", "4", "--max-model-len", "8k"]
    deployment = k8s.V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=k8s.V1ObjectMeta(name="llama", namespace="ml"),
        spec=k8s.V1DeploymentSpec(
            replicas=3,
            selector=k8s.V1LabelSelector(match_labels={"app": "llm"}),
            template=template(
                pod_spec(
                    container("vllm", args=args, gpus={"nvidia.com/gpu": "4"}),
                    product="NVIDIA-A100-SXM4-80GB",
                )
            ),
        ),
    )
    answer = preflight(client, {"object": to_json(deployment)})
    assert (answer["kind"], answer["name"], answer["namespace"]) == ("Deployment", "llama", "ml")
    (result,) = answer["results"]
    base = "spec.template.spec.containers[0]"
    assert result["path"] == base and result["container"] == "vllm"
    assert result["replicas"] == {"value": 3, "source": "spec.replicas"}
    assert result["gpus"]["count"] == 4
    assert result["gpus"]["source"] == f'{base}.resources.limits["nvidia.com/gpu"]'
    assert result["gpu"] == {
        "values": ["NVIDIA-A100-SXM4-80GB"],
        "source": f'{base.removesuffix(".containers[0]")}.nodeSelector["nvidia.com/gpu.product"]',
    }
    assert result["engine_version"] == {"value": "0.10.1", "source": f"{base}.image"}
    assert result["model"]["source"] == f"{base}.args[1]"
    options = {o["name"]: o for o in result["options"]}
    assert options["max_model_len"]["value"] == 8000  # vLLM's lower-case k is 10^3
    assert options["max_model_len"]["source"] == f"{base}.args[5]"
    explicit = estimate(
        client,
        {
            "model": LLAMA_70B,
            "engine": "vllm",
            "tensor_parallel_size": 4,
            "engine_options": {"max_model_len": 8000, "version": "0.10.1"},
            "gpu": "a100-sxm4-80gb",
            "gpu_count": 4,
        },
    )
    assert result["fit"] == explicit["fit"]
    assert result["request"]["gpu"] == "NVIDIA-A100-SXM4-80GB"


def test_the_image_version_is_the_engine_version_option(
    client: TestClient,
) -> None:
    spec = pod(container("vllm", args=[LLAMA_8B], gpus={"nvidia.com/gpu": "1"}))
    result = preflight(client, {"object": to_json(spec)})["results"][0]
    assert result["engine_version"]["value"] == "0.10.1"
    # The estimator models vLLM by release (engine_options.version): the tag picks the line.
    assert "vllm" in all_options()["version"][1]
    assert result["request"]["engine_options"]["version"] == "0.10.1"
    assert result["engine_version"]["source"].endswith(".image")


def test_sglang_in_a_shell_script(client: TestClient) -> None:
    script = (
        "set -e; exec python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp-size 2 "
        "--context-length 32768 --mem-fraction-static 0.85 --enable-metrics"
    )
    result = preflight(client, {"command": ["sh", "-c", script], "gpu": "l40s"})["results"][0]
    assert result["engine"]["value"] == "sglang"
    assert result["request"]["tensor_parallel_size"] == 2
    assert result["request"]["engine_options"] == {
        "context_length": 32768,
        "mem_fraction_static": 0.85,
    }
    explicit = estimate(
        client,
        {
            "model": "Qwen/Qwen3-8B",
            "engine": "sglang",
            "tensor_parallel_size": 2,
            "engine_options": {"context_length": 32768, "mem_fraction_static": 0.85},
            "gpu": "l40s",
            "gpu_count": 2,
        },
    )
    assert result["fit"] == explicit["fit"]


def test_fewer_gpus_than_the_layout_uses_will_not_start(client: TestClient) -> None:
    spec = pod(
        container("vllm", args=[LLAMA_8B, "-tp", "2"], gpus={"nvidia.com/gpu": "1"}),
        product="NVIDIA-H100-80GB-HBM3",
    )
    result = preflight(client, {"object": to_json(spec)})["results"][0]
    assert result["verdict"] == "will_not_start" and result["fits"] is False
    (problem,) = result["problems"]
    assert problem["field"] == 'spec.containers[0].resources.limits["nvidia.com/gpu"]'
    assert "needs 2" in problem["detail"]


def test_a_leaderworkerset_group_holds_size_times_the_pod_gpus(client: TestClient) -> None:
    args = ["vllm", "serve", LLAMA_70B, "-tp", "8", "-pp", "2"]
    worker = {
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.10.1",
                    "command": args,
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ]
        }
    }
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "llama"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": worker}},
    }
    results = preflight(client, {"object": lws, "gpu": "h100"})["results"]
    assert results and all(r["gpus_per_group"]["value"] == 16 for r in results)
    assert all(r["verdict"] != "will_not_start" for r in results)


def test_a_mig_resource_is_judged_on_that_slice(client: TestClient) -> None:
    spec = pod(
        container(
            "vllm", args=[LLAMA_8B, "--max-model-len", "4096"], gpus={"nvidia.com/mig-3g.40gb": "1"}
        ),
        product="NVIDIA-A100-SXM4-80GB",
    )
    result = preflight(client, {"object": to_json(spec)})["results"][0]
    assert result["gpu"]["values"] == ["NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"]
    explicit = estimate(
        client,
        {
            "model": LLAMA_8B,
            "engine": "vllm",
            "engine_options": {"max_model_len": 4096, "version": "0.10.1"},
            "gpu": "a100-sxm4-80gb/3g.40gb",
        },
    )
    assert result["fit"] == explicit["fit"] and result["fit"]["gpu"] == "a100-sxm4-80gb/3g.40gb"


def test_production_stack_values(client: TestClient) -> None:
    values = {
        "servingEngineSpec": {
            "modelSpec": [
                {
                    "name": "llama",
                    "repository": "vllm/vllm-openai",
                    "tag": "v0.10.1",
                    "modelURL": LLAMA_8B,
                    "requestGPU": 1,
                    "vllmConfig": {"maxModelLen": 4096, "gpuMemoryUtilization": 0.8},
                }
            ]
        }
    }
    result = preflight(client, {"object": values, "gpu": "l4"})["results"][0]
    assert result["request"]["engine_options"] == {
        "max_model_len": 4096,
        "gpu_memory_utilization": 0.8,
        "version": "0.10.1",  # the image tag
    }
    assert result["engine_version"]["value"] == "0.10.1"
    assert result["gpu"]["source"] == "request gpu"


def test_kserve_hf_storage_uri_names_the_model(client: TestClient) -> None:
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llama"},
        "spec": {
            "predictor": {
                "model": {
                    "modelFormat": {"name": "huggingface"},
                    "storageUri": f"hf://{LLAMA_8B}",
                    "args": ["--max-model-len=4096"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            }
        },
    }
    result = preflight(client, {"object": isvc, "gpu": "l4"})["results"][0]
    assert result["model"]["catalog_id"] == LLAMA_8B
    assert result["model"]["source"] == "spec.predictor.model.storageUri"


# ------------------------------------------------------------------------- bad input


def test_a_model_given_as_a_path_is_a_problem_naming_the_field(client: TestClient) -> None:
    spec = pod(container("vllm", args=["--model", "/mnt/models"], gpus={"nvidia.com/gpu": "1"}))
    problem = preflight(client, {"object": to_json(spec)}, status=422)
    assert problem["errors"][0]["field"] == "object.spec.containers[0].args[1]"
    assert "model" in problem["detail"]
    # ...and naming the model in the request answers it.
    assert preflight(client, {"object": to_json(spec), "model": LLAMA_8B})["results"]


def test_a_model_outside_the_catalog_names_where_it_was_read(client: TestClient) -> None:
    problem = preflight(client, {"command": "vllm serve acme/unknown-model-7b"}, status=422)
    assert problem["errors"][0]["field"] == "command"
    assert "command word 2" in problem["detail"] and "not in the catalog" in problem["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"command": "python serve.py --port 8000"}, "command"),
        ({"command": "vllm serve x/y -tp two"}, "command"),
        ({"object": {"kind": "ConfigMap"}}, "object.kind"),
        ({"object": {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}}}, "object"),
        ({"command": "vllm serve x", "object": {"kind": "Pod"}}, "body"),
        ({}, "body"),
    ],
)
def test_bad_input_is_a_problem_document(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    problem = preflight(client, body, status=422)
    assert problem["title"] and problem["detail"]
    assert problem["errors"][0]["field"].startswith(field.split(".")[0])
    if "." in field:
        assert problem["errors"][0]["field"] == field


def test_a_product_the_catalog_does_not_know_stays_in_the_result(client: TestClient) -> None:
    spec = pod(
        container("vllm", args=[LLAMA_8B], gpus={"nvidia.com/gpu": "1"}), product="ACME-X1000"
    )
    result = preflight(client, {"object": to_json(spec)})["results"][0]
    assert result["verdict"] == "unknown" and result["fits"] is None
    assert "ACME-X1000" in result["problems"][0]["detail"]
    assert result["estimate"] is not None and result["fit"] is None
