"""Issue 28 §2: one AdmissionReview held the estimator for 44 s.

A Pod of 2000 vLLM containers, each with a distinct ``--max-model-len``, is answered without
any estimate (over the object bounds of the limit table, service/schemas/limits.py); one of
500 likewise (over the containers bound); pre-flight, admission and the extender apply the
same table. A review past its deadline stops between two containers, keeps what it checked,
and names the rest; a review that cannot start in time (the replica saturated, or queued past
its deadline) is answered at once by the route, allowed with a warning (failurePolicy: Ignore),
or denied when ``LLMMEM_ADMISSION_UNCHECKED=deny``. Work is counted (``check_plan`` calls), not
timed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.estimator.cancel import CancelToken, running
from service.scheduling import admission
from service.scheduling import check as check_module
from service.scheduling import training as training_module
from service.scheduling.admission import decide
from service.schemas.limits import LIMITS, object_problem
from service.settings import Settings
from service.workloads.admission import read_admission_review

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
H100 = "NVIDIA-H100-80GB-HBM3"


def vllm_pod(containers: int, product: str | None = H100) -> dict[str, Any]:
    """The issue's Pod: ``containers`` vLLM containers of one GPU each, every one a distinct
    ``--max-model-len`` (so no cache can share their estimates)."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": f"vllm-{i}",
                "image": "vllm/vllm-openai:v0.10.1",
                "args": ["--model", LLAMA_8B, "--max-model-len", str(4096 + i)],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
            for i in range(containers)
        ]
    }
    if product is not None:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "many"}, "spec": spec}


def review(obj: Any, uid: str = "u-28") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "object": obj,
        },
    }


