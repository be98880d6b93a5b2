"""A ``.gguf`` file (or a split set of them): its hyper-parameters and the bytes of each tensor.

Read by a streaming reader of the GGUF v2/v3 header written from the format's specification
(ggml-org/ggml ``docs/gguf.md``, "File Structure"): the header (magic ``GGUF``, version,
tensor count, key-value count), the key-value metadata, then one info per tensor (name,
dimensions, ggml type, offset). Nothing else is read: no tensor byte, and no metadata value
the estimate does not use. An array (the tokenizer's tokens, merges, scores) is skipped by its
lengths and never built: scalar arrays by one seek, string arrays by walking their length
prefixes through a bounded buffer. gguf's own ``GGUFReader`` builds two numpy views per array
element, so a file of seven million empty strings took 7.5 GB (issue 28 §1).

Every read is bounded: in bytes (the metadata and tensor infos must end within ``cap``), in
time (a deadline checked every few thousand elements), and in what it keeps (a buffer of
``_CHUNK`` bytes, the few scalars of :data:`_KEYS`, one small record per tensor, at most
:data:`MAX_TENSORS`). Keys are at most 65,535 bytes (the specification's bound) and tensor
names shorter than 64 bytes (``GGML_MAX_NAME``, which llama.cpp's loader enforces in
``gguf_init_from_file_impl``, ggml/src/gguf.cpp).

The metadata (``<arch>.block_count``, ``.embedding_length``, ...) is mapped onto the
``config.json`` keys the estimator reads, for the architectures listed in
:data:`ARCHITECTURES`; any other is refused with a reason.
"""

from __future__ import annotations

import io
import os
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gguf import LlamaFileType
from gguf.constants import GGMLQuantizationType

from service.estimator.checkpoint import GgufWeights
from service.estimator.gguf_quant import GgufTensor, Role, gguf_weights_of
from service.model_store.deadline import check_deadline

__all__ = [
    "ARCHITECTURES",
    "MAX_METADATA_BYTES",
    "MAX_TENSORS",
    "GgufError",
    "GgufModel",
    "metadata_size",
    "quant_tag",
    "read_gguf",
    "split_part",
]

MAX_METADATA_BYTES = 64 * 2**20
MAX_TENSORS = 1 << 16  # real files hold a few thousand (DeepSeek-V3: about 1,100)
_MAX_KV = 1 << 16
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_KEY_BYTES = 65_535  # docs/gguf.md: a key is at most 2^16 - 1 bytes
_MAX_NAME_BYTES = 63  # GGML_MAX_NAME (64) with its terminating zero
_MAX_KEPT_STRING = 256  # general.architecture, general.name: longer ones are not kept
_MAX_ARRAY_DEPTH = 4  # arrays of arrays of ...: none in real files
_CHUNK = 1 << 18  # bytes buffered at a time
_TICK = 1 << 14  # elements walked between two deadline checks

# GGUF architecture -> (the config's model_type, its transformers class).
ARCHITECTURES: Mapping[str, tuple[str, str]] = {
    "llama": ("llama", "LlamaForCausalLM"),
    "mistral": ("mistral", "MistralForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
    "qwen3moe": ("qwen3_moe", "Qwen3MoeForCausalLM"),
    "gemma": ("gemma", "GemmaForCausalLM"),
    "gemma2": ("gemma2", "Gemma2ForCausalLM"),
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM"),
    "phi3": ("phi3", "Phi3ForCausalLM"),
}

# GGUF key suffix (after "<arch>.") -> config.json key.
_KEYS: Mapping[str, str] = {
    "block_count": "num_hidden_layers",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "context_length": "max_position_embeddings",
    "rope.freq_base": "rope_theta",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.sliding_window": "sliding_window",
    "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "moe_intermediate_size",
    "attn_logit_softcapping": "attn_logit_softcapping",
    "final_logit_softcapping": "final_logit_softcapping",
}
# The general keys read; every other key's value is skipped unread.
_GENERAL = ("general.architecture", "general.name", "general.file_type")

# Value types of the key-value section (docs/gguf.md, gguf_metadata_value_type): scalars by
# their little-endian struct format; 8 is a string, 9 an array (item type, count, items).
_SCALARS: Mapping[int, struct.Struct] = {
    kind: struct.Struct("<" + code)
    for kind, code in {
        0: "B",
        1: "b",
        2: "H",
        3: "h",
        4: "I",
        5: "i",
        6: "f",
        7: "?",
        10: "Q",
        11: "q",
        12: "d",
    }.items()
}
_STRING, _ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_HEADER = struct.Struct("<4sIQQ")
_ARRAY_HEAD = struct.Struct("<IQ")
_TYPES = {t.value: t for t in GGMLQuantizationType}

_QUANT_TOKEN = re.compile(r"^(I?Q\d(_[A-Z0-9]+)*|TQ\d_\d|BF16|F16|F32|F64|MXFP4(_MOE)?)$")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})$")


