"""Real model files for the store tests, written in the test's own directory.

Tiny models are saved by transformers (``save_pretrained``) into a Hugging Face hub-cache
layout (``models--org--name/{blobs,refs,snapshots}``, the snapshot's files linked into
``blobs/``); quantized checkpoints by the safetensors library; GGUF files by gguf's writer
(tensor data zeros of the right byte size). Each helper returns the bytes it wrote as an
independent expectation (numpy ``nbytes`` sums, not the code under test).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np

TINY_LLAMA: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
}


def save_tiny_llama(directory: Path, **overrides: Any) -> int:
    """A tiny Llama saved by transformers in bf16; returns its tensors' bytes (torch's count)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**TINY_LLAMA, **overrides})
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory)
    return sum(p.numel() * p.element_size() for p in model.state_dict().values())


def into_hub_cache(root: Path, repo_id: str, source: Path, revision: str = "0123abcd") -> Path:
    """Move ``source``'s files into a hub-cache repo under ``root``; returns the snapshot."""
    org, name = repo_id.split("/")
    repo = root / f"models--{org}--{name}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for f in sorted(source.iterdir()):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        blob = repo / "blobs" / digest
        shutil.copyfile(f, blob)
        os.symlink(os.path.join("..", "..", "blobs", digest), snapshot / f.name)
    return snapshot


def write_config(directory: Path, config: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))


def write_gguf(
    path: Path,
    *,
    arch: str = "llama",
    layers: int = 2,
    hidden: int = 256,
    ff: int = 512,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 320,
    context: int = 4096,
    matrix_type: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.Q8_0,
    output: bool = True,
    file_type: gguf.LlamaFileType | None = gguf.LlamaFileType.MOSTLY_Q8_0,
    split: tuple[int, int] | None = None,
    tensors: tuple[str, ...] | None = None,
    tokenizer: int = 0,
) -> dict[str, int]:
    """A GGUF file of a llama-like model; returns each tensor's bytes (numpy's count of what
    was written). ``tensors`` limits the file to these names (split parts); ``tokenizer``
    adds a BPE tokenizer of that many tokens and as many merges, with their types and
    scores, as convert_hf_to_gguf.py writes one (``tokenizer.ggml.*``)."""
    head_dim = hidden // heads
    shapes: dict[str, tuple[tuple[int, ...], gguf.GGMLQuantizationType]] = {}
    q, f32 = matrix_type, gguf.GGMLQuantizationType.F32
    shapes["token_embd.weight"] = ((vocab, hidden), q)
    for i in range(layers):
        shapes[f"blk.{i}.attn_norm.weight"] = ((hidden,), f32)
        shapes[f"blk.{i}.attn_q.weight"] = ((heads * head_dim, hidden), q)
        shapes[f"blk.{i}.attn_k.weight"] = ((kv_heads * head_dim, hidden), q)
        shapes[f"blk.{i}.attn_v.weight"] = ((kv_heads * head_dim, hidden), q)
        shapes[f"blk.{i}.attn_output.weight"] = ((hidden, heads * head_dim), q)
        shapes[f"blk.{i}.ffn_norm.weight"] = ((hidden,), f32)
        shapes[f"blk.{i}.ffn_gate.weight"] = ((ff, hidden), q)
        shapes[f"blk.{i}.ffn_up.weight"] = ((ff, hidden), q)
        shapes[f"blk.{i}.ffn_down.weight"] = ((hidden, ff), q)
    shapes["output_norm.weight"] = ((hidden,), f32)
    if output:
        shapes["output.weight"] = ((vocab, hidden), gguf.GGMLQuantizationType.Q6_K)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(layers)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_context_length(context)
    writer.add_layer_norm_rms_eps(1e-5)
    if file_type is not None:
        writer.add_file_type(file_type)
    if split is not None:
        writer.add_uint16("split.no", split[0] - 1)
        writer.add_uint16("split.count", split[1])
    if tokenizer:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list([f"<tok{i}>" for i in range(tokenizer)])
        writer.add_token_merges([f"t{i} k{i}" for i in range(tokenizer)])
        writer.add_token_types([1] * tokenizer)
        writer.add_token_scores([0.0] * tokenizer)
    written: dict[str, int] = {}
    for name, (shape, kind) in shapes.items():
        if tensors is not None and name not in tensors:
            continue
        block, size = gguf.GGML_QUANT_SIZES[kind]
        byte_shape = (*shape[:-1], shape[-1] // block * size)
        data = np.zeros(byte_shape, dtype=np.uint8 if block > 1 else np.float32)
        if block == 1:
            data = np.zeros(shape, dtype=np.float32)
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_shape=byte_shape, raw_dtype=kind)
        written[name] = data.nbytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written


def gguf_string(data: bytes) -> bytes:
    """A GGUF string (docs/gguf.md, ``gguf_string_t``): its uint64 length, then its bytes."""
    return struct.pack("<Q", len(data)) + data


def write_array_gguf(path: Path, count: int, *, item: bytes = b"", version: int = 3) -> None:
    """Issue 28's file: a GGUF header with two metadata entries, ``general.architecture =
    "llama"`` and ``tokenizer.ggml.tokens`` as an array of ``count`` copies of ``item``, and
    no tensor, written by hand from the specification (header: magic, version, tensor count,
    key count; a key-value: key, value type, value; an array: item type, count, items)."""
    with path.open("wb") as f:
        f.write(struct.pack("<4sIQQ", b"GGUF", version, 0, 2))
        f.write(gguf_string(b"general.architecture") + struct.pack("<I", 8) + gguf_string(b"llama"))
        f.write(gguf_string(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, count))
        one = gguf_string(item)
        block = one * 65536
        for _ in range(count // 65536):
            f.write(block)
        f.write(one * (count % 65536))
