"""The model store: the index of the store roots, kept current by a background thread.

The first scan starts with the service and runs in a thread, so readiness never waits for a
large cache to be indexed (``/readyz`` reports the store's state). Later scans run every
``rescan_interval_s`` and swap the index in whole: a request sees one index from start to end.
Scans reuse the last scan's parses of unchanged files, so a rescan of a quiet store costs a
directory walk.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.model_store.index import ScanLimits, StoreIndex, build_index

__all__ = ["ModelStore"]

log = logging.getLogger("service.model_store")


class ModelStore:
    """Models under ``roots``; empty (and idle) when there are none."""

    def __init__(
        self,
        roots: tuple[Path, ...],
        rescan_interval_s: float = 300.0,
        limits: ScanLimits = ScanLimits(),
        on_change: Callable[[StoreIndex], None] | None = None,
    ) -> None:
        self.roots = roots
        self.rescan_interval_s = rescan_interval_s
        self.limits = limits
        self.on_change = on_change
        self._index = StoreIndex(entries={})
        self._cache: dict[tuple[Any, ...], Any] = {}
        self._scans = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def index(self) -> StoreIndex:
        return self._index

    @property
    def scans(self) -> int:
        """Completed scans (0: the first is still running)."""
        return self._scans

    @property
    def enabled(self) -> bool:
        return bool(self.roots)

    def scan(self) -> StoreIndex:
        """Scan now (callers: the thread, tests); the new index replaces the old one."""
        with self._lock:
            before = self._index
            index, self._cache = build_index(self.roots, self.limits, before, self._cache)
            changed = index.entries != before.entries
            if not changed:
                # Keep the old entries (and their cached estimates) when nothing changed.
                index = dataclasses.replace(index, entries=before.entries)
            self._index = index
            self._scans += 1
        log.info(
            "model store: %d models indexed in %.2f s (%d skipped, %d header bytes read)",
            len(index.entries),
            index.duration_s,
            len(index.skipped),
            index.header_bytes,
        )
        if changed and self.on_change is not None:
            self.on_change(index)
        return index

    def start(self) -> None:
        """Scan in the background now and then every ``rescan_interval_s``."""
        if not self.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="model-store", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
            except Exception:  # the service keeps serving the last index
                log.exception("model store: scan failed; keeping the last index")
            if self._stop.wait(self.rescan_interval_s):
                return
