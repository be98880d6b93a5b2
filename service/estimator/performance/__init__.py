"""How fast a serving setup answers: time to first token, inter-token latency, throughput at a
concurrency, and the replicas an SLO needs (docs/performance.md).

A roofline on the memory model: :mod:`.work` (what a step reads and computes per GPU),
:mod:`.timing` (how long a step takes at a GPU's peaks × fitted efficiencies), :mod:`.serving`
(a closed loop of clients in the steady state, the KV pool's limit and the queue past it),
:mod:`.estimate` (the answer, calibrated or a band, and the SLO sizing).
"""

from service.estimator.performance.estimate import (
    MAX_TRAFFIC_TOKENS,
    Band,
    NotServable,
    Performance,
    PerformanceAnswer,
    Sizing,
    Slo,
    Traffic,
    estimate_performance,
)
from service.estimator.performance.work import expected_experts_hit

__all__ = [
    "MAX_TRAFFIC_TOKENS",
    "Band",
    "NotServable",
    "Performance",
    "PerformanceAnswer",
    "Sizing",
    "Slo",
    "Traffic",
    "estimate_performance",
    "expected_experts_hit",
]