class Counted:
    """``check_plan`` wrapped to count its calls; when the ``after``-th returns, ``on_call``
    runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.after: int | None = None
        self.on_call: Any = None
        original = check_module.check_plan

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            result = original(*args, **kwargs)
            if self.after is not None and self.calls == self.after:
                self.on_call()
            return result

        monkeypatch.setattr(admission, "check_plan", counted)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    return Counted(monkeypatch)


def _response(client: TestClient, body: Any, path: str = "/v1/admission") -> dict[str, Any]:
    answer = client.post(path, json=body)
    assert answer.status_code == 200, answer.text[:500]
    out = answer.json()
    assert out["kind"] == "AdmissionReview"
    return out["response"]  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------
# The limit table, applied at every entry point


def test_the_2000_container_review_is_answered_without_an_estimate(
    client: TestClient, counted: Counted
) -> None:
    body = review(vllm_pod(2000))
    assert len(json.dumps(body)) > 363_000  # the 363 KB
    response = _response(client, body)
    assert response["uid"] == "u-28"
    assert response["allowed"] is True
    assert any("object too deep or too large" in w for w in response["warnings"])
    assert counted.calls == 0


def test_the_500_container_review_is_answered_without_an_estimate(
    client: TestClient, counted: Counted
) -> None:
    response = _response(client, review(vllm_pod(500)))
    assert response["allowed"] is True
    assert any(
        f"500 serving containers; at most {LIMITS.containers}" in w for w in response["warnings"]
    )
    assert counted.calls == 0


def test_a_review_at_the_containers_bound_is_checked_whole(counted: Counted) -> None:
    # A deadline no loaded machine reaches: what is checked is that nothing is refused.
    unhurried = Settings(access_log=False, admission_deadline_s=30)
    with TestClient(create_app(unhurried), raise_server_exceptions=False) as client:
        response = _response(client, review(vllm_pod(LIMITS.containers, product=None)))
    assert response["allowed"] is True
    assert counted.calls == LIMITS.containers
    assert not any("not checked" in w for w in response["warnings"])


def test_preflight_and_the_extender_refuse_what_admission_does_not_check(
    client: TestClient,
) -> None:
    big, many = vllm_pod(2000), vllm_pod(500)
    for obj, words in ((big, "too deep or too large"), (many, "500 serving containers")):
        answer = client.post("/v1/preflight", json={"object": obj})
        assert answer.status_code == 422, answer.text[:300]
        assert words in answer.text
    answer = client.post("/v1/extender/filter", json={"Pod": big, "NodeNames": ["n1"]})
    assert answer.status_code == 422 and "too deep or too large" in answer.text
    names = [f"n{i}" for i in range(LIMITS.nodes + 1)]
    answer = client.post("/v1/extender/filter", json={"Pod": vllm_pod(1), "NodeNames": names})
    assert answer.status_code == 422 and f"at most {LIMITS.nodes}" in answer.text
    # Over the containers bound the extender judges nothing: every node comes back as it
    # came, and Error says why (a pod it cannot judge).
    node = {"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}}}
    answer = client.post("/v1/extender/filter", json={"Pod": many, "Nodes": {"items": [node]}})
    assert answer.status_code == 200
    assert [n["metadata"]["name"] for n in answer.json()["Nodes"]["items"]] == ["n1"]
    assert "too_many_containers" in answer.json()["Error"]
    assert "500 serving containers" in answer.json()["Error"]


def test_the_batch_route_shares_the_items_bound(client: TestClient) -> None:
    item = {"kind": "inference", "request": {"model": LLAMA_8B}}
    answer = client.post("/v1/estimate/batch", json={"items": [item] * (LIMITS.batch_items + 1)})
    assert answer.status_code == 422
    assert str(LIMITS.batch_items) in answer.text


def test_object_problem_counts_keys_and_levels() -> None:
    assert object_problem({"a": [1] * (LIMITS.object_keys - 1)}) is None
    assert object_problem({"a": [1] * LIMITS.object_keys}) is not None
    deep: Any = 1
    for _ in range(LIMITS.object_depth - 1):
        deep = [deep]
    assert object_problem(deep) is None
    assert object_problem([deep]) is not None


# --------------------------------------------------------------------------------------------
# Deadlines that stop the work


def _request(containers: int) -> Any:
    request = read_admission_review(review(vllm_pod(containers)))
    assert not isinstance(request, Exception) and hasattr(request, "uid")
    return request


def test_past_its_deadline_a_review_stops_between_containers(
    client: TestClient, counted: Counted
) -> None:
    from service.application.estimate_service import app_catalogs

    state = client.app.state  # type: ignore[attr-defined]
    catalogs, metrics = app_catalogs(state), state.metrics
    token = CancelToken(deadline=float("inf"))
    counted.after, counted.on_call = 3, lambda: token.cancel("deadline")
    with running(token):
        response, verdicts = decide(_request(10), "warn", catalogs, metrics)
    assert counted.calls == 3  # the third container finished; the fourth never began
    assert len(verdicts) == 3  # the checked ones keep their verdicts
    assert response.allowed
    assert any("with 3 of 10 containers checked" in w for w in response.warnings)
    # Under deny, the unchecked review is denied with the reason.
    token, counted.calls = CancelToken(deadline=float("inf")), 0
    counted.on_call = lambda: token.cancel("deadline")
    with running(token):
        denied, _ = decide(_request(10), "warn", catalogs, metrics, policy="deny")
    assert counted.calls == 3
    assert denied.allowed is False and denied.code == 403
    assert denied.message is not None and "LLMMEM_ADMISSION_UNCHECKED=deny" in denied.message


@pytest.fixture
def deny_client() -> Iterator[TestClient]:
    settings = Settings(access_log=False, admission_unchecked="deny", cpu_queue=0)
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


def test_a_saturated_replica_answers_the_review_at_once(
    client: TestClient, deny_client: TestClient, counted: Counted
) -> None:
    for test_client, allowed in ((client, True), (deny_client, False)):
        pool = test_client.app.state.cpu_pool  # type: ignore[attr-defined]
        held = 0
        while pool.admitted < pool.capacity:  # every slot taken, as by running estimates
            pool.reserve()
            held += 1
        try:
            response = _response(test_client, review(vllm_pod(1)))
        finally:
            for _ in range(held):
                pool.release_reservation()
        assert response["uid"] == "u-28"
        assert response["allowed"] is allowed
        assert any("the replica is saturated" in w for w in response["warnings"])
        registry = test_client.app.state.metrics.registry  # type: ignore[attr-defined]
        labels = {"mode": "warn", "decision": "unchecked"}
        assert registry.get_sample_value("llmmem_admission_reviews_total", labels) == 1
    assert counted.calls == 0


def test_a_review_queued_past_its_deadline_is_answered_without_running() -> None:
    settings = Settings(access_log=False, admission_deadline_s=0.05)
    release = threading.Event()
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        pool = test_client.app.state.cpu_pool  # type: ignore[attr-defined]
        # Occupy the pool's only thread from outside the loop: the review then queues behind it.
        future = pool.executor.submit(release.wait)
        try:
            response = _response(test_client, review(vllm_pod(1)))
        finally:
            release.set()
            future.result(timeout=10)
    assert response["allowed"] is True
    assert any("did not start or finish within 0.05 s" in w for w in response["warnings"])


# --------------------------------------------------------------------------------------------
# Training jobs: the same bounds and deadlines

TRL = f"trl sft --model_name_or_path {LLAMA_8B} --per_device_train_batch_size 1 --max_length 1024"


def training_pod(containers: int) -> dict[str, Any]:
    """A Pod of ``containers`` trl trainers with one GPU each."""
    spec = {
        "nodeSelector": {"nvidia.com/gpu.product": H100},
        "containers": [
            {
                "name": f"trl-{i}",
                "image": "huggingface/trl",
                "command": ["sh", "-c", f"{TRL} --seed {i}"],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
            for i in range(containers)
        ],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainers"}, "spec": spec}


class CountedTraining:
    """``check_training`` (admission and pre-flight) and ``plan_training`` (the extender)
    wrapped to count their calls; when the ``after``-th check returns, ``on_call`` runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.checks = 0
        self.plans = 0
        self.after: int | None = None
        self.on_call: Any = None
        check, plan = training_module.check_training, training_module.plan_training

        def counted_check(*args: Any, **kwargs: Any) -> Any:
            self.checks += 1
            result = check(*args, **kwargs)
            if self.after is not None and self.checks == self.after:
                self.on_call()
            return result

        def counted_plan(*args: Any, **kwargs: Any) -> Any:
            self.plans += 1
            return plan(*args, **kwargs)

        monkeypatch.setattr(training_module, "check_training", counted_check)
        monkeypatch.setattr(training_module, "plan_training", counted_plan)


