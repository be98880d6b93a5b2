"""Model files built to exhaust the store's memory or time (issue 28 §1), read in bounded memory.

Memory is measured with tracemalloc (every allocation Python makes while reading), and the
bound is checked two ways: an absolute ceiling a few times the reader's one-megabyte buffer,
and no growth with the size of what the file holds (the peak for a ten-times larger array
stays within a few KiB of the smaller one's). gguf's reader, which the store used before, built
two numpy views per array element: 200,000 strings peaked at 344 MiB.
"""

from __future__ import annotations

import json
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from safetensors.numpy import save_file

from service.model_store import ScanLimits
from service.model_store.deadline import ReadTimeout
from service.model_store.gguf_file import GgufError, metadata_size, read_gguf
from service.model_store.index import build_index
from service.model_store.json_stream import JsonBoundError, loads_bounded, parse_cost
from service.model_store.safetensors_header import HeaderError, read_header, tensor_entries
from tests.model_store.files import gguf_string, write_array_gguf, write_gguf

MiB = 2**20
# The readers' buffer is 256 KiB; what they keep besides is a few records.
CEILING = 2 * MiB
# Growth allowed between a file and one holding several times more array items (both larger
# than the buffer, so that both fill it).
NO_GROWTH = 256 * 1024


def peak_bytes(fn: Callable[[], Any]) -> tuple[int, Any]:
    """(tracemalloc's peak while ``fn`` runs, above what was allocated before; its result or
    the exception it raised)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        try:
            out: Any = fn()
        except Exception as exc:  # the exception is the result under test
            out = exc
        return tracemalloc.get_traced_memory()[1] - base, out
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------------------------
# GGUF


def test_an_array_of_empty_strings_is_walked_in_constant_memory(tmp_path: Path) -> None:
    small, large = tmp_path / "small.gguf", tmp_path / "large.gguf"
    write_array_gguf(small, 400_000)
    write_array_gguf(large, 1_600_000)
    peak_small, err_small = peak_bytes(lambda: read_gguf([small]))
    peak_large, err_large = peak_bytes(lambda: read_gguf([large]))
    # The whole array was walked: what is refused is the missing block count after it.
    for err in (err_small, err_large):
        assert isinstance(err, GgufError)
        assert "block_count" in str(err)
    assert peak_large < CEILING
    assert peak_large - peak_small < NO_GROWTH
    # The walk ends exactly at the end of the array: header 24, two keys, 8 per string.
    keys = len(gguf_string(b"general.architecture")) + 4 + len(gguf_string(b"llama"))
    keys += len(gguf_string(b"tokenizer.ggml.tokens")) + 4 + 4 + 8
    assert metadata_size(large) == 24 + keys + 8 * 1_600_000 == large.stat().st_size


def test_issue_28_file_in_the_store_is_skipped_in_constant_memory(tmp_path: Path) -> None:
    store = tmp_path / "store" / "acme" / "vocab-bomb"
    store.mkdir(parents=True)
    write_array_gguf(store / "model-Q4_K_M.gguf", 1_000_000)
    # No read deadline here: what is checked is memory, and a loaded machine is slow.
    unhurried = ScanLimits(read_timeout_s=3600)
    peak, result = peak_bytes(lambda: build_index((tmp_path / "store",), unhurried))
    index, _ = result
    assert peak < CEILING
    assert index.entries == {}
    [skip] = index.skipped
    assert "block_count" in skip.reason


def test_a_real_sized_tokenizer_costs_no_more_than_none(tmp_path: Path) -> None:
    # 262,144 tokens and as many merges, types and scores: Gemma 3's vocabulary size.
    bare, small, full = (tmp_path / f"{n}-Q8_0.gguf" for n in ("bare", "small", "full"))
    write_gguf(bare)
    write_gguf(small, tokenizer=65_536)
    write_gguf(full, tokenizer=262_144)
    assert full.stat().st_size > small.stat().st_size + 8 * MiB
    model_bare = read_gguf([bare])
    peak_small, _ = peak_bytes(lambda: read_gguf([small]))
    peak_full, model_full = peak_bytes(lambda: read_gguf([full]))
    assert model_full.weights == model_bare.weights
    assert model_full.config == model_bare.config
    assert peak_full < CEILING
    assert peak_full - peak_small < NO_GROWTH


def test_every_array_kind_is_skipped_by_its_length(tmp_path: Path) -> None:
    # Arrays of each scalar width, of strings and of arrays, then the keys the model needs.
    path = tmp_path / "arrays.gguf"
    kv = [
        gguf_string(b"a.u8") + struct.pack("<IIQ", 9, 0, 3) + b"\x01\x02\x03",
        gguf_string(b"a.f64") + struct.pack("<IIQ", 9, 12, 2) + struct.pack("<2d", 1.0, 2.0),
        gguf_string(b"a.nested")
        + struct.pack("<IIQ", 9, 9, 2)
        + struct.pack("<IQ", 4, 2)
        + struct.pack("<2I", 1, 2)
        + struct.pack("<IQ", 8, 1)
        + gguf_string(b"x"),
        gguf_string(b"x" * 300) + struct.pack("<I", 4) + struct.pack("<I", 7),  # a long key
        gguf_string(b"general.architecture") + struct.pack("<I", 8) + gguf_string(b"llama"),
        gguf_string(b"llama.block_count") + struct.pack("<I", 4) + struct.pack("<I", 1),
        gguf_string(b"llama.embedding_length") + struct.pack("<I", 4) + struct.pack("<I", 8),
        gguf_string(b"llama.attention.head_count_kv")  # per-layer: an array, not kept
        + struct.pack("<IIQ", 9, 4, 1)
        + struct.pack("<I", 2),
    ]
    # One tensor: token_embd.weight, 2 dims (8, 16), F32 (type 0), offset 0.
    info = gguf_string(b"token_embd.weight") + struct.pack("<I2QIQ", 2, 8, 16, 0, 0)
    path.write_bytes(struct.pack("<4sIQQ", b"GGUF", 3, 1, len(kv)) + b"".join(kv) + info)
    model = read_gguf([path])
    assert model.config["num_hidden_layers"] == 1
    assert model.config["hidden_size"] == 8
    assert model.config["vocab_size"] == 16
    assert "num_key_value_heads" not in model.config
    assert model.weights.token_embd == 8 * 16 * 4


def _one_kv_file(path: Path, kv: bytes, n_kv: int = 1, tensors: bytes = b"", n_t: int = 0) -> Path:
    path.write_bytes(struct.pack("<4sIQQ", b"GGUF", 3, n_t, n_kv) + kv + tensors)
    return path


def test_bounds_of_the_specification_and_of_llama_cpp(tmp_path: Path) -> None:
    too_long_key = struct.pack("<Q", 65_536)  # docs/gguf.md: keys are at most 2^16 - 1 bytes
    with pytest.raises(GgufError, match=r"at most 65535"):
        read_gguf([_one_kv_file(tmp_path / "k.gguf", too_long_key + b"x" * 65_536)])
    arch = gguf_string(b"general.architecture") + struct.pack("<I", 8) + gguf_string(b"llama")
    layers = gguf_string(b"llama.block_count") + struct.pack("<I", 4) + struct.pack("<I", 1)
    # GGML_MAX_NAME is 64 with the terminating zero: a 64-byte name is refused.
    name = gguf_string(b"t" * 64) + struct.pack("<I1QIQ", 1, 4, 0, 0)
    with pytest.raises(GgufError, match=r"string of 64 bytes where at most 63"):
        read_gguf([_one_kv_file(tmp_path / "n.gguf", arch + layers, 2, name, 1)])
    odd = gguf_string(b"x") + struct.pack("<I", 13)
    with pytest.raises(GgufError, match="unknown value type 13"):
        read_gguf([_one_kv_file(tmp_path / "t.gguf", odd)])
    huge = gguf_string(b"x") + struct.pack("<IIQ", 9, 6, 2**40)  # 4 TiB of floats
    with pytest.raises(GgufError, match=r"metadata exceeds|truncated"):
        read_gguf([_one_kv_file(tmp_path / "h.gguf", huge)], cap=MiB)


def test_a_read_past_its_deadline_stops_and_is_retried_next_scan(tmp_path: Path) -> None:
    path = tmp_path / "slow.gguf"
    write_array_gguf(path, 100_000)
    with pytest.raises(ReadTimeout):
        read_gguf([path], deadline=time.monotonic() - 1)
    store = tmp_path / "store" / "acme" / "m"
    store.mkdir(parents=True)
    write_gguf(store / "m-Q8_0.gguf")
    # A deadline already spent: the model is skipped, and its failure is not remembered.
    spent = ScanLimits(read_timeout_s=-1.0)
    index, cache = build_index((tmp_path / "store",), spent)
    assert index.entries == {}
    assert "deadline" in index.skipped[0].reason
    assert cache == {}
    index, _ = build_index((tmp_path / "store",), ScanLimits(), index, cache)
    assert index.get("acme/m:Q8_0") is not None


def test_a_store_indexes_at_most_max_models(tmp_path: Path) -> None:
    for i in range(5):
        directory = tmp_path / "org" / f"m{i}"
        directory.mkdir(parents=True)
        write_gguf(directory / f"m{i}-Q8_0.gguf")
    index, _ = build_index((tmp_path,), ScanLimits(max_models=3))
    assert len(index.entries) == 3
    assert not index.complete
    assert sum("model limit (3)" in s.reason for s in index.skipped) == 2


# --------------------------------------------------------------------------------------------
# safetensors headers and JSON


def _header_file(path: Path, header: bytes, data: int = 0) -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data)
    return path


def test_a_large_safetensors_metadata_is_skipped_in_constant_memory(tmp_path: Path) -> None:
    def file(pairs: int) -> Path:
        metadata = ",".join(f'"k{i}":""' for i in range(pairs))
        entry = '"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'
        body = ("{" + '"__metadata__":{' + metadata + "}," + entry + "}").encode()
        return _header_file(tmp_path / f"m{pairs}.safetensors", body, 8)

    small, large = file(100_000), file(400_000)
    peak_small, entries_small = peak_bytes(lambda: list(tensor_entries(small)))
    peak_large, entries_large = peak_bytes(lambda: list(tensor_entries(large)))
    assert (
        [(t.name, t.nbytes) for t in entries_large]
        == [("w", 8)]
        == [(t.name, t.nbytes) for t in entries_small]
    )
    assert peak_large < CEILING
    assert peak_large - peak_small < NO_GROWTH


def test_many_tensor_entries_stream_one_at_a_time(tmp_path: Path) -> None:
    def file(count: int) -> Path:
        entries = ",".join(
            f'"t{i}":{{"dtype":"F16","shape":[1],"data_offsets":[{2 * i},{2 * i + 2}]}}'
            for i in range(count)
        )
        return _header_file(
            tmp_path / f"t{count}.safetensors", ("{" + entries + "}").encode(), 2 * count
        )

    small, large = file(40_000), file(160_000)
    peak_small, total_small = peak_bytes(lambda: sum(t.nbytes for t in tensor_entries(small)))
    peak_large, total_large = peak_bytes(lambda: sum(t.nbytes for t in tensor_entries(large)))
    assert (total_small, total_large) == (80_000, 320_000)
    assert peak_large < CEILING
    assert peak_large - peak_small < NO_GROWTH


def test_the_streamed_header_agrees_with_the_safetensors_library(tmp_path: Path) -> None:
    import numpy as np

    tensors = {f"layer.{i}.w": np.zeros((i + 1, 3), dtype=np.float16) for i in range(300)}
    path = tmp_path / "real.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt", "note": "x" * 5000})
    header = read_header(path)
    assert {t.name: t.nbytes for t in header.tensors} == {k: v.nbytes for k, v in tensors.items()}
    assert header.metadata == {"format": "pt", "note": "x" * 5000}
    assert {t.name: t.nbytes for t in tensor_entries(path)} == {
        t.name: t.nbytes for t in header.tensors
    }


@pytest.mark.parametrize(
    "body",
    [
        b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}',  # unterminated
        b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}} trailing',
        b'["not an object"]',
        b'{"w": ' + b'{"a": "' + b"x" * 70_000 + b'"}}',  # one entry over 64 KiB
    ],
)
def test_malformed_or_oversized_headers_are_refused(tmp_path: Path, body: bytes) -> None:
    with pytest.raises(HeaderError):
        list(tensor_entries(_header_file(tmp_path / "bad.safetensors", body, 4)))


@pytest.mark.parametrize(
    "raw",
    [
        b"[" + b"{}," * 100_000 + b"{}]",  # many empty dicts
        b"[" + b"[]," * 100_000 + b"[]]",  # many empty lists
        json.dumps({f"key{i}": i * 1.5 for i in range(50_000)}).encode(),  # distinct keys, floats
        json.dumps([str(i) for i in range(100_000)]).encode(),  # short strings
        json.dumps([10**20 + i for i in range(100_000)]).encode(),  # big ints
        json.dumps({"a": [[[[i]]] for i in range(20_000)]}).encode(),  # nesting
        json.dumps({"s": "é" * 200_000}).encode(),  # one long non-ASCII string
    ],
)
def test_parse_cost_bounds_what_json_loads_allocates(raw: bytes) -> None:
    peak, value = peak_bytes(lambda: json.loads(raw))
    assert not isinstance(value, Exception)
    assert peak <= parse_cost(raw)


def test_a_json_bomb_config_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    raw = b"[" + b"{}," * 2_000_000 + b"{}]"  # 6 MB: about 130 MiB parsed
    with pytest.raises(JsonBoundError, match="budget"):
        loads_bounded(raw, 32 * MiB)
    model = tmp_path / "org" / "bomb"
    model.mkdir(parents=True)
    (model / "config.json").write_bytes(raw)
    peak, result = peak_bytes(lambda: build_index((tmp_path,), ScanLimits(read_timeout_s=3600)))
    index, _ = result
    assert index.entries == {}
    assert "budget" in index.skipped[0].reason
    assert peak < len(raw) + CEILING  # the raw bytes, never their parse


def test_the_index_holds_its_entries_to_a_memory_budget(tmp_path: Path) -> None:
    # Configs of 1024 layers (the reader's bound) make large architectures; the index stops
    # taking, and reading, models once its budget is spent.
    from service.estimator.memo import deep_size

    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 1024,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
    }
    for i in range(6):
        directory = tmp_path / "org" / f"deep{i}"
        directory.mkdir(parents=True)
        (directory / "config.json").write_text(json.dumps({**config, "intermediate_size": 512 + i}))
    whole, _ = build_index((tmp_path,))
    sizes = [deep_size(e) for e in whole.all()]
    assert len(sizes) == 6
    budget = sum(sorted(sizes)[:2]) + min(sizes) // 2  # room for two entries, not three
    index, cache = build_index((tmp_path,), ScanLimits(max_index_bytes=budget))
    assert len(index.entries) == 2
    assert sum(deep_size(e) for e in index.all()) <= budget
    assert not index.complete
    assert sum("memory budget" in s.reason for s in index.skipped) == 4
    assert len(cache) <= 3  # the models past the budget were not even read


# --------------------------------------------------------------------------------------------
# model.safetensors.index.json: its weight_map streamed, its shards bounded


def _index_file(directory: Path, tensors: int, shards: int, total: int) -> Path:
    """An index of ``tensors`` entries over ``shards`` shard files (none of them present),
    written as text so that the test never holds the map as objects."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(TINY_CONFIG))
    entries = ",".join(
        f'"model.layers.{i % 2}.w{i}.weight":"model-{i % shards:05d}-of-{shards:05d}.safetensors"'
        for i in range(tensors)
    )
    text = '{"metadata":{"total_size":' + str(total) + '},"weight_map":{' + entries + "}}"
    path = directory / "model.safetensors.index.json"
    path.write_text(text)
    return path


