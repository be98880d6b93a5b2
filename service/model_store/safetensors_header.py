"""The header of a ``.safetensors`` file: every tensor's dtype, shape and byte range.

The format (huggingface/safetensors, ``docs/source/index.mdx`` "Format"): 8 bytes, a
little-endian unsigned length N, then N bytes of JSON mapping each tensor name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets into the data that follows) and
an optional ``__metadata__`` object of strings. Only those 8 + N bytes are read, never the
tensor data; N is capped (the safetensors library refuses headers over 100 MB, and so does
this reader by default).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_HEADER_BYTES", "HeaderError", "SafetensorsHeader", "TensorEntry", "read_header"]

# The safetensors library's own limit (MAX_HEADER_SIZE, 100_000_000 bytes).
MAX_HEADER_BYTES = 100_000_000


class HeaderError(ValueError):
    """The file is not a readable safetensors file (the reason says why)."""


@dataclass(frozen=True, slots=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    tensors: tuple[TensorEntry, ...]
    metadata: dict[str, str]
    header_bytes: int  # 8 + N

    @property
    def data_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def read_header(
    path: str | os.PathLike[str], max_header_bytes: int = MAX_HEADER_BYTES
) -> SafetensorsHeader:
    """Parse the header of ``path`` (reads 8 + N bytes); HeaderError when it is not valid."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise HeaderError("shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > max_header_bytes:
            raise HeaderError(f"header of {n} bytes exceeds the cap of {max_header_bytes} bytes")
        if 8 + n > size:
            raise HeaderError(f"header length {n} runs past the end of the file ({size} bytes)")
        raw = f.read(n)
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HeaderError(f"header is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise HeaderError("header is not a JSON object")
    data_size = size - 8 - n
    metadata: dict[str, str] = {}
    tensors = []
    for name, info in doc.items():
        if name == "__metadata__":
            if isinstance(info, dict):
                metadata = {str(k): str(v) for k, v in info.items()}
            continue
        tensors.append(_entry(name, info, data_size))
    return SafetensorsHeader(tuple(tensors), metadata, 8 + n)


def _entry(name: str, info: Any, data_size: int) -> TensorEntry:
    if not isinstance(info, dict):
        raise HeaderError(f"tensor {name[:80]!r}: entry is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str):
        raise HeaderError(f"tensor {name[:80]!r}: dtype missing")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise HeaderError(f"tensor {name[:80]!r}: shape is not a list of sizes")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_size
    ):
        raise HeaderError(f"tensor {name[:80]!r}: data_offsets outside the file's data")
    return TensorEntry(name, dtype, tuple(shape), offsets[1] - offsets[0])