class GgufError(ValueError):
    """The file cannot be read as a model (the reason says why)."""


def split_part(stem: str) -> tuple[str, int, int]:
    """(stem without the split suffix, part, of): ``x-00002-of-00003`` -> (x, 2, 3)."""
    m = _SPLIT.search(stem)
    if m is None:
        return stem, 1, 1
    return stem[: m.start()], int(m.group(1)), int(m.group(2))


def quant_tag(file_name: str) -> str | None:
    """The quantization tag of a GGUF file name (``Llama-3.2-1B-Instruct-Q4_K_M.gguf`` ->
    ``Q4_K_M``): the last ``-``/``.``-separated token that names one, as ``-hf <repo>:<tag>``
    matches it (common/download.cpp)."""
    stem = file_name[:-5] if file_name.lower().endswith(".gguf") else file_name
    stem, _, _ = split_part(stem)
    for token in reversed(re.split(r"[-.]", stem)):
        if _QUANT_TOKEN.match(token.upper()):
            return token.upper()
    return None


@dataclass(frozen=True, slots=True)
class GgufModel:
    architecture: str
    config: dict[str, Any]
    weights: GgufWeights
    file_type: str | None  # from general.file_type


# --------------------------------------------------------------------------------------------
# The stream


class _Stream:
    """Little-endian reads from the start of a file through one bounded buffer; refuses to go
    past ``limit`` (the file's end or the cap) or past ``deadline`` (time.monotonic())."""

    def __init__(self, f: io.RawIOBase, size: int, cap: int, deadline: float | None) -> None:
        self.f = f
        self.size = size
        self.cap = cap
        self.limit = min(size, cap)
        self.deadline = deadline
        self.buf = bytearray()
        self.pos = 0  # in buf
        self.base = 0  # file offset of buf[0]

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def _over(self) -> GgufError:
        if self.offset > self.size or self.limit == self.size:
            return GgufError("truncated header")
        return GgufError(f"metadata exceeds {self.cap} bytes")

    def _fill(self, n: int) -> None:
        """At least ``n`` bytes in the buffer from ``pos``."""
        if self.offset + n > self.limit:
            raise self._over()
        if self.pos > len(self.buf):  # a skip went past the buffer: start afresh there
            self.f.seek(self.offset)
            tail = b""
        else:
            tail = bytes(self.buf[self.pos :])
        size = min(max(_CHUNK, n), self.limit - self.offset)
        self.base, self.pos = self.offset, 0
        self.buf = bytearray()  # the old buffer goes before the new one is allocated
        buf = bytearray(size)
        buf[: len(tail)] = tail
        got = len(tail) + (self.f.readinto(memoryview(buf)[len(tail) :]) or 0)
        del buf[got:]
        self.buf = buf
        if got < n:
            raise GgufError("truncated header")

    def take(self, s: struct.Struct) -> Any:
        if self.pos + s.size > len(self.buf):
            self._fill(s.size)
        values = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return values[0] if len(values) == 1 else values

    def skip(self, n: int) -> None:
        self.pos += n
        if self.offset > self.limit:
            raise self._over()

    def string(self, keep: int, most: int | None = None) -> bytes | None:
        """A string; its bytes if at most ``keep`` long, else skipped (None). GgufError if
        longer than ``most``."""
        n = self.take(_U64)
        if most is not None and n > most:
            raise GgufError(f"a string of {n} bytes where at most {most} are allowed")
        if n > keep:
            self.skip(n)
            return None
        if self.pos + n > len(self.buf):
            self._fill(n)
        data = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return data

    def skip_strings(self, count: int) -> None:
        """Walk ``count`` strings by their length prefixes; nothing is kept."""
        unpack = _U64.unpack_from
        done = 0
        while done < count:
            if self.pos + 8 > len(self.buf):
                self._fill(8)
            buf, pos, end = self.buf, self.pos, len(self.buf) - 8
            stop = min(count, done + _TICK)
            while done < stop and pos <= end:
                pos += 8 + unpack(buf, pos)[0]
                done += 1
            self.pos = pos
            if self.offset > self.limit:
                raise self._over()
            self.tick()

    def tick(self) -> None:
        check_deadline(self.deadline, "the GGUF metadata")


# --------------------------------------------------------------------------------------------
# The walk


