"""Optional authentication: bearer tokens from a mounted secret, and verified client certificates.

Off unless configured (the NetworkPolicy is then the only gate). It turns on with either:

* `LLMMEM_AUTH_TOKENS_PATH`: a file of tokens, one per line (`#` comments and blank lines
  skipped), or a directory with one token per file (a Kubernetes Secret mounted as a volume,
  one key per caller). Changes are picked up within `RELOAD_CHECK_S` without a restart;
* `LLMMEM_TLS_CLIENT_CA_FILE` (TLS on): a client certificate the handshake verified against
  that bundle authenticates the request (service/api/tls.py, service/api/http_protocol.py).

With either on, every route needs one credential except `/healthz` and `/readyz` (kubelet
probes carry none) and, unless `LLMMEM_METRICS_REQUIRE_AUTH` is true, `/metrics`. A request
without one gets a 401 problem with `WWW-Authenticate: Bearer` when tokens are configured, or a
403 problem naming the client certificate when only certificates are.

Tokens are compared in constant time: each stored token is kept as its SHA-256 digest, the
presented token is hashed, and its digest is compared with every stored one
(`hmac.compare_digest`, no early exit), so neither a token's content nor its length nor its
position in the file shows in the answer's timing.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.file_watch import FileWatch
from service.api.problems import PROBLEM_MEDIA_TYPE, problem_bytes

logger = logging.getLogger("service.auth")

# How often, at most, the token files are looked at (on a request).
RELOAD_CHECK_S = 5.0
# Shorter tokens are guessable; refusing them at load catches a mounted placeholder.
MIN_TOKEN_CHARS = 16
REALM = "gpu-memory-estimator"
ALWAYS_OPEN = frozenset({"/healthz", "/readyz"})


class TokenFileError(ValueError):
    """The token file or directory cannot be used (missing, unreadable, a token too short)."""


def read_tokens(path: Path) -> list[str]:
    """The tokens of a file (one per line) or directory (one per file, dot-files skipped)."""
    try:
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if not p.name.startswith("."))
            tokens = [p.read_text().strip() for p in files if p.is_file()]
        else:
            lines = (line.strip() for line in path.read_text().splitlines())
            tokens = [line for line in lines if line and not line.startswith("#")]
    except OSError as exc:
        raise TokenFileError(f"cannot read bearer tokens from {path}: {exc}") from exc
    tokens = [token for token in tokens if token]  # an empty Secret key is no token
    short = [i for i, token in enumerate(tokens) if len(token) < MIN_TOKEN_CHARS]
    if short:
        raise TokenFileError(
            f"{len(short)} token(s) in {path} shorter than {MIN_TOKEN_CHARS} characters; "
            "use long random tokens (e.g. `openssl rand -hex 32`)"
        )
    return tokens


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenStore:
    """The accepted bearer tokens, as digests, reloaded when their files change."""

    def __init__(self, path: Path, reload_check_s: float = RELOAD_CHECK_S) -> None:
        self.path = path
        self.digests = self._load()  # at start-up a bad file stops the process
        self.watch = FileWatch([path], reload_check_s)

    def _load(self) -> tuple[bytes, ...]:
        tokens = read_tokens(self.path)
        if not tokens:
            logger.warning("no bearer tokens in %s: every protected request is refused", self.path)
        return tuple(_digest(token) for token in tokens)

    def refresh(self) -> None:
        if not self.watch.changed():
            return
        try:
            self.digests = self._load()
        except TokenFileError:
            # Keep the last good set; a half-written rotation is retried on the next look.
            logger.exception("bearer tokens changed but could not be read; keeping the old set")
            self.watch.seen = ()
            return
        logger.info("bearer tokens reloaded from %s (%d tokens)", self.path, len(self.digests))

    def accepts(self, token: str) -> bool:
        self.refresh()
        presented = _digest(token)
        matched = False
        for stored in self.digests:
            matched |= hmac.compare_digest(presented, stored)
        return matched


def bearer_token(scope: Scope) -> str | None:
    """The token of an `Authorization: Bearer ...` header, if there is one."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


def client_certificate(scope: Scope) -> str | None:
    """The subject of the client certificate the TLS handshake verified, if any."""
    tls: dict[str, object] = (scope.get("extensions") or {}).get("tls") or {}
    name = tls.get("client_cert_name")
    return name if isinstance(name, str) and name else None


class AuthMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        tokens: TokenStore | None,
        client_certs: bool,
        open_paths: frozenset[str] = ALWAYS_OPEN,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.client_certs = client_certs
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        if self.client_certs and client_certificate(scope) is not None:
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope) if self.tokens is not None else None
        if token is not None and self.tokens is not None and self.tokens.accepts(token):
            await self.app(scope, receive, send)
            return
        await self._refuse(scope, send, presented=token is not None)

    async def _refuse(self, scope: Scope, send: Send, presented: bool) -> None:
        request_id = scope.get("state", {}).get("request_id")
        headers = [(b"content-type", PROBLEM_MEDIA_TYPE.encode())]
        if self.tokens is not None:
            status = 401
            challenge = f'Bearer realm="{REALM}"'
            if presented:
                challenge += ', error="invalid_token"'
                detail = "The bearer token is not accepted; send a current token."
            else:
                detail = "This route needs a credential: send `Authorization: Bearer <token>`"
                detail += " or a client certificate." if self.client_certs else "."
            headers.append((b"www-authenticate", challenge.encode()))
        else:
            status = 403
            detail = (
                "This route needs a client certificate signed by the configured CA; connect "
                "with one."
            )
        body = problem_bytes(status, detail, instance=scope["path"], request_id=request_id)
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
