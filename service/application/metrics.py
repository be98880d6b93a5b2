"""Prometheus metrics: HTTP traffic by route template, estimator activity, process figures.

Each app owns its registry, so several apps in one process (tests) never collide; `/metrics`
renders that registry in the Prometheus text format.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

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
        )
        self.latency = Histogram(
            "http_request_duration_seconds",
            "HTTP request latency by method and route template.",
            ("method", "route"),
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.unhandled = Counter(
            "http_unhandled_exceptions_total",
            "Requests that ended in an unexpected exception (answered with a 500 problem).",
            registry=self.registry,
        )
        self.estimates = Counter(
            "estimates_total",
            "Estimates answered (computed or replayed from the response cache), by kind, "
            "estimator and engine.",
            ("kind", "estimator", "engine"),
            registry=self.registry,
        )
        self.estimate_latency = Histogram(
            "estimate_duration_seconds",
            "In-process time of one estimate (fit and inverse search included), by kind.",
            ("kind",),
            buckets=_ESTIMATE_BUCKETS,
            registry=self.registry,
        )
        self.fit_outcomes = Counter(
            "fit_outcomes_total",
            "Fit verdicts returned, by kind and outcome.",
            ("kind", "fits"),
            registry=self.registry,
        )
        self.estimate_cache = Counter(
            "estimate_cache_total",
            "Estimate requests answered from the response cache (hit) or computed (miss).",
            ("result",),
            registry=self.registry,
        )
        self.response_cache_bytes = Gauge(
            "estimate_response_cache_bytes",
            "Bytes the response cache holds (bounded by a quarter of LLMMEM_CACHE_BYTES).",
            registry=self.registry,
        )
        self.http_refused = Counter(
            "http_refused_total",
            "Requests the HTTP layer answered itself, before the app, by status (400 malformed, "
            "408 head not received in time, 414/431 head too large).",
            ("status",),
            registry=self.registry,
        )
        self.estimate_admitted = Gauge(
            "estimate_pool_admitted",
            "Estimates admitted to this worker's pool: running on a pool thread or waiting for "
            "one (bounded by LLMMEM_CPU_THREADS + LLMMEM_CPU_QUEUE).",
            registry=self.registry,
        )
        self.estimate_queue_depth = Gauge(
            "estimate_pool_queue_depth",
            "Estimates admitted and waiting for a pool thread.",
            registry=self.registry,
        )
        self.estimate_rejected = Counter(
            "estimate_pool_rejected_total",
            "Estimates refused or stopped, by reason: overloaded (pool full, 503), deadline "
            "(LLMMEM_ESTIMATE_DEADLINE_S passed, 503), disconnected (the client went away).",
            ("reason",),
            registry=self.registry,
        )
        self.catalog_entries = Gauge(
            "catalog_entries",
            "Entries loaded into each catalog.",
            ("catalog",),
            registry=self.registry,
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
