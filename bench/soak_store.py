"""The model-store phase of `make soak` (issue 28 §1): hostile GGUF files in `LLMMEM_MODEL_DIRS`.

The store holds the issue's file, a 56 MB GGUF v3 file with two metadata entries
(`general.architecture = "llama"` and `tokenizer.ggml.tokens`, an array of 7,000,000 empty
strings), written by hand from the format's specification (ggml-org/ggml `docs/gguf.md`), and
a model with a real-sized tokenizer (262,144 tokens and as many merges, types and scores, the
vocabulary size of Gemma 3), written by gguf's own writer. The service rescans every second and
both files are touched every two seconds, so every scan reads them again; meanwhile `/healthz`
is probed from a separate process and the worker's RSS sampled. Targets: RSS < 200 MiB (the
prod limit is 256 MiB), probes p99 < 100 ms, the real model indexed, the array file skipped.
"""

from __future__ import annotations

import json
import os
import statistics
import struct
import time
from pathlib import Path

import gguf
import numpy as np

from bench import harness
from bench.soak_phases import (
    TARGET_RSS,
    MemoryLimit,
    Phase,
    Prober,
    RssSampler,
    _alive_check,
    _probe_checks,
)

MiB = 2**20
ARRAY_STRINGS = 7_000_000
TOKENIZER_TOKENS = 262_144


def _string(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def write_array_file(path: Path, count: int = ARRAY_STRINGS) -> None:
    """The issue's file: header (magic, version 3, 0 tensors, 2 keys), the architecture, then
    the array (item type 8 = string, count, each an empty string: its uint64 length 0)."""
    with path.open("wb") as f:
        f.write(struct.pack("<4sIQQ", b"GGUF", 3, 0, 2))
        f.write(_string(b"general.architecture") + struct.pack("<I", 8) + _string(b"llama"))
        f.write(_string(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, count))
        block = b"\0" * (8 * 65536)
        for _ in range(count // 65536):
            f.write(block)
        f.write(b"\0" * (8 * (count % 65536)))


def write_tokenizer_model(path: Path, tokens: int = TOKENIZER_TOKENS) -> None:
    """A two-layer llama (hidden 256) with a BPE tokenizer of ``tokens`` tokens and merges."""
    writer = gguf.GGUFWriter(str(path), "llama")
    hidden, ff, heads, kv = 256, 512, 4, 2
    writer.add_block_count(2)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_context_length(4096)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"<tok{i}>" for i in range(tokens)])
    writer.add_token_merges([f"t{i} k{i}" for i in range(tokens)])
    writer.add_token_types([1] * tokens)
    writer.add_token_scores([0.0] * tokens)
    head = hidden // heads
    shapes = {"token_embd.weight": (1024, hidden), "output_norm.weight": (hidden,)}
    for i in range(2):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (hidden,),
            f"blk.{i}.attn_q.weight": (hidden, hidden),
            f"blk.{i}.attn_k.weight": (kv * head, hidden),
            f"blk.{i}.attn_v.weight": (kv * head, hidden),
            f"blk.{i}.attn_output.weight": (hidden, hidden),
            f"blk.{i}.ffn_norm.weight": (hidden,),
            f"blk.{i}.ffn_gate.weight": (ff, hidden),
            f"blk.{i}.ffn_up.weight": (ff, hidden),
            f"blk.{i}.ffn_down.weight": (hidden, ff),
        }
    for name, shape in shapes.items():
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def prepare(tmp: Path) -> dict[str, str]:
    """The store's files; the service's environment for the phase."""
    store = tmp / "store"
    (store / "acme" / "vocab-bomb").mkdir(parents=True, exist_ok=True)
    (store / "acme" / "big-vocab").mkdir(parents=True, exist_ok=True)
    write_array_file(store / "acme" / "vocab-bomb" / "vocab-bomb-Q4_K_M.gguf")
    write_tokenizer_model(store / "acme" / "big-vocab" / "big-vocab-F32.gguf")
    return {"LLMMEM_MODEL_DIRS": str(store), "LLMMEM_MODEL_STORE_RESCAN_S": "1"}


def store_files(server: harness.Server, limit: MemoryLimit, tmp: Path, seconds: float) -> Phase:
    phase = Phase(
        f"model store: a GGUF of {ARRAY_STRINGS:,} empty strings and a "
        f"{TOKENIZER_TOKENS:,}-token tokenizer, rescanned every second ({seconds:.0f} s)"
    )
    kills = limit.oom_kills()
    limit.reset_peak()
    files = sorted((tmp / "store").rglob("*.gguf"))
    sizes = ", ".join(f"{f.name} {f.stat().st_size / MiB:.0f} MiB" for f in files)
    phase.notes.append(f"files: {sizes}")
    sampler = RssSampler(server.pid)
    prober = Prober(server.port, seconds)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(2.0)
        for f in files:  # a new mtime: the next scan reads the file again
            os.utime(f)
    probes, failures = prober.result()
    rss = sampler.finish()
    _probe_checks(phase, probes, failures)
    peak_rss = max(rss, default=0)
    phase.check(
        "worker RSS while the store is scanned",
        f"< {TARGET_RSS // MiB} MiB (limit {limit.limit // MiB} MiB)",
        f"max {peak_rss / MiB:.0f} MiB, mean {statistics.mean(rss) / MiB if rss else 0:.0f} MiB"
        + (f"; cgroup peak {limit.peak() / MiB:.0f} MiB" if limit.peak() else ""),
        0 < peak_rss < TARGET_RSS,
    )
    try:
        status, raw = harness.request(server.url + "/readyz", timeout=10)
    except OSError as exc:  # the worker is gone (OOM-killed)
        status, raw = 0, str(exc).encode()
    store = json.loads(raw).get("store", {}) if status == 200 else {}
    phase.check(
        "the store indexed the real model, skipped the array file, and kept rescanning",
        "1 model, 1 skipped, >= 5 scans",
        f"readyz {status}: {store}",
        store.get("models") == 1 and store.get("skipped") == 1 and store.get("scans", 0) >= 5,
    )
    _alive_check(phase, server, limit, kills)
    return phase
