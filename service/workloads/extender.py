"""The kube-scheduler HTTP extender protocol: what ``filter`` and ``prioritize`` receive and answer.

Follows the Go types of k8s.io/kube-scheduler ``extender/v1/types.go`` (kubernetes/kubernetes
``staging/src/k8s.io/kube-scheduler/extender/v1/types.go``). Those structs carry no JSON tags,
so Go's encoder writes the field names as they are (``Pod``, ``Nodes``, ``NodeNames``,
``FailedNodes``, ``FailedAndUnresolvableNodes``, ``Error``, ``Host``, ``Score``) and its decoder
matches keys case-insensitively; this reader does the same. The nested Kubernetes objects keep
their own tags (``v1.NodeList`` is ``{"items": [...]}``).

- ``ExtenderArgs``: ``Pod``; ``Nodes`` (a NodeList, sent when the extender is not
  ``nodeCacheCapable``) or ``NodeNames`` (sent when it is).
- ``ExtenderFilterResult``: the nodes that pass, in the same form as they came (``Nodes`` or
  ``NodeNames``); ``FailedNodes`` (node name to reason; preemption may help);
  ``FailedAndUnresolvableNodes`` (preemption cannot help; "takes precedence over
  FailedNodes"); ``Error``.
- ``HostPriorityList``: ``[{"Host": name, "Score": n}]`` with ``MinExtenderPriority`` 0 and
  ``MaxExtenderPriority`` 10.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from service.workloads.sources import ReadProblem

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "MIN_EXTENDER_PRIORITY",
    "ExtenderArgs",
    "ExtenderFilterResult",
    "HostPriority",
    "filter_result_json",
    "host_priority_list_json",
    "node_name",
    "read_extender_args",
    "read_filter_result",
    "read_host_priority_list",
]

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10


def _field(body: Mapping[str, object], name: str) -> object:
    """A struct field as Go's decoder finds it: exact key first, then case-insensitively."""
    if name in body:
        return body[name]
    folded = name.lower()
    for key, value in body.items():
        if isinstance(key, str) and key.lower() == folded:
            return value
    return None


def node_name(node: Mapping[str, object]) -> str | None:
    """``metadata.name`` of a Node object."""
    metadata = node.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) and name else None


@dataclass(frozen=True)
class ExtenderArgs:
    """What the scheduler sends to ``filter`` and ``prioritize``."""

    pod: Mapping[str, object]
    nodes: tuple[Mapping[str, object], ...] | None
    """Full Node objects; set when the extender is not ``nodeCacheCapable``."""
    node_names: tuple[str, ...] | None
    """Names only; set when the extender is ``nodeCacheCapable``."""

    @property
    def names(self) -> tuple[str, ...]:
        """The candidate node names, whichever form they came in."""
        if self.node_names is not None:
            return self.node_names
        return tuple(n for node in self.nodes or () if (n := node_name(node)) is not None)


def read_extender_args(body: object) -> ExtenderArgs | ReadProblem:
    """Read ``ExtenderArgs``; never raises."""
    if not isinstance(body, Mapping):
        return ReadProblem("body", "expected an ExtenderArgs JSON object")
    pod = _field(body, "Pod")
    if not isinstance(pod, Mapping):
        return ReadProblem("Pod", "ExtenderArgs carries no Pod")
    nodes_field = _field(body, "Nodes")
    nodes: tuple[Mapping[str, object], ...] | None = None
    if isinstance(nodes_field, Mapping):
        items = nodes_field.get("items")
        if items is not None and not isinstance(items, list):
            return ReadProblem("Nodes.items", "expected a list of Node objects")
        if any(not isinstance(item, Mapping) for item in items or []):
            # Go's decoder refuses a NodeList item that is not an object; so does this one.
            return ReadProblem("Nodes.items", "each item must be a Node object")
        nodes = tuple(items or [])
    elif nodes_field is not None:
        return ReadProblem("Nodes", 'expected a NodeList ({"items": [...]})')
    names_field = _field(body, "NodeNames")
    names: tuple[str, ...] | None = None
    if isinstance(names_field, list):
        if any(not isinstance(n, str) for n in names_field):
            return ReadProblem("NodeNames", "expected a list of node names (strings)")
        names = tuple(names_field)
    elif names_field is not None:
        return ReadProblem("NodeNames", "expected a list of node names")
    if nodes is None and names is None:
        return ReadProblem(
            "Nodes", "ExtenderArgs carries neither Nodes nor NodeNames", "send the candidate nodes"
        )
    return ExtenderArgs(pod, nodes, names)