def test_training_containers_share_the_containers_bound(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = CountedTraining(monkeypatch)
    many = training_pod(LIMITS.containers + 1)
    expected = f"{LIMITS.containers + 1} training containers; at most {LIMITS.containers}"
    response = _response(client, review(many))
    assert response["allowed"] is True
    assert any(expected in w for w in response["warnings"])
    answer = client.post("/v1/preflight", json={"object": many})
    assert answer.status_code == 422 and expected in answer.text
    node = {"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": H100}}}
    args = {"Pod": many, "Nodes": {"items": [node]}}
    answer = client.post("/v1/extender/filter", json=args)
    assert answer.status_code == 200 and "too_many_containers" in answer.json()["Error"]
    answer = client.post("/v1/extender/prioritize", json=args)
    assert answer.status_code == 422 and "too_many_containers" in answer.text
    assert counted.checks == 0 and counted.plans == 0  # nothing sized


def test_past_its_deadline_a_training_review_stops_between_containers(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.application.estimate_service import app_catalogs

    counted = CountedTraining(monkeypatch)
    state = client.app.state  # type: ignore[attr-defined]
    catalogs, metrics = app_catalogs(state), state.metrics
    request = read_admission_review(review(training_pod(5)))
    token = CancelToken(deadline=float("inf"))
    counted.after, counted.on_call = 2, lambda: token.cancel("deadline")
    with running(token):
        response, verdicts = decide(request, "warn", catalogs, metrics)  # type: ignore[arg-type]
    assert counted.checks == 2 and len(verdicts) == 2
    assert response.allowed
    assert any("with 2 of 5 containers checked" in w for w in response.warnings)
    token, counted.checks = CancelToken(deadline=float("inf")), 0
    counted.on_call = lambda: token.cancel("deadline")
    with running(token):
        denied, _ = decide(request, "warn", catalogs, metrics, policy="deny")  # type: ignore[arg-type]
    assert counted.checks == 2
    assert denied.allowed is False and denied.code == 403
