"""Notice when mounted files change: a bearer-token Secret or a TLS certificate rotated in place.

Kubernetes updates a mounted Secret by swapping a symlink (`..data`) to a new directory, so
a file's resolved inode, size or modification time changes; an ordinary edit changes the time
or size. A `FileWatch` compares those (following links) for a set of paths, directories
included entry by entry, at most once per interval, so a caller can ask on every request.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

Signature = tuple[tuple[str, int, int, int], ...]


def signature(paths: Iterable[Path]) -> Signature:
    """(path, inode, size, mtime in ns) of each file, a directory's visible entries included;
    a missing path reads as inode -1."""
    entries: list[tuple[str, int, int, int]] = []
    for path in paths:
        targets = [path]
        if path.is_dir():
            targets = sorted(p for p in path.iterdir() if not p.name.startswith("."))
        for target in targets:
            try:
                st = os.stat(target)
            except OSError:
                entries.append((str(target), -1, 0, 0))
                continue
            entries.append((str(target), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(entries)


class FileWatch:
    def __init__(
        self,
        paths: Iterable[Path],
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = tuple(paths)
        self.interval_s = interval_s
        self.clock = clock
        self.seen = signature(self.paths)
        self.next_look = clock() + interval_s

    def changed(self) -> bool:
        """True once after the files changed (checked at most once per interval)."""
        now = self.clock()
        if now < self.next_look:
            return False
        self.next_look = now + self.interval_s
        current = signature(self.paths)
        if current == self.seen:
            return False
        self.seen = current
        return True
