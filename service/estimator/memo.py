"""The estimator's one cache: derived values, least recently used out, bounded in bytes.

What depends only on an architecture and static settings (a serving setup, a training step's
static state, a weight layout, a minimum GPU count) is computed once and kept here, keyed on
the values it depends on: the parsed :class:`~service.estimator.model.Architecture` (equal
configs give equal keys, whatever the request's bytes) and the settings. One budget in bytes
covers every cached function (``LLMMEM_CACHE_BYTES``; :func:`configure`); an entry is charged
the deep size of its key and value, not counting objects registered as shared (the catalog's
architectures, which live anyway). A value larger than the budget is computed and not kept.
The LRU itself is ``cachetools.LRUCache``; a lock makes it safe for worker threads.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, ParamSpec, TypeVar

import cachetools

__all__ = [
    "CacheStats",
    "cached",
    "clear",
    "configure",
    "deep_size",
    "memoized",
    "register_shared",
    "size_once",
    "stats",
]

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_BUDGET_BYTES = 32 * 2**20


class _Entry(NamedTuple):
    key: Hashable
    value: Any
    size: int


@dataclass(frozen=True, slots=True)
class CacheStats:
    entries: int
    bytes: int
    budget_bytes: int
    hits: int
    misses: int


_lock = threading.RLock()
_cache: cachetools.LRUCache[int, _Entry] = cachetools.LRUCache(
    maxsize=DEFAULT_BUDGET_BYTES, getsizeof=lambda e: e.size
)
_shared: set[int] = set()
# Strong references to the shared objects: an id is only unique while its object lives.
_shared_refs: list[object] = []
# Types whose instances are keys of many entries (an Architecture keys every value derived
# from it): their deep size is measured once per object, not once per entry. Re-measured when
# the object's __dict__ grows (cached properties filled in later).
_size_once_types: tuple[type, ...] = ()
_sized: dict[int, tuple[int, int]] = {}  # id -> (len(__dict__) when measured, bytes)
_counts = {"hits": 0, "misses": 0}


def configure(budget_bytes: int) -> None:
    """Set the byte budget (0 turns caching off) and drop what is cached."""
    global _cache
    with _lock:
        _cache = cachetools.LRUCache(maxsize=max(budget_bytes, 0), getsizeof=lambda e: e.size)


def clear() -> None:
    with _lock:
        _cache.clear()


def register_shared(objects: Iterable[object]) -> None:
    """Objects that live anyway (catalog architectures): not charged to cache entries."""
    with _lock:
        for o in objects:
            if id(o) not in _shared:
                _shared.add(id(o))
                _shared_refs.append(o)


def size_once(cls: type) -> None:
    """Measure instances of ``cls`` once per object (they must support weak references)."""
    global _size_once_types
    with _lock:
        if cls not in _size_once_types:
            _size_once_types = (*_size_once_types, cls)
            _kinds.clear()


def _measured_once(o: object) -> int:
    version = len(getattr(o, "__dict__", ()))
    known = _sized.get(id(o))
    if known is not None and known[0] == version:
        return known[1]
    size = _walk(o, set(_shared), once=False)
    if known is None:
        weakref.finalize(o, _sized.pop, id(o), None)
    _sized[id(o)] = (version, size)
    return size


def stats() -> CacheStats:
    with _lock:
        return CacheStats(
            len(_cache),
            int(_cache.currsize),
            int(_cache.maxsize),
            _counts["hits"],
            _counts["misses"],
        )


def deep_size(obj: object, seen: set[int] | None = None) -> int:
    """Bytes an object graph holds (``sys.getsizeof`` over containers, dataclasses and
    slots), counting each object once and shared objects not at all."""
    return _walk(obj, set(_shared) if seen is None else seen, once=True)


# How the walk treats an object, decided once per type (:func:`_kind`).
_ATOM, _MAPPING, _SEQUENCE, _OBJECT, _ONCE, _PROGRAM = range(6)
_ATOM_TYPES = (str, bytes, int, float, bool, type(None))
# Parts of the program, not data an entry owns: classes (a key may hold a value's type),
# functions and modules. Neither charged nor walked into.
_PROGRAM_TYPES = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
)
_SEQUENCE_TYPES = (tuple, list, set, frozenset)
# type -> (kind, the slot names along its MRO); cleared when size_once adds a type.
_kinds: dict[type, tuple[int, tuple[str, ...]]] = {}


def _kind(cls: type) -> tuple[int, tuple[str, ...]]:
    known = _kinds.get(cls)
    if known is not None:
        return known
    slots: tuple[str, ...] = ()
    if _size_once_types and issubclass(cls, _size_once_types):
        kind = _ONCE
    elif issubclass(cls, _PROGRAM_TYPES):
        kind = _PROGRAM
    elif issubclass(cls, _ATOM_TYPES):
        kind = _ATOM
    elif issubclass(cls, Mapping):
        kind = _MAPPING
    elif issubclass(cls, _SEQUENCE_TYPES):
        kind = _SEQUENCE
    else:
        kind = _OBJECT
        slots = tuple(name for c in cls.__mro__ for name in getattr(c, "__slots__", ()))
    _kinds[cls] = known = (kind, slots)
    return known


def _walk(obj: object, seen: set[int], once: bool) -> int:
    """Sum of ``sys.getsizeof`` over the graph from ``obj``, each object once (``seen``
    holds the ids already counted or not to count). With ``once``, instances of the
    :func:`size_once` types are charged their cached measure instead of being walked."""
    total = 0
    stack = [obj]
    pop, push, extend, add = stack.pop, stack.append, stack.extend, seen.add
    getsizeof = sys.getsizeof
    kinds, kind_of = _kinds, _kind
    missing = object()
    while stack:
        o = pop()
        i = id(o)
        if i in seen:
            continue
        add(i)
        cls = type(o)
        known = kinds.get(cls) or kind_of(cls)
        kind = known[0]
        if kind == _ONCE:
            if once:
                total += _measured_once(o)
                continue
            kind = _OBJECT
            known = (kind, tuple(n for c in cls.__mro__ for n in getattr(c, "__slots__", ())))
        elif kind == _PROGRAM:
            continue
        total += getsizeof(o)
        if kind == _ATOM:
            continue
        if kind == _MAPPING:
            extend(o.keys())  # type: ignore[attr-defined]
            extend(o.values())  # type: ignore[attr-defined]
        elif kind == _SEQUENCE:
            extend(o)  # type: ignore[arg-type]
        else:
            d = getattr(o, "__dict__", None)
            if d is not None and id(d) not in seen:
                # The instance's attribute table and its values; its keys are the attribute
                # names, strings interned once for the class and shared by every instance.
                add(id(d))
                total += getsizeof(d)
                extend(d.values())
            for name in known[1]:
                value = getattr(o, name, missing)
                if value is not missing:
                    push(value)
    return total


def cached(name: str, key: Hashable, compute: Callable[[], R]) -> R:
    """``compute()``, kept in the shared byte-bounded LRU under ``(name, key)``: for callers
    whose arguments are not hashable themselves but reduce to a hashable key."""
    full_key = (name, key)
    # The LRU is keyed on the key's hash, computed once (the LRU's membership test, read and
    # reordering would each hash the whole tuple again); the entry keeps its key, so a hash
    # shared by two keys is a miss, never the other key's value.
    digest = hash(full_key)
    with _lock:
        hit = _cache.get(digest)
        if hit is not None and hit.key == full_key:
            _counts["hits"] += 1
            return hit.value  # type: ignore[no-any-return]
        _counts["misses"] += 1
    result = compute()
    size = deep_size((digest, full_key, result))
    with _lock:
        if size <= _cache.maxsize:
            _cache[digest] = _Entry(full_key, result, size)
    return result


def memoized(fn: Callable[P, R]) -> Callable[P, R]:
    """Cache ``fn``'s results in the shared byte-bounded LRU (arguments must be hashable)."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return cached(name, (args, tuple(sorted(kwargs.items()))), lambda: fn(*args, **kwargs))

    wrapper.cache_clear = clear  # type: ignore[attr-defined]
    return wrapper
