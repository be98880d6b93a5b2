"""The estimator's cache: bounded in bytes, charged what an entry really holds, thread-safe."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import pytest

from service.estimator import memo


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    before = memo.stats().budget_bytes
    memo.configure(before)
    yield
    memo.configure(before)


def test_deep_size_counts_each_object_once() -> None:
    payload = "x" * 10_000
    # Hand count: the list object plus one string, however many times the list holds it.
    assert memo.deep_size([payload, payload, payload]) == sys.getsizeof(
        [payload, payload, payload]
    ) + sys.getsizeof(payload)


def test_deep_size_follows_dataclasses_and_slots() -> None:
    @dataclass(frozen=True, slots=True)
    class Slotted:
        blob: bytes

    @dataclass(frozen=True)
    class Plain:
        blob: bytes

    blob = b"y" * 50_000
    assert memo.deep_size(Slotted(blob)) >= len(blob)
    assert memo.deep_size(Plain(blob)) >= len(blob)


def test_shared_objects_are_not_charged() -> None:
    shared = "z" * 100_000
    memo.register_shared([shared])
    assert memo.deep_size([shared]) < 1000


def test_budget_is_in_bytes_and_evicts_least_recent() -> None:
    memo.configure(300_000)

    @memo.memoized
    def blob(n: int) -> bytes:
        return bytes(100_000) + n.to_bytes(4, "little")

    for n in range(10):
        blob(n)
    stats = memo.stats()
    # Each entry holds a 100 kB value: at most two fit in 300 kB with their keys.
    assert stats.entries == 2
    assert stats.bytes <= 300_000
    misses = stats.misses
    blob(9)  # the most recent survives
    assert memo.stats().misses == misses
    blob(0)  # the oldest was evicted
    assert memo.stats().misses == misses + 1


def test_value_larger_than_budget_is_computed_not_kept() -> None:
    memo.configure(10_000)

    @memo.memoized
    def big() -> bytes:
        return bytes(50_000)

    assert len(big()) == 50_000
    assert memo.stats().entries == 0


def test_zero_budget_turns_caching_off() -> None:
    memo.configure(0)
    calls = []

    @memo.memoized
    def f(n: int) -> int:
        calls.append(n)
        return n

    f(1)
    f(1)
    assert calls == [1, 1]


class Model:
    """Stands in for an Architecture: many entries key on it, cached properties grow it."""

    def __init__(self, width: int) -> None:
        self.width = width

    @cached_property
    def table(self) -> list[int]:
        return list(range(self.width))


def test_size_once_types_are_measured_once_and_remeasured_when_they_grow() -> None:
    memo.size_once(Model)
    m = Model(5_000)
    bare = memo.deep_size(m)
    assert memo.deep_size(m) == bare
    m.table  # noqa: B018 - fills the cached property, growing the object
    grown = memo.deep_size(m)
    # The list of 5000 ints is at least 8 bytes a slot.
    assert grown >= bare + 5_000 * 8


def test_size_once_charges_the_same_bytes_as_a_plain_walk() -> None:
    class Local:
        def __init__(self, width: int) -> None:
            self.width = width

        @cached_property
        def table(self) -> list[int]:
            return list(range(self.width))

    m, plain = Local(2_000), Local(2_000)
    m.table  # noqa: B018
    plain.table  # noqa: B018
    expected = memo.deep_size(plain)  # Local is not registered yet: a plain walk
    memo.size_once(Local)
    assert memo.deep_size(m) == expected


def test_an_instance_is_charged_its_attribute_table_and_values_not_the_names() -> None:
    # The attribute names are strings interned for the class and shared by every instance.
    class Pair:
        def __init__(self) -> None:
            self.blob = b"x" * 1000
            self.label = "y" * 100

    p = Pair()
    expected = (
        sys.getsizeof(p)
        + sys.getsizeof(p.__dict__)
        + sys.getsizeof(p.blob)
        + sys.getsizeof(p.label)
    )
    assert memo.deep_size(p) == expected


def test_concurrent_callers_agree() -> None:
    @memo.memoized
    def square(n: int) -> int:
        return n * n

    results: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        local = [square(n) for n in range(200)]
        with lock:
            results.extend(local)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [n * n for n in range(200)] * 4


def test_no_unbudgeted_cache_holds_a_model() -> None:
    """Every cache of the service's own modules keyed on a model's architecture (a posted
    config's, as any request may send) is the byte-bounded memo: an ``functools.lru_cache``
    counts entries, not bytes, and 1024 layouts of posted configs held that way took a
    256 MiB worker to its OOM kill in a minute of distinct configs (`make soak`, heavy
    phase). Bounded lru_caches of small keys (a GPU reference, a format name) are fine."""
    import importlib
    import inspect
    import pkgutil

    import service

    offenders = []
    for info in pkgutil.walk_packages(service.__path__, "service."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if not hasattr(obj, "cache_info") or getattr(obj, "__module__", None) != info.name:
                continue
            wrapped = inspect.unwrap(obj)
            annotations = getattr(wrapped, "__annotations__", {})
            hints = " ".join(str(a) for k, a in annotations.items() if k != "return")
            if any(kind in hints for kind in ("Architecture", "ModelSpec", "ServingSetup")):
                offenders.append(f"{info.name}.{name}")
    assert offenders == []
