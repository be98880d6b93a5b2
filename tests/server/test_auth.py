"""Optional bearer-token authentication (service/api/auth.py), in-process.

Off by default; with `LLMMEM_AUTH_TOKENS_PATH` every route but the probes (and /metrics unless
`LLMMEM_METRICS_REQUIRE_AUTH`) needs a token from the mounted file or directory, which is
reloaded when it changes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.auth import TokenFileError, TokenStore
from service.app import create_app
from service.settings import Settings

TOKEN = "s3cret-token-for-the-scheduler-0001"
OTHER = "another-token-for-the-webhook-0002"


@pytest.fixture()
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(f"# callers\n{TOKEN}\n\n{OTHER}\n")
    return path


def _client(**settings: object) -> TestClient:
    return TestClient(create_app(Settings(access_log=False, **settings)))  # type: ignore[arg-type]


@pytest.fixture()
def protected(token_file: Path) -> Iterator[TestClient]:
    with _client(auth_tokens_path=token_file) as client:
        yield client


def test_off_by_default(client: TestClient) -> None:
    assert client.get("/v1/gpus").status_code == 200


def test_no_token_is_a_401_problem_with_a_bearer_challenge(protected: TestClient) -> None:
    response = protected.get("/v1/gpus")
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == 'Bearer realm="gpu-memory-estimator"'
    body = response.json()
    assert body["type"] == "/problems/unauthenticated"
    assert body["request_id"] == response.headers["x-request-id"]


def test_a_wrong_token_is_named_invalid(protected: TestClient) -> None:
    response = protected.get("/v1/gpus", headers={"Authorization": f"Bearer {TOKEN}x"})
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


@pytest.mark.parametrize("token", [TOKEN, OTHER])
def test_each_listed_token_is_accepted(protected: TestClient, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    assert protected.get("/v1/gpus", headers=headers).status_code == 200
    response = protected.post(
        "/v1/estimate/inference",
        json={"parameter_count": 7e9, "estimator": "simple"},
        headers={"authorization": f"bearer {token}"},  # the scheme is case-insensitive
    )
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/estimate/inference"),
        ("POST", "/v1/estimate/batch"),
        ("GET", "/v1/models"),
        ("GET", "/"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("HEAD", "/v1/gpus"),
        ("GET", "/no-such-route"),
    ],
)
def test_everything_else_is_protected(protected: TestClient, method: str, path: str) -> None:
    assert protected.request(method, path).status_code == 401


def test_probes_and_metrics_stay_open(protected: TestClient) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        assert protected.get(path).status_code == 200, path


def test_metrics_can_require_a_token(token_file: Path) -> None:
    with _client(auth_tokens_path=token_file, metrics_require_auth=True) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/healthz").status_code == 200
        ok = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200


def test_a_short_token_stops_start_up(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("changeme\n")
    with pytest.raises(TokenFileError, match="shorter than 16"):
        create_app(Settings(access_log=False, auth_tokens_path=path))


def test_a_missing_token_file_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError):
        create_app(Settings(access_log=False, auth_tokens_path=tmp_path / "absent"))


def _mount_secret(root: Path, version: str, tokens: dict[str, str]) -> None:
    """A Secret volume as the kubelet writes it: keys are links into `..data`, itself a link
    to a timestamped directory that is swapped atomically on update."""
    data = root / f"..{version}"
    data.mkdir()
    for key, token in tokens.items():
        (data / key).write_text(token)
        link = root / key
        if not link.is_symlink():
            link.symlink_to(Path("..data") / key)
    tmp_link = root / "..data_tmp"
    tmp_link.symlink_to(data.name)
    os.replace(tmp_link, root / "..data")


def test_a_mounted_secret_directory_is_read_and_reloaded(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    _mount_secret(secret, "v1", {"scheduler": TOKEN, "webhook": OTHER})
    store = TokenStore(secret, reload_check_s=0)
    assert store.accepts(TOKEN) and store.accepts(OTHER)
    assert not store.accepts("not-a-listed-token-at-all")
    rotated = "rotated-token-for-the-scheduler-0003"
    _mount_secret(secret, "v2", {"scheduler": rotated, "webhook": OTHER})
    assert store.accepts(rotated)
    assert not store.accepts(TOKEN)


def test_a_bad_rotation_keeps_the_last_good_tokens(token_file: Path) -> None:
    store = TokenStore(token_file, reload_check_s=0)
    token_file.write_text("short\n")
    assert store.accepts(TOKEN)  # the unreadable update is refused, the old set kept
    token_file.write_text(OTHER + "\n")
    assert store.accepts(OTHER) and not store.accepts(TOKEN)


def test_reload_is_rate_limited(token_file: Path) -> None:
    clock = [0.0]
    store = TokenStore(token_file, reload_check_s=5)
    store.watch.clock = lambda: clock[0]
    store.watch.next_look = 5.0
    token_file.write_text(OTHER + "\n")
    assert store.accepts(TOKEN)  # not looked at yet
    clock[0] = 5.0
    assert not store.accepts(TOKEN) and store.accepts(OTHER)


def test_tokens_are_held_as_digests_only(token_file: Path) -> None:
    store = TokenStore(token_file)
    assert all(len(d) == 32 for d in store.digests)
    assert TOKEN.encode() not in b"".join(store.digests)