def _skip_array(stream: _Stream, depth: int) -> None:
    inner, count = stream.take(_ARRAY_HEAD)
    if inner in _SCALARS:
        stream.skip(_SCALARS[inner].size * count)
    elif inner == _STRING:
        stream.skip_strings(count)
    elif inner == _ARRAY and depth < _MAX_ARRAY_DEPTH:
        for i in range(count):
            _skip_array(stream, depth + 1)
            if i % _TICK == 0:
                stream.tick()
    else:
        raise GgufError(f"array of value type {inner} is not supported")


def _value(stream: _Stream, kind: int, keep: bool) -> Any:
    """The value of one key: returned if ``keep`` (scalars, short strings), else skipped."""
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        if not keep:
            stream.skip(scalar.size)
            return None
        return stream.take(scalar)
    if kind == _STRING:
        data = stream.string(_MAX_KEPT_STRING if keep else -1)
        return data.decode("utf-8", "replace") if data is not None else None
    if kind == _ARRAY:
        _skip_array(stream, 1)
        return None
    raise GgufError(f"unknown value type {kind}")


def _wanted(key: str) -> bool:
    if key in _GENERAL:
        return True
    arch, _, suffix = key.partition(".")
    return arch in ARCHITECTURES and suffix in _KEYS


@dataclass(frozen=True, slots=True)
class _Header:
    n_tensors: int
    fields: dict[str, Any]


def _read_metadata(stream: _Stream) -> _Header:
    magic, version, n_tensors, n_kv = stream.take(_HEADER)
    if magic != b"GGUF":
        raise GgufError("not a GGUF file (bad magic)")
    if version not in (2, 3):
        raise GgufError(f"GGUF version {version} is not supported")
    if n_kv > _MAX_KV or n_tensors > MAX_TENSORS:
        raise GgufError(f"{n_kv} metadata keys / {n_tensors} tensors exceed the bounds")
    fields: dict[str, Any] = {}
    for i in range(n_kv):
        raw = stream.string(_MAX_KEPT_STRING, most=_MAX_KEY_BYTES)
        key = raw.decode("utf-8", "replace") if raw is not None else ""  # long: not one we read
        kind = stream.take(_U32)
        keep = _wanted(key)
        value = _value(stream, kind, keep)
        if keep and value is not None:
            fields[key] = value
        if i % 256 == 0:
            stream.tick()
    return _Header(n_tensors, fields)


# Tensors llama.cpp places apart from the repeating layers and the rest (the output norm).
_ROLES = {"token_embd.weight": Role.TOKEN_EMBD, "output.weight": Role.OUTPUT}


def _layer(name: str) -> int | None:
    if not name.startswith("blk."):
        return None
    index = name[4:].split(".", 1)[0]
    return int(index) if index.isdigit() else None


class _Tensors:
    """The tensor infos of a model's files, kept as the weights need them (no names)."""

    def __init__(self, n_layer: int) -> None:
        self.n_layer = n_layer
        self.tensors: list[GgufTensor] = []
        self.types: list[GGMLQuantizationType] = []
        self.vocab = 0
        self.has_output = self.bf16 = self.has_embedding = False

    def read(self, stream: _Stream, count: int) -> None:
        if len(self.tensors) + count > MAX_TENSORS:
            raise GgufError(f"more than {MAX_TENSORS} tensors")
        dims_of = [struct.Struct(f"<{n}Q") for n in range(_MAX_DIMS + 1)]
        for i in range(count):
            raw = stream.string(_MAX_NAME_BYTES, most=_MAX_NAME_BYTES)
            assert raw is not None
            n_dims = stream.take(_U32)
            if n_dims > _MAX_DIMS:
                raise GgufError(f"a tensor with {n_dims} dimensions")
            found = stream.take(dims_of[n_dims]) if n_dims else ()
            dims: tuple[int, ...] = (found,) if isinstance(found, int) else tuple(found)
            type_id = stream.take(_U32)
            stream.skip(8)  # the offset of its data
            kind = _TYPES.get(type_id)
            if kind is None:
                raise GgufError(f"tensor {raw[:60]!r}: unknown ggml type {type_id}")
            self._add(raw.decode("utf-8", "replace"), dims, kind)
            if i % 1024 == 0:
                stream.tick()

    def _add(self, name: str, dims: tuple[int, ...], kind: GGMLQuantizationType) -> None:
        layer = _layer(name)
        if layer is not None and layer >= self.n_layer:
            raise GgufError(f"tensor {name[:60]} is past block_count {self.n_layer}")
        role = _ROLES.get(name, Role.KEPT)  # the split llama.cpp places by
        if role is Role.TOKEN_EMBD:
            self.vocab = dims[1] if len(dims) > 1 else 0
            self.has_embedding = True
        self.has_output = self.has_output or role is Role.OUTPUT
        self.bf16 = self.bf16 or kind is GGMLQuantizationType.BF16
        n_elements = 1
        for d in dims:
            n_elements *= d
        self.tensors.append(GgufTensor(role, layer, dims[0] if dims else 1, n_elements))
        self.types.append(kind)


