"""The bounds of what one request may ask for, in one table used by every entry point.

Pre-flight, the admission webhook, the scheduler extender and the batch route each receive
objects or lists whose size sets the work: a Kubernetes object's keys are walked, each serving
container is estimated (its engine setup and a fit on every catalog GPU: tens of ms cold), each
extender node judged, each batch item estimated. Issue 28 found the admission route applying
none of the bounds pre-flight applied: a Pod of 2000 containers held the estimator for 44 s.
So the bounds live here, once, and each entry point applies all that concern it:

| bound | pre-flight | admission | extender | batch |
|---|---|---|---|---|
| object depth and keys | 422 | not checked (a warning) | 422 | per item (config) |
| serving containers per object | 422 | not checked (a warning) | every node passes | — |
| nodes per call | — | — | 422 | — |
| items per call | — | — | — | 422 (schema) |

The body size (``LLMMEM_MAX_BODY_BYTES``, 413) bounds them all first. Within these bounds the
work still runs under its deadline (``LLMMEM_ESTIMATE_DEADLINE_S``, and
``LLMMEM_ADMISSION_DEADLINE_S`` for the webhook), checked between containers, nodes and items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LIMITS", "Limits", "object_problem"]


@dataclass(frozen=True, slots=True)
class Limits:
    # A Kubernetes object is deeper than a config.json (a node affinity term sits 12 levels
    # down) and larger (a Deployment with its status).
    object_depth: int = 32
    object_keys: int = 20_000
    # Serving containers of one object estimated per request: a pod runs one engine per GPU
    # group, rarely more than 8; each costs one estimate and its fit on every catalog GPU.
    containers: int = 64
    # Nodes per extender call: Kubernetes' largest supported cluster (5,000 nodes,
    # kubernetes.io "Considerations for large clusters").
    nodes: int = 5000
    # Estimates per batch request.
    batch_items: int = 1000
    # An engine command line: characters of a shell string, words of an argv list.
    command_chars: int = 65_536
    argv: int = 4096

    def containers_problem(self, count: int) -> str | None:
        if count <= self.containers:
            return None
        return (
            f"{count} serving containers; at most {self.containers} are sized per object "
            "(send the workloads apart)"
        )

    def nodes_problem(self, count: int) -> str | None:
        if count <= self.nodes:
            return None
        return f"{count} nodes; at most {self.nodes} are judged per call"


LIMITS = Limits()


def object_problem(value: Any, limits: Limits = LIMITS) -> str | None:
    """Why a JSON value is over the depth or key bound (an iterative walk that stops at the
    first excess), or None."""
    stack = [(value, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        children = (
            node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        )
        for child in children:
            count += 1
            if count > limits.object_keys or depth + 1 > limits.object_depth:
                return (
                    f"object too deep or too large (at most {limits.object_depth} levels and "
                    f"{limits.object_keys} keys); send the workload object alone"
                )
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return None
