"""TLS for the server: the context built from the settings, and its certificates reloaded in
place when the mounted files rotate (cert-manager renews a Secret without restarting pods).

TLS is on when `LLMMEM_TLS_CERT_FILE` and `LLMMEM_TLS_KEY_FILE` are set (TLS 1.2 or newer).
With `LLMMEM_TLS_CLIENT_CA_FILE` the handshake asks for a client certificate and verifies one
that is presented against that bundle; `LLMMEM_TLS_CLIENT_CERT=required` also refuses clients
that present none. The admission webhook and scheduler extender callers (the API server and
the scheduler) use exactly this: a server certificate they trust, and their client
certificate.

A renewed certificate and key are loaded into the same context, so every handshake after the
change uses them; connections already open keep theirs. A renewed CA bundle is added to the
trusted set (OpenSSL cannot remove a CA from a live context): dropping a CA needs a restart.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from service.api.file_watch import FileWatch
from service.settings import Settings

logger = logging.getLogger("service.tls")
# How often, at most, the files are looked at (on a new connection).
RELOAD_CHECK_S = 10.0


def server_context(settings: Settings) -> ssl.SSLContext:
    """The server's TLS context; raises (start-up fails) on an unreadable or mismatched file."""
    assert settings.tls_cert_file is not None and settings.tls_key_file is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    if settings.tls_client_ca_file is not None:
        context.load_verify_locations(cafile=settings.tls_client_ca_file)
        required = settings.tls_client_cert == "required"
        context.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    return context


class CertificateReloader:
    """Reloads the certificate chain (and CA bundle) into `context` when the files change."""

    def __init__(
        self, context: ssl.SSLContext, settings: Settings, check_interval_s: float = RELOAD_CHECK_S
    ) -> None:
        assert settings.tls_cert_file is not None and settings.tls_key_file is not None
        self.context = context
        self.cert, self.key = settings.tls_cert_file, settings.tls_key_file
        self.ca = settings.tls_client_ca_file
        paths: list[Path] = [self.cert, self.key] + ([self.ca] if self.ca else [])
        self.watch = FileWatch(paths, check_interval_s)

    def maybe_reload(self) -> None:
        if not self.watch.changed():
            return
        try:
            # Tried on a scratch context first: a failed load can leave a live context with
            # the new certificate and the old key.
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.cert, self.key)
            self.context.load_cert_chain(self.cert, self.key)
            if self.ca is not None:
                self.context.load_verify_locations(cafile=self.ca)
        except (OSError, ssl.SSLError):
            # Mid-rotation (key and certificate not yet both replaced): keep serving the old
            # pair; the next change is picked up on a later look.
            logger.exception("TLS files changed but could not be loaded; keeping the old ones")
            self.watch.seen = ()
            return
        logger.info("TLS certificate reloaded from %s", self.cert)
