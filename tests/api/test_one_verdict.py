"""One verdict per answer (issue 25): pre-flight's ``verdict``, its ``fit``, its ``summary``,
the admission webhook's decision and the estimate endpoint's ``fit`` are parts of one
judgement, and no workload makes them disagree.

Workloads are generated (hypothesis, derandomized so CI is deterministic): catalog models
(dense and MoE, small and large, quantized checkpoints, a name only the alias rules read),
vLLM and SGLang, every catalog GPU with a GPU Feature Discovery product label and its MIG
slices, TP/PP/DP sizes and expert parallelism, context lengths, memory budgets, online fp8
quantization and an fp8 KV cache, pod memory limits, and GPU limits below or above what the
layout uses. Each is written twice by this test, independently: as a Pod built with the
official Kubernetes client's models (container args as ``vllm serve`` or SGLang's launcher
takes them, ``nvidia.com/gpu`` limits, a nodeSelector on the product, ``limits.memory``) and
as the ``POST /v1/estimate/inference`` body a person would write for the same deployment.

What must hold:

- pre-flight: ``verdict`` is ``fits`` exactly when ``fit.fits`` (``does_not_fit`` when not;
  ``will_not_start`` never next to a ``fit`` that says it fits); ``fits`` says the same; the
  summary says "fits" or "does not fit" and, when not, describes the reason of ``fit.reason``;
- the estimate endpoint, asked the same question, gives the same ``fit``;
- admission (deny mode) denies exactly when pre-flight says ``does_not_fit`` or
  ``will_not_start``, unless the verdict rests on something the service did not price (an
  option read but not priced) or on a guess of the model (the alias rules): then it allows,
  with a warning that says it was not denied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s

from service.catalog.gpu_catalog import load_gpu_catalog
from service.catalog.model_catalog import load_model_catalog
from service.estimator.result import REASON_TEXT, FitReason
from service.scheduling.admission import MODE_KEY
from tests.api.k8s_objects import to_json
from tests.api.test_pod_advice import assert_followable_in_a_pod

# Chosen to cover the kinds of model the estimator treats differently; the whole catalog is
# sampled besides.
_MODELS = (
    "Qwen/Qwen2.5-0.5B-Instruct",
    "meta-llama/Llama-3.2-1B-Instruct",
    "meta-llama/Llama-3.1-8B-Instruct",
    "google/gemma-2-9b-it",  # sliding-window layers
    "google/gemma-3-4b-it",  # a vision tower
    "meta-llama/Llama-3.3-70B-Instruct",
    "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
    "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
    "Qwen/Qwen3-4B-FP8",
    "deepseek-ai/DeepSeek-V2-Lite-Chat",  # MoE with MLA
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "Qwen/Qwen3-30B-A3B-Base",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "deepseek-ai/DeepSeek-V3",
)
# Names no catalog entry holds, which the alias rules read as one (a guess: never a denial).
_GUESSED = ("NousResearch/Meta-Llama-3.1-8B-Instruct", "unsloth/Llama-3.2-1B-Instruct")
_CATALOG = tuple(
    e.id for e in load_model_catalog().all() if e.gguf is None and e.counts.total < 800e9
)
_MOE_HINTS = ("DeepSeek-V", "Mixtral", "A3B", "A22B", "A35B", "-16E", "128E", "MoE", "R1")

_GPU_CATALOG = load_gpu_catalog()
_PRODUCTS = tuple(g.k8s_product_label for g in _GPU_CATALOG.all() if g.k8s_product_label)
_MIG = tuple(
    (g.k8s_product_label, p.name)
    for g in _GPU_CATALOG.all()
    if g.k8s_product_label
    for p in g.mig_profiles
    if "+" not in p.name
)
_IMAGES = {
    "vllm": (("vllm/vllm-openai:v0.10.1", "0.10.1"), ("vllm/vllm-openai:latest", None)),
    "sglang": (("lmsysorg/sglang:latest", None),),
}
_LAUNCHER = {"vllm": ["vllm", "serve"], "sglang": ["python3", "-m", "sglang.launch_server"]}


@dataclass
class Workload:
    """One serving deployment, as this test writes it both ways."""

    model: str
    engine: str
    product: str
    mig: str | None  # a MIG profile: the single strategy's product label
    mixed_mig: bool  # the mixed strategy's resource instead
    tp: int
    pp: int
    dp: int
    expert_parallel: bool
    max_model_len: int | None
    budget: float | None
    online_fp8: bool
    kv_fp8: bool
    memory_limit_gib: int | None
    gpu_limit_delta: int  # the pod's GPUs minus what the layout uses
    image: tuple[str, str | None]
    unpriced: bool  # a flag the service reads but does not price

    @property
    def layout_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def pod_gpus(self) -> int:
        return max(1, self.layout_gpus + self.gpu_limit_delta)

    @property
    def guessed(self) -> bool:
        return self.model in _GUESSED

    def args(self) -> list[str]:
        vllm = self.engine == "vllm"
        args = [self.model] if vllm else ["--model-path", self.model]
        sizes = (
            (("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size"))
            if vllm
            else ("--tp-size", "--pp-size", "--dp-size")
        )
        for flag, size in zip(sizes, (self.tp, self.pp, self.dp), strict=True):
            if size > 1:
                args += [flag, str(size)]
        if self.expert_parallel:
            args += ["--enable-expert-parallel"] if vllm else ["--ep-size", str(self.tp)]
        if self.max_model_len is not None:
            args += ["--max-model-len" if vllm else "--context-length", str(self.max_model_len)]
        if self.budget is not None:
            flag = "--gpu-memory-utilization" if vllm else "--mem-fraction-static"
            args += [flag, str(self.budget)]
        if self.online_fp8:
            args += ["--quantization", "fp8"]
        if self.kv_fp8:  # SGLang's choices name the fp8 variant
            args += ["--kv-cache-dtype", "fp8" if vllm else "fp8_e4m3"]
        if self.unpriced:
            if vllm:  # pplx's dispatch buffers are not priced (its priced_values)
                args += ["--all2all-backend", "pplx"]
            else:
                args += ["--enable-lora", "--lora-target-modules", "q_proj"]
        return [*args, "--port", "8000"]

    def pod(self) -> dict[str, Any]:
        product = self.product
        resource = "nvidia.com/gpu"
        if self.mig is not None and self.mixed_mig:
            resource = f"nvidia.com/mig-{self.mig}"
        elif self.mig is not None:
            product = f"{product}-MIG-{self.mig}"
        limits = {resource: str(self.pod_gpus)}
        if self.memory_limit_gib is not None:
            limits["memory"] = f"{self.memory_limit_gib}Gi"
        image, _ = self.image
        container = k8s.V1Container(
            name="server",
            image=image,
            command=_LAUNCHER[self.engine],
            args=self.args(),
            resources=k8s.V1ResourceRequirements(limits=limits),
        )
        obj = k8s.V1Pod(
            api_version="v1",
            kind="Pod",
            metadata=k8s.V1ObjectMeta(name="llm", namespace="ml", annotations={MODE_KEY: "deny"}),
            spec=k8s.V1PodSpec(
                containers=[container], node_selector={"nvidia.com/gpu.product": product}
            ),
        )
        return to_json(obj)  # type: ignore[no-any-return]

    def estimate_body(self) -> dict[str, Any]:
        """The ``/v1/estimate/inference`` body for the same deployment, written by hand."""
        vllm = self.engine == "vllm"
        options: dict[str, Any] = {}
        if self.max_model_len is not None:
            options["max_model_len" if vllm else "context_length"] = self.max_model_len
        if self.budget is not None:
            options["gpu_memory_utilization" if vllm else "mem_fraction_static"] = self.budget
        if self.expert_parallel and not vllm:
            options["ep_size"] = self.tp
        if self.unpriced and vllm:
            options["all2all_backend"] = "pplx"
        if self.unpriced and not vllm:
            options["enable_lora"] = True
        _, version = self.image
        if version is not None:
            options["version"] = version
        gpu = self.product if self.mig is None else f"{self.product}-MIG-{self.mig}"
        body: dict[str, Any] = {
            "model": self.model,
            "engine": self.engine,
            "gpu": gpu,
            "gpu_count": min(self.pod_gpus, self.layout_gpus),
            "tensor_parallel_size": self.tp,
            "pipeline_parallel_size": self.pp,
            "data_parallel_size": self.dp,
        }
        if self.expert_parallel and vllm:
            body["expert_parallel"] = True
        if self.online_fp8:
            body["weight_format"] = "fp8"
        if self.kv_fp8:
            body["kv_cache_dtype"] = "fp8" if vllm else "fp8_e4m3"
        if self.memory_limit_gib is not None:
            body["host_memory_bytes"] = self.memory_limit_gib * 2**30
        if options:
            body["engine_options"] = options
        return body


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    model = draw(
        st.one_of(st.sampled_from(_MODELS), st.sampled_from(_CATALOG), st.sampled_from(_GUESSED))
    )
    engine = draw(st.sampled_from(("vllm", "sglang")))
    product = draw(st.sampled_from(_PRODUCTS))
    mig: str | None = None
    if draw(st.integers(0, 5)) == 0:
        product, mig = draw(st.sampled_from(_MIG))
    moe = any(hint in model for hint in _MOE_HINTS)
    tp = draw(st.sampled_from((1, 1, 2, 4, 8)))
    pp = draw(st.sampled_from((1, 1, 1, 2)))
    dp = draw(st.sampled_from((1, 1, 1, 2)))
    return Workload(
        model=model,
        engine=engine,
        product=product,
        mig=mig,
        mixed_mig=mig is not None and draw(st.booleans()),
        tp=tp,
        pp=pp,
        dp=dp,
        # SGLang's --ep-size divides its TP group (without DP attention).
        expert_parallel=moe and (tp > 1 or (engine == "vllm" and dp > 1)) and draw(st.booleans()),
        max_model_len=draw(st.sampled_from((None, 2048, 8192, 32768))),
        budget=draw(st.sampled_from((None, None, 0.5, 0.8, 0.95))),
        online_fp8=draw(st.integers(0, 5)) == 0,
        kv_fp8=draw(st.integers(0, 4)) == 0,
        memory_limit_gib=draw(st.sampled_from((None, None, 4, 32, 512))),
        gpu_limit_delta=draw(st.sampled_from((0, 0, 0, 0, -1, 1))),
        image=draw(st.sampled_from(_IMAGES[engine])),
        unpriced=draw(st.integers(0, 7)) == 0,
    )


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "one-verdict",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": "CREATE",
            "object": obj,
        },
    }


def _assert_summary_agrees(summary: str, fit: dict[str, Any]) -> None:
    if fit["fits"]:
        assert "does not fit" not in summary and "; fits " in summary, summary
        return
    assert "does not fit" in summary and "; fits " not in summary.split("does not fit")[0]
    assert REASON_TEXT[FitReason(fit["reason"])] in summary, (fit["reason"], summary)


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(workload=workloads())
def test_verdict_fit_summary_admission_and_estimate_agree(
    client: TestClient, workload: Workload
) -> None:
    pod = workload.pod()
    answer = client.post("/v1/preflight", json={"object": pod})
    decision = client.post("/v1/admission/deny", json=_review(pod))
    assert decision.status_code == 200, decision.text[:400]
    response = decision.json()["response"]
    for text in [*response.get("warnings", []), response.get("status", {}).get("message", "")]:
        assert_followable_in_a_pod(text)
    if answer.status_code == 422:
        # Nothing the service could size: admission never denies what it could not judge.
        assert response["allowed"] is True, (answer.json()["detail"], response)
        return
    assert answer.status_code == 200, answer.text[:600]
    (result,) = answer.json()["results"]
    verdict, fit = result["verdict"], result["fit"]
    # Pre-flight's parts.
    assert verdict in ("fits", "does_not_fit", "will_not_start"), result
    assert result["fits"] is (verdict == "fits")
    assert fit is not None
    assert fit["fits"] is (verdict == "fits"), (verdict, fit["reason"], fit["reason_detail"])
    _assert_summary_agrees(result["estimate"]["summary"], fit)
    (gpu_verdict,) = result["gpu_verdicts"]
    assert gpu_verdict["fits"] is fit["fits"] and gpu_verdict["reason"] == fit["reason"]
    # The estimate endpoint, asked the same question by hand.
    estimate = client.post("/v1/estimate/inference", json=workload.estimate_body())
    assert estimate.status_code == 200, estimate.text[:600]
    assert estimate.json()["fit"] == fit
    assert (verdict == "will_not_start") is (fit["reason"] == "too_few_gpus")
    # Admission in deny mode.
    refused = verdict in ("does_not_fit", "will_not_start")
    not_priced = workload.unpriced or workload.guessed
    denied = not response["allowed"]
    assert denied is (refused and not not_priced), (verdict, response)
    if refused and not_priced:
        assert any("not denied" in w for w in response.get("warnings", [])), response
    if denied:
        assert response["status"]["code"] == 403


_FORMATS = ("Q4_K_M", "Q8_0", "IQ4_XS", "Q3_K_S", "gguf-q4_k", "int4", "awq-int4", "fp8", "nf4")
_GPU_MEMORY_GIB = (6, 10, 16, 24, 40, 48, 80, 141)


@dataclass
class RequestFields:
    """What a pre-flight request adds to a command line (what the estimate endpoint takes)."""

    weight_format: str | None
    gpu_memory_gib: int | None  # instead of the product
    gpu_count: int | None
    hf_config: bool  # the catalog entry's config.json posted instead of its name


@st.composite
def command_cases(draw: st.DrawFn) -> tuple[Workload, RequestFields]:
    workload = draw(workloads())
    workload.image = ("", None)  # a command line names no image
    workload.memory_limit_gib = None  # nor a pod's memory limit
    workload.mixed_mig = False
    overrides = RequestFields(
        weight_format=draw(st.one_of(st.none(), st.sampled_from(_FORMATS))),
        gpu_memory_gib=draw(st.one_of(st.none(), st.sampled_from(_GPU_MEMORY_GIB))),
        gpu_count=draw(st.one_of(st.none(), st.just(workload.pod_gpus))),
        hf_config=workload.model in _MODELS and draw(st.booleans()),
    )
    return workload, overrides


def _plain(value: Any) -> Any:
    """A catalog config (read-only mappings) as the JSON a caller posts."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


