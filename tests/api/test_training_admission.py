"""The admission webhook and the scheduler extender on training jobs.

AdmissionReview and ExtenderArgs shapes as in tests/api/test_admission.py and test_extender.py;
whether a job fits is asked of ``POST /v1/estimate/finetune`` on the body written out here.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from kubernetes import client as k8s

from service.scheduling.admission import MODE_KEY
from tests.api.k8s_objects import node, pod_spec, to_json
from tests.api.test_admission import admit, review

H100 = "NVIDIA-H100-80GB-HBM3"
LLAMA_70B = "meta-llama/Llama-3.1-70B"
# trl sft on one GPU: full fine-tune, and the QLoRA version (4-bit base, LoRA adapters).
FULL = f"trl sft --model_name_or_path {LLAMA_70B} --per_device_train_batch_size 1 --max_length 1024"
QLORA = f"{FULL} --use_peft --load_in_4bit"


def pytorchjob(command: str, product: str | None = H100, gpus: str = "1", **labels: str) -> Any:
    spec = pod_spec(
        k8s.V1Container(
            name="pytorch",
            image="huggingface/trl",
            command=["sh", "-c", command],
            resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": gpus}),
        ),
        product=product,
    )
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama-70b", "namespace": "ml", "labels": labels or None},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": to_json(k8s.V1PodTemplateSpec(spec=spec))}
            }
        },
    }


def fits_on_h100(client: TestClient, **fields: Any) -> dict[str, Any]:
    body = {"model": LLAMA_70B, "batch_size": 1, "sequence_length": 1024, "gpu": H100, **fields}
    response = client.post("/v1/estimate/finetune", json=body)
    assert response.status_code == 200, response.text[:400]
    return response.json()["fit"]  # type: ignore[no-any-return]


def test_deny_refuses_a_full_70b_on_one_80gb_gpu(client: TestClient) -> None:
    # Independently: fp32 weights of a 70B (TRL loads float32) alone exceed 80 GB, whatever
    # the loss; even plain SGD (no optimizer state) and no logits do not fit.
    floor = fits_on_h100(
        client,
        precision="bf16-mixed",
        optimizer="sgd",
        loss_implementation="cut-cross-entropy",
        gradient_checkpointing="full",
    )
    assert floor["fits"] is False
    answer = admit(client, review(pytorchjob(FULL)), "/v1/admission/deny")
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 403
    message = answer["status"]["message"]
    assert f"{MODE_KEY}=deny" in message and H100 in message
    assert "fits with:" in message  # what to change (LoRA, a 4-bit base, more GPUs)
    assert answer["auditAnnotations"] == {"verdict": "does_not_fit"}


def test_deny_admits_the_qlora_version(client: TestClient) -> None:
    fit = fits_on_h100(
        client,
        method="qlora",
        weight_format="nf4-single",
        kbit_preparation="peft",
        lora={"rank": 16, "target_modules": ["q_proj", "v_proj"]},
        precision="bf16-mixed",
        optimizer="adamw",
        optimizer_foreach=False,
        gradient_checkpointing="full",
        attention="sdpa",
    )
    assert fit["fits"] is True
    answer = admit(client, review(pytorchjob(QLORA)), "/v1/admission/deny")
    assert answer["allowed"] is True
    assert answer["auditAnnotations"] == {"verdict": "fits"}


def test_warn_mode_warns_instead(client: TestClient) -> None:
    answer = admit(client, review(pytorchjob(FULL)))
    assert answer["allowed"] is True
    assert any("does not fit" in w and H100 in w for w in answer["warnings"])
    labelled = admit(client, review(pytorchjob(FULL, **{MODE_KEY: "deny"})))
    assert labelled["allowed"] is False


def test_what_is_not_priced_is_never_refused(client: TestClient) -> None:
    # The DeepSpeed config is not in the review: ZeRO-3 with CPU offload could fit one GPU.
    unknown = f"{FULL.replace('trl sft', 'torchrun train.py')} --deepspeed /cfg/ds.json"
    answer = admit(client, review(pytorchjob(unknown)), "/v1/admission/deny")
    assert answer["allowed"] is True
    assert any("not refused" in w for w in answer["warnings"])


def test_an_unpinned_job_is_allowed_with_the_products_it_fits_on(client: TestClient) -> None:
    answer = admit(client, review(pytorchjob(QLORA, product=None)), "/v1/admission/deny")
    assert answer["allowed"] is True
    assert any("no GPU product pinned; fits on" in w for w in answer["warnings"])


# A script given every setting: Llama-3.1-8B loaded in bf16 and trained in bf16 (weights,
# gradients and AdamW states 2 bytes each: 64 GB for 8B parameters), priced exactly.
SCRIPT = (
    "torchrun train.py --model_name_or_path meta-llama/Llama-3.1-8B --dtype bfloat16 --bf16 "
    "--per_device_train_batch_size 1 --max_seq_length 1024 --gradient_checkpointing "
    "--attn_implementation flash_attention_2"
)


def training_pod() -> Any:
    """A PyTorchJob worker pod as the operator creates it (PET_* variables set)."""
    spec = pod_spec(
        k8s.V1Container(
            name="pytorch",
            image="huggingface/transformers",
            command=["sh", "-c", SCRIPT],
            env=[
                k8s.V1EnvVar(name="PET_NNODES", value="1"),
                k8s.V1EnvVar(name="PET_NPROC_PER_NODE", value="auto"),
            ],
            resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
        )
    )
    return to_json(
        k8s.V1Pod(api_version="v1", kind="Pod", metadata=k8s.V1ObjectMeta(name="w-0"), spec=spec)
    )


def test_extender_filters_training_pods_by_the_same_judgement(client: TestClient) -> None:
    nodes = {
        "h100": {"nvidia.com/gpu.product": H100, "nvidia.com/gpu.count": "8"},
        "l4": {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "1"},
        "cpu": {"kubernetes.io/os": "linux"},
    }
    items = [node(name, labels) for name, labels in nodes.items()]
    body = {"Pod": training_pod(), "Nodes": to_json(k8s.V1NodeList(items=items))}
    response = client.post("/v1/extender/filter", json=body)
    assert response.status_code == 200, response.text[:400]
    result = response.json()
    passing = {n["metadata"]["name"] for n in result["Nodes"]["items"]}
    body_8b = {
        "model": "meta-llama/Llama-3.1-8B",
        "precision": "bf16",
        "optimizer": "adamw",
        "optimizer_foreach": False,
        "batch_size": 1,
        "sequence_length": 1024,
        "gradient_checkpointing": "full",
        "attention": "flash",
    }
    for gpu, expected in ((H100, True), ("NVIDIA-L4", False)):
        fit = client.post("/v1/estimate/finetune", json={**body_8b, "gpu": gpu}).json()["fit"]
        assert fit["fits"] is expected
    assert passing == {"h100", "cpu"}  # a node without GPU labels cannot be judged
    assert "l4" in result["FailedAndUnresolvableNodes"]
    scores = client.post("/v1/extender/prioritize", json=body).json()
    by_host = {s["Host"]: s["Score"] for s in scores}
    assert by_host["l4"] == 0 and by_host["h100"] >= 1