TINY_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
}


def test_a_large_weight_map_is_read_in_constant_memory(tmp_path: Path) -> None:
    # 100k and 400k tensors over 8 shards (a 400k-entry map is about 30 MB of JSON; parsed
    # whole, hundreds of MiB): the index keeps 8 shard names, whatever the map's length.
    def scan(tensors: int) -> tuple[int, Any]:
        root = tmp_path / str(tensors)
        _index_file(root / "org" / "sharded", tensors, 8, 123_456)
        return peak_bytes(lambda: build_index((root,), ScanLimits(read_timeout_s=3600)))

    peak_small, (small, _) = scan(100_000)
    peak_large, (large, _) = scan(400_000)
    for index in (small, large):
        entry = index.get("org/sharded")
        assert entry is not None and entry.checkpoint is not None
        assert entry.checkpoint.total_bytes == 123_456  # no shard present: the index's total
        assert any("8 shard(s)" in n for n in entry.notes)
    assert peak_large < CEILING
    assert peak_large - peak_small < NO_GROWTH


def test_an_index_naming_too_many_shards_is_ignored(tmp_path: Path) -> None:
    from service.model_store.index import _MAX_SHARDS

    _index_file(tmp_path / "org" / "scattered", _MAX_SHARDS + 1, _MAX_SHARDS + 1, 10**9)
    index, _ = build_index((tmp_path,), ScanLimits(read_timeout_s=3600))
    entry = index.get("org/scattered")
    assert entry is not None  # the config still describes the model
    assert any(f"more than {_MAX_SHARDS} shard files" in n for n in entry.notes)