_CONFIGS = {e.id: _plain(e.config) for e in load_model_catalog().all() if e.id in _MODELS}


@pytest.mark.slow
@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=command_cases())
def test_a_command_line_with_request_fields_gets_one_verdict(
    client: TestClient, case: tuple[Workload, RequestFields]
) -> None:
    workload, overrides = case
    body: dict[str, Any] = {"command": [*_LAUNCHER[workload.engine], *workload.args()]}
    estimate_body = workload.estimate_body()
    estimate_body["gpu_count"] = workload.layout_gpus
    if overrides.gpu_count is not None:
        body["gpu_count"] = overrides.gpu_count
        estimate_body["gpu_count"] = min(overrides.gpu_count, workload.layout_gpus)
    if overrides.gpu_memory_gib is not None:
        body["gpu_memory_bytes"] = estimate_body["gpu_memory_bytes"] = (
            overrides.gpu_memory_gib * 2**30
        )
        del estimate_body["gpu"]
    else:
        body["gpu"] = estimate_body["gpu"]
    if overrides.weight_format is not None:
        body["weight_format"] = overrides.weight_format
        estimate_body.setdefault("weight_format", overrides.weight_format)
    if overrides.hf_config:
        body["hf_config"] = estimate_body["hf_config"] = _CONFIGS[workload.model]
        del estimate_body["model"]
    answer = client.post("/v1/preflight", json=body)
    estimate = client.post("/v1/estimate/inference", json=estimate_body)
    if answer.status_code == 422:
        # What pre-flight cannot read, the estimate endpoint cannot answer either.
        assert estimate.status_code == 422, (answer.json()["detail"], estimate.text[:300])
        return
    assert answer.status_code == 200, answer.text[:600]
    (result,) = answer.json()["results"]
    verdict, fit = result["verdict"], result["fit"]
    assert verdict in ("fits", "does_not_fit", "will_not_start"), result
    assert result["fits"] is (verdict == "fits")
    assert fit["fits"] is (verdict == "fits"), (verdict, fit["reason"], fit["reason_detail"])
    assert (verdict == "will_not_start") is (fit["reason"] == "too_few_gpus")
    _assert_summary_agrees(result["estimate"]["summary"], fit)
    (gpu_verdict,) = result["gpu_verdicts"]
    assert gpu_verdict["fits"] is fit["fits"] and gpu_verdict["reason"] == fit["reason"]
    assert estimate.status_code == 200, estimate.text[:600]
    assert estimate.json()["fit"] == fit


