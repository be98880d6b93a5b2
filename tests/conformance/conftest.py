"""The conformance suite runs against the real server: ``python -m service`` on a loopback port,
started once for the package (bench/harness.py), spoken to over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bench import harness


@pytest.fixture(scope="package")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    log = tmp_path_factory.mktemp("conformance") / "service.log"
    server = harness.start_service(log, extra_env={"LLMMEM_ACCESS_LOG": "false"})
    with harness.running(server), httpx.Client(base_url=server.url, timeout=60) as client:
        yield client
