"""Every metric name the deployment and the docs mention is one the service exports, and every
name the service defines is in its one namespace with Prometheus's unit suffixes."""

from __future__ import annotations

import re

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.application.metrics import NAMESPACE, Metrics
from tests.conftest import REPO

MENTION = re.compile(r"\bllmmem_[a-z0-9_]+")
# The client library's standard collectors keep the names every dashboard for them expects.
STANDARD_PREFIXES = ("process_", "python_")


def _exported() -> set[str]:
    """Metric names as scraped, with the series suffixes a query may name."""
    metrics = Metrics()
    # Touch a labelled series of each family so that it renders.
    metrics.observe_request("GET", "/", 200, 0.001)
    metrics.observe_estimate("inference", "full", "vllm", True)
    metrics.observe_estimate_latency("inference", 0.001)
    metrics.observe_admission("warn", "allowed", ["fits"])
    metrics.observe_extender("filter", "refused", "names_only_unpinned", ["unjudged"])
    metrics.observe_refusal(400)
    metrics.cache_result("hit")
    metrics.estimate_rejected.labels("overloaded").inc()
    metrics.catalog_entries.labels("gpus").set(1)

    names: set[str] = set()
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def test_every_service_metric_is_in_the_namespace_with_unit_suffixes() -> None:
    for name in _exported():
        if name.startswith(STANDARD_PREFIXES):
            continue
        assert name.startswith(f"{NAMESPACE}_"), name
        assert not re.search(r"_(ms|milliseconds|kb|mb|gb|mib|gib)(_|$)", name), name


def test_every_metric_the_deployment_and_the_docs_name_is_exported() -> None:
    exported = _exported()
    files = [*REPO.glob("deploy/**/*.yaml"), *REPO.glob("deploy/**/*.md"), *REPO.glob("docs/*.md")]
    files.append(REPO / "README.md")
    mentioned = {
        (name, path.relative_to(REPO).as_posix())
        for path in files
        for name in MENTION.findall(path.read_text())
    }
    assert mentioned, "the deployment names the service's metrics"
    missing = sorted((name, where) for name, where in mentioned if name not in exported)
    assert not missing, missing