def test_a_llama_cpp_preset_is_judged_as_the_file_it_makes(client: TestClient) -> None:
    # A preset (Q4_K_M) is priced as the file llama-quantize makes, more bytes than its bulk
    # type (ggml q4_k) alone. The per-GPU verdict once priced the bulk type while `fit`
    # priced the file: near the border they disagreed ("fits" next to fit.fits false).
    # Every size between the two weights' borders is asked; the parts agree at each.
    command = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 4096"
    outcomes = set()
    for mib in range(8192, 9728, 64):
        body = {"command": command, "gpu_memory_bytes": mib * 2**20, "weight_format": "Q4_K_M"}
        (result,) = client.post("/v1/preflight", json=body).json()["results"]
        assert result["fit"]["fits"] is (result["verdict"] == "fits"), mib
        assert result["gpu_verdicts"][0]["reason"] == result["fit"]["reason"], mib
        outcomes.add(result["verdict"])
    assert outcomes == {"fits", "does_not_fit"}  # the border lies inside the range asked


def test_too_few_gpus_is_the_reason_in_every_part(client: TestClient) -> None:
    # TP 2 in a pod that gets one GPU: the engine does not start. The estimate endpoint,
    # asked with the one GPU, answered 422 ("not a multiple"), and pre-flight said
    # will_not_start next to a fit of "fits 2 x H100".
    args = ["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "2"]
    obj = to_json(
        k8s.V1Pod(
            api_version="v1",
            kind="Pod",
            metadata=k8s.V1ObjectMeta(name="llm", annotations={MODE_KEY: "deny"}),
            spec=k8s.V1PodSpec(
                containers=[
                    k8s.V1Container(
                        name="vllm",
                        image="vllm/vllm-openai:latest",
                        args=args,
                        resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                    )
                ],
                node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            ),
        )
    )
    (result,) = client.post("/v1/preflight", json={"object": obj}).json()["results"]
    assert result["verdict"] == "will_not_start"
    fit = result["fit"]
    assert not fit["fits"] and fit["reason"] == "too_few_gpus" and fit["gpu_count"] == 1
    one = {"model": "meta-llama/Llama-3.1-8B-Instruct", "engine": "vllm", "gpu": "h100"}
    assert client.post("/v1/estimate/inference", json=one).json()["fit"]["fits"]
    assert fit["min_gpu_count"] == 1  # and the answer says so
    assert "does not fit 1 x" in result["estimate"]["summary"]
    estimate = client.post(
        "/v1/estimate/inference",
        json={
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "engine": "vllm",
            "tensor_parallel_size": 2,
            "gpu": "h100",
            "gpu_count": 1,
        },
    )
    assert estimate.status_code == 200 and estimate.json()["fit"]["reason"] == "too_few_gpus"
    response = client.post("/v1/admission", json=_review(obj)).json()["response"]
    assert response["allowed"] is False
    assert "needs 2: it will not start" in response["status"]["message"]
