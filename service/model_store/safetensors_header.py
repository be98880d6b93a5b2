"""The header of a ``.safetensors`` file: every tensor's dtype, shape and byte range.

The format (huggingface/safetensors, ``docs/source/index.mdx`` "Format"): 8 bytes, a
little-endian unsigned length N, then N bytes of JSON mapping each tensor name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets into the data that follows) and
an optional ``__metadata__`` object of strings. Only those 8 + N bytes are read, never the
tensor data; N is capped (the safetensors library refuses headers over 100 MB, and so does
this reader by default).

The JSON is read member by member (:mod:`.json_stream`): a window of 256 KiB, one tensor entry
parsed at a time (an entry longer than 64 KiB is refused), ``__metadata__`` skipped string by
string when only the tensors are wanted. A 100 MB header therefore costs about a megabyte to
read, whatever it holds, and a deadline bounds the time.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from service.model_store.json_stream import JsonBoundError, ObjectReader

__all__ = [
    "MAX_HEADER_BYTES",
    "HeaderError",
    "SafetensorsHeader",
    "TensorEntry",
    "read_header",
    "tensor_entries",
]

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


def _open_header(f: IO[bytes], size: int, max_header_bytes: int) -> int:
    head = f.read(8)
    if len(head) < 8:
        raise HeaderError("shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", head)
    if n > max_header_bytes:
        raise HeaderError(f"header of {n} bytes exceeds the cap of {max_header_bytes} bytes")
    if 8 + n > size:
        raise HeaderError(f"header length {n} runs past the end of the file ({size} bytes)")
    return int(n)


def _members(
    path: str | os.PathLike[str],
    max_header_bytes: int,
    deadline: float | None,
    metadata: dict[str, str] | None,
) -> Iterator[TensorEntry | int]:
    """The header length (8 + N) first, then each tensor entry; ``metadata`` (when given)
    receives ``__metadata__``, else it is skipped unread."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        n = _open_header(f, size, max_header_bytes)
        yield 8 + n
        data_size = size - 8 - n
        reader = ObjectReader(f, n, deadline=deadline)
        try:
            for name in reader.members():
                if name == "__metadata__":
                    if metadata is None:
                        reader.skip_strings()
                        continue
                    info = reader.value()
                    if isinstance(info, dict):
                        metadata.update({str(k): str(v) for k, v in info.items()})
                    continue
                yield _entry(name, reader.value(), data_size)
            reader.end()
        except JsonBoundError as exc:
            raise HeaderError(f"header: {exc}") from None


def tensor_entries(
    path: str | os.PathLike[str],
    max_header_bytes: int = MAX_HEADER_BYTES,
    deadline: float | None = None,
) -> Iterator[TensorEntry]:
    """Each tensor entry of ``path``'s header, one at a time, in bounded memory; HeaderError
    when the header is not valid, over ``max_header_bytes`` or past ``deadline``
    (time.monotonic())."""
    for item in _members(path, max_header_bytes, deadline, None):
        if isinstance(item, TensorEntry):
            yield item


def read_header(
    path: str | os.PathLike[str],
    max_header_bytes: int = MAX_HEADER_BYTES,
    deadline: float | None = None,
) -> SafetensorsHeader:
    """The whole header of ``path`` (reads 8 + N bytes); HeaderError when it is not valid."""
    metadata: dict[str, str] = {}
    tensors: list[TensorEntry] = []
    header_bytes = 0
    for item in _members(path, max_header_bytes, deadline, metadata):
        if isinstance(item, TensorEntry):
            tensors.append(item)
        else:
            header_bytes = item
    return SafetensorsHeader(tuple(tensors), metadata, header_bytes)


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