@dataclass(frozen=True)
class ExtenderFilterResult:
    """A filter answer; give ``nodes`` or ``node_names`` in the form the request used."""

    nodes: tuple[Mapping[str, object], ...] | None = None
    node_names: tuple[str, ...] | None = None
    failed_nodes: Mapping[str, str] = field(default_factory=dict)
    failed_and_unresolvable: Mapping[str, str] = field(default_factory=dict)
    """Nodes preemption cannot make fit (e.g. a GPU too small for the model)."""
    error: str = ""


def filter_result_json(result: ExtenderFilterResult) -> dict[str, object]:
    """``ExtenderFilterResult`` as kube-scheduler decodes it (Go field names; nil as null)."""
    return {
        "Nodes": None if result.nodes is None else {"items": list(result.nodes)},
        "NodeNames": None if result.node_names is None else list(result.node_names),
        "FailedNodes": dict(result.failed_nodes),
        "FailedAndUnresolvableNodes": dict(result.failed_and_unresolvable),
        "Error": result.error,
    }


def read_filter_result(body: object) -> ExtenderFilterResult | ReadProblem:
    """Read an ``ExtenderFilterResult`` (as a scheduler or a test does); never raises."""
    if not isinstance(body, Mapping):
        return ReadProblem("body", "expected an ExtenderFilterResult JSON object")
    nodes = _field(body, "Nodes")
    names = _field(body, "NodeNames")
    items = nodes.get("items") if isinstance(nodes, Mapping) else None
    return ExtenderFilterResult(
        nodes=tuple(i for i in items if isinstance(i, Mapping))
        if isinstance(items, list)
        else None,
        node_names=tuple(n for n in names if isinstance(n, str))
        if isinstance(names, list)
        else None,
        failed_nodes=_string_map(_field(body, "FailedNodes")),
        failed_and_unresolvable=_string_map(_field(body, "FailedAndUnresolvableNodes")),
        error=str(_field(body, "Error") or ""),
    )


def _string_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True)
class HostPriority:
    """One node's score; higher is better, from 0 to 10."""

    host: str
    score: int


def host_priority_list_json(priorities: Iterable[HostPriority]) -> list[dict[str, object]]:
    """``HostPriorityList`` as kube-scheduler decodes it.

    Raises ValueError for a score outside ``MinExtenderPriority``..``MaxExtenderPriority``.
    """
    out: list[dict[str, object]] = []
    for entry in priorities:
        if not MIN_EXTENDER_PRIORITY <= entry.score <= MAX_EXTENDER_PRIORITY:
            raise ValueError(
                f"score {entry.score} for {entry.host} is outside "
                f"{MIN_EXTENDER_PRIORITY}..{MAX_EXTENDER_PRIORITY}"
            )
        out.append({"Host": entry.host, "Score": entry.score})
    return out


def read_host_priority_list(body: object) -> tuple[HostPriority, ...] | ReadProblem:
    """Read a ``HostPriorityList``; never raises."""
    if not isinstance(body, list):
        return ReadProblem("body", "expected a list of {Host, Score}")
    out: list[HostPriority] = []
    for index, entry in enumerate(body):
        item: Mapping[str, object] = entry if isinstance(entry, Mapping) else {}
        host, score = _field(item, "Host"), _field(item, "Score")
        if not isinstance(host, str) or not isinstance(score, int) or isinstance(score, bool):
            return ReadProblem(f"[{index}]", "each entry needs a Host string and a Score integer")
        out.append(HostPriority(host, score))
    return tuple(out)