def _skip_tensor_infos(stream: _Stream, count: int) -> None:
    for i in range(count):
        stream.string(-1, most=_MAX_NAME_BYTES)
        n_dims = stream.take(_U32)
        if n_dims > _MAX_DIMS:
            raise GgufError(f"a tensor with {n_dims} dimensions")
        stream.skip(8 * n_dims + 4 + 8)
        if i % 1024 == 0:
            stream.tick()


def metadata_size(path: str | os.PathLike[str], cap: int = MAX_METADATA_BYTES) -> int:
    """Bytes of the header, key-value metadata and tensor infos of ``path``, walked without
    keeping any value or tensor; GgufError when malformed or over ``cap``."""
    with open(path, "rb", buffering=0) as f:
        stream = _Stream(f, os.fstat(f.fileno()).st_size, cap, None)
        header = _read_metadata(stream)
        _skip_tensor_infos(stream, header.n_tensors)
        return stream.offset


# --------------------------------------------------------------------------------------------
# The model


def _config(
    fields: Mapping[str, Any], arch: str, has_output: bool, bf16: bool, vocab: int
) -> dict[str, Any]:
    model_type, cls = ARCHITECTURES[arch]
    config: dict[str, Any] = {"model_type": model_type, "architectures": [cls]}
    for suffix, key in _KEYS.items():
        v = fields.get(f"{arch}.{suffix}")
        if v is not None:
            config[key] = v
    config["vocab_size"] = vocab
    config["tie_word_embeddings"] = not has_output
    config["torch_dtype"] = "bfloat16" if bf16 else "float16"
    if "moe_intermediate_size" in config and "intermediate_size" not in config:
        config["intermediate_size"] = config["moe_intermediate_size"]
    name = fields.get("general.name")
    if isinstance(name, str):
        config["_name_or_path"] = name[:200]
    return config


def read_gguf(
    paths: Sequence[str | os.PathLike[str]],
    cap: int = MAX_METADATA_BYTES,
    deadline: float | None = None,
) -> GgufModel:
    """Read one model from its GGUF file(s) (the split parts in order; metadata from the
    first). Tensor bytes are the tensor infos' (``n_elements / block · type_size``).
    ``deadline`` (time.monotonic()) bounds the whole read; each file's metadata and tensor
    infos must end within ``cap`` bytes."""
    fields: dict[str, Any] = {}
    arch = ""
    seen: _Tensors | None = None
    for index, path in enumerate(paths):
        with open(path, "rb", buffering=0) as f:
            stream = _Stream(f, os.fstat(f.fileno()).st_size, cap, deadline)
            header = _read_metadata(stream)
            if index == 0:
                fields = header.fields
                arch, n_layer = _architecture(fields)
                seen = _Tensors(n_layer)
            assert seen is not None
            seen.read(stream, header.n_tensors)
    assert seen is not None
    if not seen.has_embedding:
        raise GgufError("token_embd.weight is missing")
    file_type = _file_type(fields.get("general.file_type"))
    weights = gguf_weights_of(
        seen.n_layer, tuple(seen.tensors), tuple(seen.types), file_type or "unknown"
    )
    config = _config(fields, arch, seen.has_output, seen.bf16, seen.vocab)
    return GgufModel(arch, config, weights, file_type)


def _architecture(fields: Mapping[str, Any]) -> tuple[str, int]:
    """The architecture and its layer count, checked."""
    arch = fields.get("general.architecture")
    if not isinstance(arch, str):
        raise GgufError("general.architecture is missing")
    if arch not in ARCHITECTURES:
        raise GgufError(
            f"GGUF architecture {arch[:40]!r} is not supported; supported: "
            f"{', '.join(ARCHITECTURES)}"
        )
    n_layer = fields.get(f"{arch}.block_count")
    if not isinstance(n_layer, int) or isinstance(n_layer, bool) or not 0 < n_layer <= 4096:
        raise GgufError(f"{arch}.block_count is missing or out of range")
    return arch, n_layer


def _file_type(value: Any) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        name = LlamaFileType(value).name
    except ValueError:
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")
