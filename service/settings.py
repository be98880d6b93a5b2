"""Service settings: one pydantic-settings class, read from `LLMMEM_*` environment variables.

Validated once at start-up (a bad value stops the process with a message naming the variable);
handed to routes through the cached `get_settings` dependency, which tests override.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of the service; the README lists them with their environment variables."""

    model_config = SettingsConfigDict(env_prefix="LLMMEM_", extra="ignore", frozen=True)

    host: str = Field("127.0.0.1", description="Interface uvicorn binds to.")
    port: int = Field(8000, ge=1, le=65535, description="TCP port uvicorn listens on.")
    log_level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        "info", description="Level of the service's JSON logs."
    )
    access_log: bool = Field(True, description="Write one JSON access-log line per request.")
    max_body_bytes: int = Field(
        1_048_576, ge=1024, le=64 * 1_048_576, description="Largest request body accepted (413)."
    )
    gpu_catalog_path: Path | None = Field(
        None, description="GPU catalog TOML file; default: the one embedded in the package."
    )
    model_catalog_path: Path | None = Field(
        None, description="Model catalog directory; default: the one embedded in the package."
    )
    docs_enabled: bool = Field(True, description="Serve /docs and /redoc (from local assets).")
    timeout_keep_alive_s: int = Field(
        5, ge=1, le=300, description="Seconds an idle keep-alive connection is held open."
    )
    request_read_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="Seconds a request's whole body may take to arrive after its headers (408).",
    )
    response_cache_max_request_bytes: int = Field(
        16_384,
        ge=256,
        le=1_048_576,
        description="Largest request body whose answer the response cache keeps.",
    )
    cache_bytes: int = Field(
        48 * 1_048_576,
        ge=0,
        le=1024 * 1_048_576,
        description="One memory budget, in bytes, for every cache of a worker: a quarter "
        "replays repeated answers byte for byte (the response cache), the rest keeps the "
        "estimator's derived values (serving setups, training states, minimum GPU counts); 0 "
        "turns caching off.",
    )
    graceful_shutdown_s: int = Field(
        20, ge=1, le=600, description="Seconds in-flight requests get to finish after SIGTERM."
    )
    # --- the HTTP server (service/api/http_protocol.py, service/api/server.py) -------------
    header_max_bytes: int = Field(
        16_384,
        ge=1024,
        le=1_048_576,
        description="Largest request head (request line and header fields) accepted; larger "
        "heads are refused with 431 (414 when the request target alone is larger) before they "
        "are buffered.",
    )
    header_read_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="Seconds a request head may take to arrive, counted from the connection's "
        "opening or from the first byte of a later request on a kept-alive connection (408).",
    )
    forwarded_allow_ips: str = Field(
        "",
        description="Comma-separated addresses or CIDR networks of the proxies trusted to set "
        "X-Forwarded-For and X-Forwarded-Proto; empty (the default): nobody, the headers are "
        "ignored.",
    )
    # --- TLS and authentication (service/api/tls.py, service/api/auth.py) -------------------
    tls_cert_file: Path | None = Field(
        None, description="PEM certificate chain of the server; with tls_key_file turns TLS on."
    )
    tls_key_file: Path | None = Field(None, description="PEM private key of tls_cert_file.")
    tls_client_ca_file: Path | None = Field(
        None,
        description="PEM bundle of the CAs whose client certificates are accepted; set, a "
        "verified client certificate authenticates a request.",
    )
    tls_client_cert: Literal["optional", "required"] = Field(
        "optional",
        description="`optional`: a client certificate is verified when presented and "
        "protected routes answer 401/403 without a credential; `required`: the TLS handshake "
        "refuses clients without one (kubelet probes included).",
    )
    auth_tokens_path: Path | None = Field(
        None,
        description="A file (one token per line) or a directory (one token per file, as a "
        "mounted Secret) of accepted bearer tokens; set, protected routes need one. Reloaded "
        "when it changes.",
    )
    metrics_require_auth: bool = Field(
        False, description="With authentication on, /metrics also needs a credential."
    )
    # --- CPU-bound work off the event loop (service/api/concurrency.py) ---------------------
    cpu_threads: int = Field(
        1,
        ge=1,
        le=16,
        description="Threads per worker that run estimates off the event loop.",
    )
    cpu_queue: int = Field(
        32,
        ge=0,
        le=4096,
        description="Estimates per worker that may wait for a thread; beyond it, 503 with "
        "Retry-After.",
    )
    estimate_deadline_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="Seconds an estimate (or a batch) may take, queueing included (503 after).",
    )
    inline_estimate_max_ms: float = Field(
        1.0,
        ge=0,
        le=50,
        description="An estimate of a kind whose cost (the median CPU time of its last three "
        "runs, ms) is at most this runs on the event loop instead of the pool (no thread hop), "
        "at most 2 ms of such work between two polls of the loop; 0 "
        "runs every estimate on the pool.",
    )
    admission_deadline_s: float = Field(
        3.0,
        gt=0,
        le=30,
        description="Seconds an admission review may take, queueing included; keep it below "
        "the webhook's timeoutSeconds (5 in deploy/). Past it the containers not yet checked "
        "are named in a warning, or the review is denied under admission_unchecked=deny.",
    )
    admission_unchecked: Literal["allow", "deny"] = Field(
        "allow",
        description="What a review the service could not check (past its deadline, over the "
        "limit table's bounds, the replica saturated) gets: `allow` with a warning saying why "
        "(the webhook's failurePolicy Ignore), or `deny` with the reason (failurePolicy Fail).",
    )
    batch_cost_budget: int = Field(
        131_072,
        ge=1_024,
        le=1_024_000,
        description="Most layer-items (the sum of the items' layer counts) one batch may cost; "
        "a batch over it is refused with 413 before any estimate runs.",
    )

    # --- the model store (service/model_store/, docs/models.md) ------------------------------
    model_dirs: str = Field(
        "",
        description="Directories holding model files to index, read-only (os.pathsep-separated: "
        "`:` on Linux): Hugging Face hub caches and plain model directories. Empty: no store.",
    )
    model_store_rescan_s: float = Field(
        300.0,
        ge=1,
        le=86_400,
        description="Seconds between two scans of the model store (new and removed models "
        "appear without a restart).",
    )
    model_store_max_entries: int = Field(
        100_000,
        ge=100,
        le=10_000_000,
        description="Directory entries one scan of the model store visits at most.",
    )
    model_store_max_header_bytes: int = Field(
        100_000_000,
        ge=1024,
        le=1_000_000_000,
        description="Largest safetensors header read (the safetensors library's own limit); "
        "a file with a larger one is skipped.",
    )
    model_store_max_gguf_metadata_bytes: int = Field(
        64 * 1_048_576,
        ge=1024,
        le=1024 * 1_048_576,
        description="Largest GGUF metadata and tensor-info section read; a file with a larger "
        "one is skipped.",
    )
    model_store_max_models: int = Field(
        2000,
        ge=1,
        le=100_000,
        description="Models one scan of the model store indexes at most (each costs its "
        "architecture and byte counts in memory).",
    )
    model_store_read_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Seconds reading one model's headers may take; past it the model is "
        "skipped for this scan and tried again at the next.",
    )

    @model_validator(mode="after")
    def _tls_settings_agree(self) -> Self:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file must be set together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("tls_client_ca_file needs TLS on (tls_cert_file and tls_key_file)")
        if self.tls_client_cert == "required" and self.tls_client_ca_file is None:
            raise ValueError("tls_client_cert=required needs tls_client_ca_file")
        return self

    @property
    def response_cache_bytes(self) -> int:
        """The response cache's share of ``cache_bytes``: a quarter, about 500 typical answers
        at 48 MiB, enough for the repeated questions of a scheduler's pre-flight loop."""
        return self.cache_bytes // 4

    @property
    def estimator_cache_bytes(self) -> int:
        return self.cache_bytes - self.response_cache_bytes

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert_file is not None

    @property
    def auth_enabled(self) -> bool:
        """Protected routes need a credential: a bearer token or a verified client certificate."""
        return self.auth_tokens_path is not None or self.tls_client_ca_file is not None

    @property
    def trusted_proxies(self) -> list[str]:
        return [part.strip() for part in self.forwarded_allow_ips.split(",") if part.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment once."""
    return Settings()
