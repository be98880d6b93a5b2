"""The time bound of reading a model's files: one exception, raised by every reader.

A read past its deadline is not the file's fault (a loaded machine reads slowly), so the index
does not remember it as a bad file: the next scan tries again.
"""

from __future__ import annotations

import time

__all__ = ["ReadTimeout", "check_deadline"]


class ReadTimeout(Exception):
    """Reading took longer than the scan allows one model
    (``LLMMEM_MODEL_STORE_READ_TIMEOUT_S``)."""


def check_deadline(deadline: float | None, what: str) -> None:
    """Raise ReadTimeout if ``deadline`` (time.monotonic()) has passed."""
    if deadline is not None and time.monotonic() > deadline:
        raise ReadTimeout(f"reading {what} took longer than the read deadline")
