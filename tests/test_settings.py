"""Settings come from LLMMEM_* environment variables and are validated at start-up."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.settings import Settings, get_settings


def test_defaults() -> None:
    settings = Settings()
    assert (settings.host, settings.port) == ("127.0.0.1", 8000)
    assert settings.max_body_bytes == 1_048_576
    assert settings.docs_enabled is True


def test_read_from_prefixed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMMEM_PORT", "9123")
    monkeypatch.setenv("LLMMEM_LOG_LEVEL", "debug")
    monkeypatch.setenv("LLMMEM_DOCS_ENABLED", "false")
    monkeypatch.setenv("PORT", "1")  # unprefixed variables are not ours
    settings = Settings()
    assert settings.port == 9123
    assert settings.log_level == "debug"
    assert settings.docs_enabled is False


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LLMMEM_PORT", "70000"),
        ("LLMMEM_PORT", "eighty"),
        ("LLMMEM_LOG_LEVEL", "loud"),
        ("LLMMEM_MAX_BODY_BYTES", "10"),
        ("LLMMEM_GRACEFUL_SHUTDOWN_S", "0"),
    ],
)
def test_bad_values_stop_start_up_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as error:
        Settings()
    assert variable.removeprefix("LLMMEM_").lower() in str(error.value)


def test_settings_are_immutable_and_cached() -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.port = 1  # type: ignore[misc]
    assert get_settings() is get_settings()


def test_catalog_paths_are_honoured(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.catalog.gpu_catalog import load_gpu_catalog

    source = load_gpu_catalog()
    assert source.all()
    catalog = tmp_path / "gpus.toml"
    text = (
        "[[gpu]]\n"
        'id = "test-gpu"\nname = "Test GPU"\nvendor = "nvidia"\nmemory_mib = 1024\n'
        "marketed_memory_gb = 1\nmemory_bandwidth_gbps = 100\nbf16_tflops = 10\nfp8 = false\n"
        'nvml_name = "Test GPU"\nk8s_product_label = "Test-GPU"\nsource = "test"\n'
    )
    catalog.write_text(text)
    with TestClient(create_app(Settings(gpu_catalog_path=catalog, access_log=False))) as client:
        ids = [g["id"] for g in client.get("/v1/gpus").json()["gpus"]]
    assert ids == ["test-gpu"]


def test_hardening_defaults_are_safe() -> None:
    """Nothing trusted, nothing required, limits on: what an unconfigured replica runs with."""
    settings = Settings()
    assert settings.trusted_proxies == []
    assert settings.auth_enabled is False and settings.tls_enabled is False
    assert settings.header_max_bytes == 16_384
    assert settings.header_read_timeout_s == 10.0
    assert (settings.cpu_threads, settings.cpu_queue) == (1, 32)
    assert settings.estimate_deadline_s == 10.0


def test_trusted_proxies_are_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMMEM_FORWARDED_ALLOW_IPS", " 10.0.0.0/8, 192.168.1.7 ,")
    assert Settings().trusted_proxies == ["10.0.0.0/8", "192.168.1.7"]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"LLMMEM_TLS_CERT_FILE": "/c.pem"}, "tls_key_file"),
        ({"LLMMEM_TLS_CLIENT_CA_FILE": "/ca.pem"}, "tls_client_ca_file"),
        (
            {
                "LLMMEM_TLS_CERT_FILE": "/c.pem",
                "LLMMEM_TLS_KEY_FILE": "/k.pem",
                "LLMMEM_TLS_CLIENT_CERT": "required",
            },
            "tls_client_ca_file",
        ),
        ({"LLMMEM_HEADER_MAX_BYTES": "100"}, "header_max_bytes"),
        ({"LLMMEM_CPU_THREADS": "0"}, "cpu_threads"),
    ],
)
def test_inconsistent_server_settings_stop_start_up(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValidationError) as error:
        Settings()
    assert named in str(error.value)


def test_any_credential_turns_authentication_on(tmp_path: Path) -> None:
    assert Settings(auth_tokens_path=tmp_path).auth_enabled
    tls = Settings(
        tls_cert_file=tmp_path / "c", tls_key_file=tmp_path / "k", tls_client_ca_file=tmp_path
    )
    assert tls.tls_enabled and tls.auth_enabled
