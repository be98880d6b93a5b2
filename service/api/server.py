"""Run the app under uvicorn, configured from the settings: `python -m service`.

One worker process (scale with replicas), uvicorn's httptools protocol with the head limits
of service/api/http_protocol.py, uvloop, no WebSocket support (no route uses it), proxy
headers trusted only from `LLMMEM_FORWARDED_ALLOW_IPS`, TLS when configured
(service/api/tls.py), and on SIGTERM: stop accepting, close idle connections, let in-flight
requests finish for `LLMMEM_GRACEFUL_SHUTDOWN_S`, then exit.

Why uvicorn (with these additions) rather than another server: deploy/README.md, "The HTTP
server", compares it with hypercorn and granian, measured.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any

import uvicorn

from service.api.concurrency import SWITCH_INTERVAL_S
from service.api.http_protocol import HeadLimits, protocol_class
from service.api.tls import CertificateReloader, server_context
from service.settings import Settings


def build_config(settings: Settings, app_factory: Callable[[Settings], Any]) -> uvicorn.Config:
    """The uvicorn configuration of `python -m service` for `settings`, app created and loaded."""
    app = app_factory(settings)
    metrics = getattr(app.state, "metrics", None)
    limits = HeadLimits(settings.header_max_bytes, settings.header_read_timeout_s)
    reloader: CertificateReloader | None = None
    context = server_context(settings) if settings.tls_enabled else None
    if context is not None:
        reloader = CertificateReloader(context, settings)
    protocol = protocol_class(
        limits,
        on_refusal=metrics.observe_refusal if metrics is not None else None,
        on_connection=reloader.maybe_reload if reloader is not None else None,
    )
    trusted = settings.trusted_proxies
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        workers=1,
        http=protocol,
        ws="none",
        lifespan="on",
        log_config=None,
        access_log=False,  # ours (service/api/access_log.py) carries the request id and route
        # With nobody trusted, X-Forwarded-* are ignored: uvicorn would otherwise trust
        # 127.0.0.1 (or $FORWARDED_ALLOW_IPS) by default.
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted or None,
        timeout_keep_alive=settings.timeout_keep_alive_s,
        timeout_graceful_shutdown=settings.graceful_shutdown_s,
    )
    config.load()
    if context is not None:
        config.ssl = context  # ours: TLS 1.2+, client CA, reloaded when the files rotate
    return config


# The collector's thresholds for a worker (CPython's default: 700, 10, 10). An estimate
# allocates a few hundred objects, nearly all freed by reference counting; at 2,000 requests a
# second the default ran a young collection every few requests and a full one (tens of ms,
# walking every cached setup) every few seconds as the caches filled. With these, young
# collections are 15 times rarer and full ones minutes apart: 30,000 distinct estimates
# in-process spent 0.7 % of their time collecting instead of 1.3 %, with no full collection
# (bench/results.md). Garbage without cycles is freed as before, at once.
GC_THRESHOLDS = (10_000, 50, 100)


def run(settings: Settings, app_factory: Callable[[Settings], Any]) -> None:
    # Pool threads yield the GIL to the event loop at this interval (service/api/concurrency.py).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    gc.set_threshold(*GC_THRESHOLDS)
    uvicorn.Server(build_config(settings, app_factory)).run()
