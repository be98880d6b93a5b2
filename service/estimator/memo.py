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
_cache: cachetools.LRUCache[Any, _Entry] = cachetools.LRUCache(
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


def _walk(obj: object, seen: set[int], once: bool) -> int:
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if once and _size_once_types and isinstance(o, _size_once_types):
            total += _measured_once(o)
            continue
        total += sys.getsizeof(o)
        if isinstance(o, str | bytes | int | float | bool | type(None)):
            continue
        if isinstance(o, Mapping):
            stack.extend(o.keys())
            stack.extend(o.values())
            continue
        if isinstance(o, tuple | list | set | frozenset):
            stack.extend(o)
            continue
        d = getattr(o, "__dict__", None)
        if d is not None:
            stack.append(d)
        for cls in type(o).__mro__:
            for name in getattr(cls, "__slots__", ()):
                if hasattr(o, name):
                    stack.append(getattr(o, name))
    return total


def cached(name: str, key: Hashable, compute: Callable[[], R]) -> R:
    """``compute()``, kept in the shared byte-bounded LRU under ``(name, key)``: for callers
    whose arguments are not hashable themselves but reduce to a hashable key."""
    full_key = (name, key)
    with _lock:
        hit = _cache.get(full_key)
        if hit is not None:
            _counts["hits"] += 1
            return hit.value  # type: ignore[no-any-return]
        _counts["misses"] += 1
    result = compute()
    size = deep_size((full_key, result))
    with _lock:
        if size <= _cache.maxsize:
            _cache[full_key] = _Entry(result, size)
    return result


def memoized(fn: Callable[P, R]) -> Callable[P, R]:
    """Cache ``fn``'s results in the shared byte-bounded LRU (arguments must be hashable)."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return cached(name, (args, tuple(sorted(kwargs.items()))), lambda: fn(*args, **kwargs))

    wrapper.cache_clear = clear  # type: ignore[attr-defined]
    return wrapper
