"""The bounds of what one request may ask for, in one table used by every entry point.

Pre-flight, the admission webhook, the scheduler extender, the batch and the colocated routes
each receive objects or lists whose size sets the work: a Kubernetes object's keys are walked,
each serving or training container is estimated (its engine setup and a fit on every catalog
GPU: tens of ms cold), each extender node judged, each batch item or colocated engine
estimated. Issue 28 found the admission route applying none of the bounds pre-flight applied:
a Pod of 2000 containers held the estimator for 44 s. So the bounds live here, once, and each
entry point applies all that concern it:

| bound | pre-flight | admission | extender | batch, colocated |
|---|---|---|---|---|
| object depth and keys | 422 | not checked (a warning) | 422 | per item (config) |
| containers per object (serving, training) | 422 | not checked (a warning) | ``Error`` | — |
| nodes per call | — | — | 422 | — |
| items per call, engines per GPU | — | — | — | 422 (schema) |
| config files, their characters | 422 (schema) | — | — | — |
| command characters, argv words | 422 (schema) | — | — | — |

The body size (``LLMMEM_MAX_BODY_BYTES``, 413) bounds them all first; a batch or colocated
request also within ``LLMMEM_BATCH_COST_BUDGET`` layer-items (413). Within these bounds the work
still runs under its deadline (``LLMMEM_ESTIMATE_DEADLINE_S``, and
``LLMMEM_ADMISSION_DEADLINE_S`` for the webhook), checked between containers, nodes, items and
engines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.workloads.training.files import MAX_FILE_CHARS

__all__ = ["LIMITS", "Limits", "OverLimits", "object_problem"]


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
    # Engines sharing one GPU in a colocated request (each an estimate; more than 16 engines
    # on one GPU leaves each under 5 GB of an 80 GB card).
    colocated_workloads: int = 16
    # An engine command line: characters of a shell string, words of an argv list.
    command_chars: int = 65_536
    argv: int = 4096
    # Config files a pre-flight request carries for a training job (DeepSpeed JSON, recipes):
    # how many, each file's characters (the training reader's own bound), all together.
    files: int = 32
    file_chars: int = MAX_FILE_CHARS
    files_chars: int = 4 << 20

    def containers_problem(self, count: int, what: str = "serving") -> str | None:
        if count <= self.containers:
            return None
        return (
            f"{count} {what} containers; at most {self.containers} are sized per object "
            "(send the workloads apart)"
        )

    def nodes_problem(self, count: int) -> str | None:
        if count <= self.nodes:
            return None
        return f"{count} nodes; at most {self.nodes} are judged per call"


LIMITS = Limits()


class OverLimits(Exception):
    """A request over a bound of the table, raised where the reader that counts is not the
    entry point that answers (a training job's containers): each entry point answers it as
    its column of the table says."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


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
