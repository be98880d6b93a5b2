"""The admission webhook over TLS, called as the API server calls it.

The service runs as production runs it (`python -m service`), serving TLS from a certificate
issued by a throwaway CA (tests/server/certs.py), configured only through the `LLMMEM_TLS_*`
variables the deploy overlay sets. The client does what the API server does with a webhook's
`clientConfig.caBundle`: it trusts only that CA, checks the server name, and POSTs an
`admission.k8s.io/v1` AdmissionReview (k8s.io/api admission/v1/types.go), then reads the
`response` back. The pod is built with the official `kubernetes` client's models.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench import harness
from service.scheduling.admission import MODE_KEY
from tests.api.k8s_objects import container, pod, to_json
from tests.server.certs import Authority, Pair

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pair]:
    directory = tmp_path_factory.mktemp("webhook-pki")
    ca = Authority(directory, "webhook-ca")
    other = Authority(directory, "other-ca")
    # The API server connects to <service>.<namespace>.svc; the test, to 127.0.0.1 (a SAN).
    return {
        "ca": ca.pair,
        "server": ca.issue("webhook", "gpu-memory-estimator.llmmem.svc", server=True),
        "other": other.pair,
    }


def _trusting(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory, pki: dict[str, Pair]) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("webhook")
    env = {
        "LLMMEM_ACCESS_LOG": "false",
        "LLMMEM_TLS_CERT_FILE": str(pki["server"].cert),
        "LLMMEM_TLS_KEY_FILE": str(pki["server"].key),
    }
    server = harness.start_service(tmp / "webhook.log", extra_env=env)
    url = f"https://127.0.0.1:{server.port}"  # the certificate names 127.0.0.1
    deadline = time.monotonic() + 60
    try:
        with httpx.Client(verify=_trusting(pki["ca"].cert)) as client:
            while True:
                if server.process.poll() is not None:
                    raise AssertionError(server.log_tail())
                try:
                    if client.get(url + "/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"not ready:\n{server.log_tail()}") from None
                    time.sleep(0.2)
        yield url
    finally:
        harness.stop(server)


def _review(uid: str, mode: str) -> dict[str, Any]:
    gpu_pod = pod(
        container("vllm", args=["meta-llama/Llama-3.1-8B-Instruct"], gpus={"nvidia.com/gpu": "1"}),
        product="NVIDIA-L4",
        annotations={MODE_KEY: mode},
    )
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": "CREATE",
            "object": to_json(gpu_pod),
            "dryRun": False,
        },
    }


def test_the_api_server_gets_an_answer_over_verified_tls(
    webhook: str, pki: dict[str, Pair]
) -> None:
    with httpx.Client(verify=_trusting(pki["ca"].cert), timeout=10) as client:
        # timeoutSeconds in the webhook configuration is 5: the answer comes well within it.
        started = time.perf_counter()
        response = client.post(webhook + "/v1/admission", json=_review("uid-1", "deny"))
        elapsed = time.perf_counter() - started
    assert response.status_code == 200
    answer = response.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "uid-1"
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 403
    assert elapsed < 5


def test_warn_mode_over_tls_allows_with_a_warning(webhook: str, pki: dict[str, Pair]) -> None:
    with httpx.Client(verify=_trusting(pki["ca"].cert), timeout=10) as client:
        response = client.post(webhook + "/v1/admission", json=_review("uid-2", "warn"))
    answer = response.json()["response"]
    assert answer["uid"] == "uid-2" and answer["allowed"] is True and answer["warnings"]


def test_a_client_trusting_another_ca_refuses_the_server(
    webhook: str, pki: dict[str, Pair]
) -> None:
    with pytest.raises(httpx.ConnectError), httpx.Client(verify=_trusting(pki["other"].cert)) as c:
        c.post(webhook + "/v1/admission", json=_review("uid-3", "warn"))
