"""Prometheus metrics: HTTP traffic by route template, estimator activity, the scheduler-facing
outcomes (admission decisions, extender answers and every refusal to judge), process figures.

Names follow the Prometheus naming conventions (prometheus.io/docs/practices/naming): one
namespace, `llmmem_`, for every metric the service defines, base units in the name
(`_seconds`, `_bytes`) and `_total` on counters. The process and Python collectors keep the
client library's standard names (`process_*`, `python_*`), which every dashboard for them
expects. Label values come from closed sets (route templates, verdicts, reasons), never from
request data.

Each app owns its registry, so several apps in one process (tests) never collide; `/metrics`
renders that registry in the Prometheus text format.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

NAMESPACE = "llmmem"

# Service latencies are sub-millisecond to tens of milliseconds; buckets resolve that range.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_ESTIMATE_BUCKETS = (0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.0025, 0.01, 0.05)


class Metrics:
    """The collectors of one app."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.requests = Counter(
            "http_requests_total",
            "HTTP requests by method, route template and status code.",
            ("method", "route", "status"),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.latency = Histogram(
            "http_request_duration_seconds",
            "HTTP request latency by method and route template.",
            ("method", "route"),
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.unhandled = Counter(
            "http_unhandled_exceptions_total",
            "Requests that ended in an unexpected exception (answered with a 500 problem).",
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.estimates = Counter(
            "estimates_total",
            "Estimates answered (computed or replayed from the response cache), by kind, "
            "estimator and engine.",
            ("kind", "estimator", "engine"),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.estimate_latency = Histogram(
            "estimate_duration_seconds",
            "In-process time of one estimate (fit and inverse search included), by kind.",
            ("kind",),
            buckets=_ESTIMATE_BUCKETS,
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.fit_outcomes = Counter(
            "fit_outcomes_total",
            "Fit verdicts returned, by kind and outcome.",
            ("kind", "fits"),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.estimate_cache = Counter(
            "estimate_cache_total",
            "Estimate requests answered from the response cache (hit) or computed (miss).",
            ("result",),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.response_cache_bytes = Gauge(
            "estimate_response_cache_bytes",
            "Bytes the response cache holds (bounded by a quarter of LLMMEM_CACHE_BYTES).",
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.http_refused = Counter(
            "http_refused_total",
            "Requests the HTTP layer answered itself, before the app, by status (400 malformed, "
            "408 head not received in time, 414/431 head too large).",
            ("status",),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.estimate_admitted = Gauge(
            "estimate_pool_admitted",
            "Estimates admitted to this worker's pool: running on a pool thread or waiting for "
            "one (bounded by LLMMEM_CPU_THREADS + LLMMEM_CPU_QUEUE).",
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.estimate_queue_depth = Gauge(
            "estimate_pool_queue_depth",
            "Estimates admitted and waiting for a pool thread.",
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.estimate_rejected = Counter(
            "estimate_pool_rejected_total",
            "Estimates refused or stopped, by reason: overloaded (pool full, 503), deadline "
            "(LLMMEM_ESTIMATE_DEADLINE_S passed, 503), disconnected (the client went away).",
            ("reason",),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.admission_reviews = Counter(
            "admission_reviews_total",
            "AdmissionReviews answered, by the default mode of the route called (deny, warn, "
            "off) and the decision: allowed (no warning), warned (allowed with warnings), "
            "denied, skipped (no GPU serving workload, an operation other than CREATE or "
            "UPDATE, or mode off for the object), unreadable (the review could not be read; "
            "allowed with a warning), failed (an unexpected error; allowed with a warning), "
            "unchecked (the replica saturated or the review past its deadline before it was "
            "checked; allowed with a warning, or denied under LLMMEM_ADMISSION_UNCHECKED=deny).",
            ("mode", "decision"),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.admission_containers = Counter(
            "admission_container_verdicts_total",
            "Serving containers with GPUs the admission webhook sized, by verdict: fits, "
            "fits_some, does_not_fit, will_not_start, unknown (not checked: a warning says why).",
            ("verdict",),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.extender_requests = Counter(
            "extender_requests_total",
            "Scheduler-extender calls, by verb (filter, prioritize) and outcome: judged, "
            "not_applicable (the pod runs no serving engine on GPUs), refused (the pod could "
            "not be judged: the answer's Error, or a 422 for prioritize, says why).",
            ("verb", "outcome"),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.extender_refusals = Counter(
            "extender_refusals_total",
            "Scheduler-extender calls that could not judge the pod, by verb and reason "
            "(service/scheduling/extender.py REFUSAL_REASONS).",
            ("verb", "reason"),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.extender_nodes = Counter(
            "extender_nodes_total",
            "Candidate nodes the scheduler extender answered, by verb and verdict: fits, "
            "does_not_fit, unjudged (passed, or scored 0, because its labels do not name its "
            "GPU).",
            ("verb", "verdict"),
            registry=self.registry,
            namespace=NAMESPACE,
        )
        self.catalog_entries = Gauge(
            "catalog_entries",
            "Entries loaded into each catalog.",
            ("catalog",),
            registry=self.registry,
            namespace=NAMESPACE,
        )

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self._child(self.requests, method, route, str(status)).inc()
        self._child(self.latency, method, route).observe(seconds)

    def observe_estimate(self, kind: str, estimator: str, engine: str, fits: bool | None) -> None:
        """Count one answered estimate (computed or replayed) and its fit verdict."""
        self._child(self.estimates, kind, estimator, engine).inc()
        if fits is not None:
            self._child(self.fit_outcomes, kind, "true" if fits else "false").inc()

    def observe_estimate_latency(self, kind: str, seconds: float) -> None:
        self._child(self.estimate_latency, kind).observe(seconds)

    def observe_admission(self, mode: str, decision: str, verdicts: Sequence[str] = ()) -> None:
        """Count one answered AdmissionReview and the verdict of each container it sized."""
        self._child(self.admission_reviews, mode, decision).inc()
        for verdict in verdicts:
            self._child(self.admission_containers, verdict).inc()

    def observe_extender(
        self, verb: str, outcome: str, refusal: str | None, nodes: Sequence[str]
    ) -> None:
        """Count one extender call: its outcome, the refusal's reason, each node's verdict."""
        self._child(self.extender_requests, verb, outcome).inc()
        if refusal is not None:
            self._child(self.extender_refusals, verb, refusal).inc()
        for verdict in nodes:
            self._child(self.extender_nodes, verb, verdict).inc()

    def observe_refusal(self, status: int) -> None:
        self._child(self.http_refused, str(status)).inc()

    def cache_result(self, result: str) -> None:
        self._child(self.estimate_cache, result).inc()

    def _child(self, metric: Any, *labels: str) -> Any:
        # `labels()` validates and looks up on every call (about 10 µs); the children of a
        # metric never change once created, so they are kept by label tuple.
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child
