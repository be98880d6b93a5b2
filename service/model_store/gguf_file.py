"""A ``.gguf`` file (or a split set of them): its hyper-parameters and the bytes of each tensor.

Read with ``gguf.GGUFReader`` (llama.cpp's own reader, ``gguf-py``): it memory-maps the file
and parses the header, the key-value metadata and the tensor infos; each tensor's data is a
lazy view of the map that nothing here touches, so no tensor byte is read. Before handing a
file to it, :func:`metadata_size` walks the header with a few small reads and refuses one
whose metadata and tensor infos exceed the cap (a tokenizer array of a billion entries would
otherwise be parsed into a billion views).

The metadata (``<arch>.block_count``, ``.embedding_length``, ...; the GGUF spec in
ggml-org/ggml ``docs/gguf.md``) is mapped onto the ``config.json`` keys the estimator reads,
for the architectures listed in :data:`ARCHITECTURES`; any other is refused with a reason.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gguf import GGUFReader, LlamaFileType
from gguf.constants import GGMLQuantizationType

from service.estimator.checkpoint import GgufWeights
from service.estimator.gguf_quant import GgufTensor, Role, gguf_weights_of

__all__ = [
    "ARCHITECTURES",
    "MAX_METADATA_BYTES",
    "GgufError",
    "GgufModel",
    "metadata_size",
    "quant_tag",
    "read_gguf",
    "split_part",
]

MAX_METADATA_BYTES = 64 * 2**20
_MAX_KV = 1 << 16
_MAX_TENSORS = 1 << 20
_MAX_DIMS = 4  # GGML_MAX_DIMS

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

# Value types of the GGUF key-value section: type id -> byte width (strings and arrays apart).
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9

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


def _read_exact(f: Any, n: int) -> bytes:
    data: bytes = f.read(n)
    if len(data) != n:
        raise GgufError("truncated header")
    return data


def metadata_size(path: str | os.PathLike[str], cap: int = MAX_METADATA_BYTES) -> int:
    """Bytes of the header, key-value metadata and tensor infos of ``path``, walked without
    reading any value or tensor; GgufError when malformed or over ``cap``."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        magic, version = struct.unpack("<4sI", _read_exact(f, 8))
        if magic != b"GGUF":
            raise GgufError("not a GGUF file (bad magic)")
        if version not in (2, 3):
            raise GgufError(f"GGUF version {version} is not supported")
        n_tensors, n_kv = struct.unpack("<QQ", _read_exact(f, 16))
        if n_kv > _MAX_KV or n_tensors > _MAX_TENSORS:
            raise GgufError(f"{n_kv} metadata keys / {n_tensors} tensors exceed the bounds")

        def skip(n: int) -> None:
            if f.tell() + n > min(size, cap):
                raise GgufError(f"metadata exceeds {cap} bytes or the file")
            f.seek(n, os.SEEK_CUR)

        def string() -> None:
            (n,) = struct.unpack("<Q", _read_exact(f, 8))
            skip(n)

        def value(kind: int) -> None:
            if kind in _SCALAR_BYTES:
                skip(_SCALAR_BYTES[kind])
            elif kind == _STRING:
                string()
            elif kind == _ARRAY:
                inner, count = struct.unpack("<IQ", _read_exact(f, 12))
                if inner in _SCALAR_BYTES:
                    skip(_SCALAR_BYTES[inner] * count)
                elif inner == _STRING:
                    for _ in range(count):
                        string()
                else:
                    raise GgufError(f"array of value type {inner} is not supported")
            else:
                raise GgufError(f"unknown value type {kind}")

        for _ in range(n_kv):
            string()
            (kind,) = struct.unpack("<I", _read_exact(f, 4))
            value(kind)
        for _ in range(n_tensors):
            string()
            (n_dims,) = struct.unpack("<I", _read_exact(f, 4))
            if n_dims > _MAX_DIMS:
                raise GgufError(f"a tensor with {n_dims} dimensions")
            skip(8 * n_dims + 4 + 8)
        return int(f.tell())


