"""Prometheus metrics: HTTP traffic by route template, estimator activity, process figures.

Each app owns its registry, so several apps in one process (tests) never collide; `/metrics`
renders that registry in the Prometheus text format.
"""

from __future__ import annotations

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
            "Estimates computed, by kind, estimator and engine.",
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
        self.catalog_entries = Gauge(
            "catalog_entries",
            "Entries loaded into each catalog.",
            ("catalog",),
            registry=self.registry,
        )
