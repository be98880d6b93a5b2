"""TLS with client-certificate verification and bearer tokens, against the real server.

A throwaway CA (tests/server/certs.py) issues the server's certificate and a client's; a second
CA issues a rogue client certificate. The server runs as production does (`python -m service`),
configured only through `LLMMEM_*` variables.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench import harness
from service.api.tls import CertificateReloader, server_context
from service.settings import Settings
from tests.server.certs import Authority, Pair

pytestmark = pytest.mark.slow

TOKEN = "tls-test-bearer-token-0123456789"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pair]:
    directory = tmp_path_factory.mktemp("pki")
    ca = Authority(directory, "ca")
    rogue = Authority(directory, "rogue-ca")
    return {
        "ca": ca.pair,
        "server": ca.issue("server", "gpu-memory-estimator", server=True),
        "client": ca.issue("client", "kube-scheduler", server=False),
        "rogue": rogue.issue("rogue", "intruder", server=False),
    }


def _context(pki: dict[str, Pair], client: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"].cert))
    if client is not None:
        context.load_cert_chain(pki[client].cert, pki[client].key)
    return context


def _start(tmp: Path, pki: dict[str, Pair], mode: str) -> harness.Server:
    tokens = tmp / "tokens"
    tokens.write_text(TOKEN + "\n")
    env = {
        "LLMMEM_ACCESS_LOG": "false",
        "LLMMEM_TLS_CERT_FILE": str(pki["server"].cert),
        "LLMMEM_TLS_KEY_FILE": str(pki["server"].key),
        "LLMMEM_TLS_CLIENT_CA_FILE": str(pki["ca"].cert),
        "LLMMEM_TLS_CLIENT_CERT": mode,
        "LLMMEM_AUTH_TOKENS_PATH": str(tokens),
    }
    server = harness.start_service(tmp / f"{mode}.log", extra_env=env)
    deadline = time.monotonic() + 60
    with httpx.Client(verify=_context(pki, "client")) as client:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise AssertionError(server.log_tail())
            try:
                if client.get(f"https://127.0.0.1:{server.port}/readyz").status_code == 200:
                    return server
            except httpx.TransportError:
                time.sleep(0.2)
    raise AssertionError(f"not ready:\n{server.log_tail()}")


@pytest.fixture(scope="module")
def optional_server(
    tmp_path_factory: pytest.TempPathFactory, pki: dict[str, Pair]
) -> Iterator[str]:
    server = _start(tmp_path_factory.mktemp("optional"), pki, "optional")
    try:
        yield f"https://127.0.0.1:{server.port}"
    finally:
        harness.stop(server)


def _get(url: str, context: ssl.SSLContext, **headers: str) -> httpx.Response:
    with httpx.Client(verify=context) as client:
        return client.get(url, headers=headers)


def test_no_credential_is_refused(optional_server: str, pki: dict[str, Pair]) -> None:
    response = _get(optional_server + "/v1/gpus", _context(pki, None))
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer ")
    assert response.headers["content-type"] == "application/problem+json"


def test_a_verified_client_certificate_is_enough(
    optional_server: str, pki: dict[str, Pair]
) -> None:
    assert _get(optional_server + "/v1/gpus", _context(pki, "client")).status_code == 200


def test_a_bearer_token_is_enough(optional_server: str, pki: dict[str, Pair]) -> None:
    context = _context(pki, None)
    ok = _get(optional_server + "/v1/gpus", context, Authorization=f"Bearer {TOKEN}")
    assert ok.status_code == 200
    assert _get(optional_server + "/v1/gpus", context).status_code == 401


def test_probes_need_no_credential(optional_server: str, pki: dict[str, Pair]) -> None:
    for path in ("/healthz", "/readyz"):
        assert _get(optional_server + path, _context(pki, None)).status_code == 200


def test_a_certificate_from_another_ca_fails_the_handshake(
    optional_server: str, pki: dict[str, Pair]
) -> None:
    with pytest.raises(httpx.TransportError):
        _get(optional_server + "/healthz", _context(pki, "rogue"))


def test_plain_http_on_the_tls_port_gets_no_answer(optional_server: str) -> None:
    with pytest.raises(httpx.TransportError):
        httpx.get(optional_server.replace("https", "http") + "/healthz", timeout=5)


def test_required_mode_refuses_the_handshake_without_a_certificate(
    tmp_path: Path, pki: dict[str, Pair]
) -> None:
    server = _start(tmp_path, pki, "required")
    url = f"https://127.0.0.1:{server.port}"
    try:
        with pytest.raises(httpx.TransportError):
            _get(url + "/healthz", _context(pki, None), Authorization=f"Bearer {TOKEN}")
        assert _get(url + "/v1/gpus", _context(pki, "client")).status_code == 200
    finally:
        harness.stop(server)


def _handshake_subject(context: ssl.SSLContext, ca: Path) -> str:
    """Complete a handshake in memory against `context`; the server certificate's CN."""
    client_ctx = ssl.create_default_context(cafile=str(ca))
    client_ctx.check_hostname = False
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_side=False)
    server = context.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        try:
            client.do_handshake()
            break
        except ssl.SSLWantReadError:
            continue
    cert = client.getpeercert()
    return dict(rdn[0] for rdn in cert["subject"])["commonName"]


def test_a_rotated_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    ca = Authority(tmp_path, "ca")
    first = ca.issue("first", "first-cert", server=True)
    live = Pair(tmp_path / "tls.crt", tmp_path / "tls.key")
    live.cert.write_bytes(first.cert.read_bytes())
    live.key.write_bytes(first.key.read_bytes())
    settings = Settings(tls_cert_file=live.cert, tls_key_file=live.key)
    context = server_context(settings)
    reloader = CertificateReloader(context, settings, check_interval_s=0)
    assert _handshake_subject(context, ca.pair.cert) == "first-cert"
    second = ca.issue("second", "second-cert", server=True)
    live.cert.write_bytes(second.cert.read_bytes())
    live.key.write_bytes(second.key.read_bytes())
    reloader.maybe_reload()
    assert _handshake_subject(context, ca.pair.cert) == "second-cert"
    # Half a rotation (new certificate, old key) is refused: the context keeps a working pair.
    third = ca.issue("third", "third-cert", server=True)
    live.cert.write_bytes(third.cert.read_bytes())
    reloader.maybe_reload()
    assert _handshake_subject(context, ca.pair.cert) == "second-cert"
