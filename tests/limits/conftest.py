"""Fixtures for the limit tests: a real `python -m service` on a loopback port, with short
timeouts, for the checks that need real sockets (slow clients, connection handling)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench import harness

# Short, so the slow-client tests finish quickly; the production defaults are in settings.py.
READ_TIMEOUT_S = 2.0
KEEP_ALIVE_S = 2
HEADER_TIMEOUT_S = 2.0
HEADER_MAX_BYTES = 16_384


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.Server]:
    log = tmp_path_factory.mktemp("limits") / "service.log"
    server = harness.start_service(
        log,
        extra_env={
            "LLMMEM_REQUEST_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
            "LLMMEM_TIMEOUT_KEEP_ALIVE_S": str(KEEP_ALIVE_S),
            "LLMMEM_HEADER_READ_TIMEOUT_S": str(HEADER_TIMEOUT_S),
            "LLMMEM_HEADER_MAX_BYTES": str(HEADER_MAX_BYTES),
            "LLMMEM_ACCESS_LOG": "false",
        },
    )
    with harness.running(server):
        yield server