def _field(reader: GGUFReader, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None or not field.types:
        return None
    return field.contents()


def _config(reader: GGUFReader, arch: str, names: set[str], vocab: int) -> dict[str, Any]:
    model_type, cls = ARCHITECTURES[arch]
    config: dict[str, Any] = {"model_type": model_type, "architectures": [cls]}
    for suffix, key in _KEYS.items():
        v = _field(reader, f"{arch}.{suffix}")
        if v is not None and not isinstance(v, list):
            config[key] = v
    if isinstance(config.get("num_key_value_heads"), list):
        del config["num_key_value_heads"]
    config["vocab_size"] = vocab
    config["tie_word_embeddings"] = "output.weight" not in names
    config["torch_dtype"] = "bfloat16" if _has_type(reader, "BF16") else "float16"
    if "moe_intermediate_size" in config and "intermediate_size" not in config:
        config["intermediate_size"] = config["moe_intermediate_size"]
    name = _field(reader, "general.name")
    if isinstance(name, str):
        config["_name_or_path"] = name[:200]
    return config


def _has_type(reader: GGUFReader, type_name: str) -> bool:
    return any(t.tensor_type.name == type_name for t in reader.tensors)


# Tensors llama.cpp places apart from the repeating layers and the rest (the output norm).
_ROLES = {"token_embd.weight": Role.TOKEN_EMBD, "output.weight": Role.OUTPUT}


def _layer(name: str) -> int | None:
    if not name.startswith("blk."):
        return None
    index = name[4:].split(".", 1)[0]
    return int(index) if index.isdigit() else None


def read_gguf(paths: Sequence[str | os.PathLike[str]], cap: int = MAX_METADATA_BYTES) -> GgufModel:
    """Read one model from its GGUF file(s) (the split parts in order; metadata from the
    first). Tensor bytes are the tensor infos' (``n_elements / block · type_size``)."""
    readers = []
    for p in paths:
        metadata_size(p, cap)  # refuses a file whose metadata exceeds the cap, before reading
        try:
            readers.append(GGUFReader(p))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise GgufError(f"unreadable: {exc}") from None
    first = readers[0]
    arch = _field(first, "general.architecture")
    if not isinstance(arch, str):
        raise GgufError("general.architecture is missing")
    if arch not in ARCHITECTURES:
        raise GgufError(
            f"GGUF architecture {arch[:40]!r} is not supported; supported: "
            f"{', '.join(ARCHITECTURES)}"
        )
    n_layer = _field(first, f"{arch}.block_count")
    if not isinstance(n_layer, int) or not 0 < n_layer <= 4096:
        raise GgufError(f"{arch}.block_count is missing or out of range")
    tensors: list[GgufTensor] = []
    types: list[GGMLQuantizationType] = []
    vocab = 0
    names: set[str] = set()
    for reader in readers:
        for t in reader.tensors:
            names.add(t.name)
            dims = [int(d) for d in t.shape]
            layer = _layer(t.name)
            if layer is not None and layer >= n_layer:
                raise GgufError(f"tensor {t.name[:60]} is past block_count {n_layer}")
            role = _ROLES.get(t.name, Role.KEPT)  # the split llama.cpp places by
            if role is Role.TOKEN_EMBD:
                vocab = dims[1] if len(dims) > 1 else 0
            tensors.append(GgufTensor(role, layer, dims[0] if dims else 1, int(t.n_elements)))
            types.append(GGMLQuantizationType(t.tensor_type))
    if Role.TOKEN_EMBD not in {t.role for t in tensors}:
        raise GgufError("token_embd.weight is missing")
    file_type = _file_type(first)
    weights = gguf_weights_of(n_layer, tuple(tensors), tuple(types), file_type or "unknown")
    config = _config(first, arch, names, vocab)
    return GgufModel(arch, config, weights, file_type)


def _file_type(reader: GGUFReader) -> str | None:
    value = _field(reader, "general.file_type")
    if not isinstance(value, int):
        return None
    try:
        name = LlamaFileType(value).name
    except ValueError:
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")
