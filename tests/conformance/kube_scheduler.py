"""What kube-scheduler does with an extender's answer, for the conformance suite to check the
service's answers by their effect, not only their shape.

Follows kubernetes/kubernetes ``pkg/scheduler/extender.go`` (``HTTPExtender.Filter``,
``HTTPExtender.Prioritize``, ``send``) and ``pkg/scheduler/schedule_one.go``
(``findNodesThatPassExtenders``, ``prioritizeNodes``):

- ``send``: an answer whose status is not 200 is an error.
- ``Filter``: a non-empty ``Error`` is an error. When the extender is ``nodeCacheCapable`` and
  the answer's ``NodeNames`` is not nil, those names are the nodes that pass (a name that was
  not sent is an error); else the answer's ``Nodes`` items pass; else none does.
- ``findNodesThatPassExtenders``: an error of an ``ignorable`` extender skips it (every node
  stays); of another, fails the scheduling cycle. ``FailedAndUnresolvableNodes`` are marked
  UnschedulableAndUnresolvable, ``FailedNodes`` not also in it Unschedulable.
- ``prioritizeNodes``: an error gives no score from this extender; else each host's score is
  multiplied by the extender's weight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class SchedulingFailed(Exception):
    """The scheduling cycle fails: an error of an extender that is not ignorable."""


@dataclass(frozen=True)
class Filtered:
    feasible: tuple[str, ...]
    unresolvable: Mapping[str, str] = field(default_factory=dict)
    unschedulable: Mapping[str, str] = field(default_factory=dict)
    skipped: str | None = None
    """The error that made an ignorable extender be skipped."""


def filter_outcome(
    status: int,
    answer: Any,
    sent: Sequence[str],
    *,
    node_cache_capable: bool,
    ignorable: bool,
) -> Filtered:
    error = None
    if status != 200:
        error = f"failed filter with extender, code {status}"
    elif answer.get("Error"):
        error = str(answer["Error"])
    if error is not None:
        if ignorable:
            return Filtered(tuple(sent), skipped=error)
        raise SchedulingFailed(error)
    names = answer.get("NodeNames")
    nodes = answer.get("Nodes")
    if node_cache_capable and names is not None:
        unknown = [n for n in names if n not in sent]
        if unknown:
            raise SchedulingFailed(f"extender claims a filtered node {unknown[0]!r} not sent")
        feasible = tuple(names)
    elif nodes is not None:
        feasible = tuple(item["metadata"]["name"] for item in nodes.get("items") or [])
    else:
        feasible = ()
    unresolvable = dict(answer.get("FailedAndUnresolvableNodes") or {})
    unschedulable = {
        name: reason
        for name, reason in (answer.get("FailedNodes") or {}).items()
        if name not in unresolvable
    }
    return Filtered(feasible, unresolvable, unschedulable)


def prioritize_outcome(status: int, answer: Any, weight: int) -> dict[str, int] | None:
    """Score added per host, or None: no score given by this extender."""
    if status != 200:
        return None
    return {entry["Host"]: entry["Score"] * weight for entry in answer}
