"""The store's index over real directories: layouts, ids, exact bytes, bad files, rescans."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from service.model_store import ModelStore, ScanLimits, WalkLimits
from service.model_store.index import build_index
from tests.model_store.files import (
    TINY_LLAMA,
    into_hub_cache,
    save_tiny_llama,
    write_config,
    write_gguf,
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    directory = tmp_path_factory.mktemp("saved")
    return directory, save_tiny_llama(directory)


def test_hub_cache_model_with_its_revision_and_exact_bytes(
    tmp_path: Path, saved: tuple[Path, int]
) -> None:
    source, nbytes = saved
    snapshot = into_hub_cache(tmp_path, "acme/tiny-llama", source, revision="c0ffee")
    assert (snapshot / "config.json").is_symlink()
    index, _ = build_index((tmp_path,))
    entry = index.get("ACME/Tiny-Llama")  # ids match in any case
    assert entry is not None
    assert entry.id == "acme/tiny-llama"
    assert entry.revision == "c0ffee"
    assert entry.path == "models--acme--tiny-llama/snapshots/c0ffee"
    assert entry.format == "safetensors"
    assert entry.checkpoint is not None
    assert entry.checkpoint.total_bytes == nbytes  # torch's own count of what it saved
    assert entry.architecture.num_layers == TINY_LLAMA["num_hidden_layers"]
    assert index.skipped == ()


def test_plain_directory_gets_its_relative_path_as_id(
    tmp_path: Path, saved: tuple[Path, int]
) -> None:
    source, nbytes = saved
    target = tmp_path / "team" / "my-model"
    target.mkdir(parents=True)
    for f in source.iterdir():
        (target / f.name).write_bytes(f.read_bytes())
    index, _ = build_index((tmp_path,))
    entry = index.get("team/my-model")
    assert entry is not None and entry.revision is None
    assert entry.checkpoint is not None and entry.checkpoint.total_bytes == nbytes


def test_packed_int4_checkpoint_counts_scales_and_zeros(tmp_path: Path) -> None:
    # A GPTQ-style checkpoint written with the safetensors library: packed int4 weights,
    # fp16 scales, int32 zeros and g_idx for each projection, 16-bit norms and embeddings.
    cfg = {**TINY_LLAMA, "model_type": "llama", "torch_dtype": "float16"}
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 32}
    h, f, v = 64, 128, 256
    tensors: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": np.zeros((v, h), np.float16),
        "lm_head.weight": np.zeros((v, h), np.float16),
        "model.norm.weight": np.zeros(h, np.float16),
    }
    shapes = {"q_proj": (h, h), "k_proj": (h, 32), "v_proj": (h, 32), "o_proj": (h, h)}
    shapes |= {"gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}
    for i in range(2):
        for name, (fan_in, fan_out) in shapes.items():
            kind = "self_attn" if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            p = f"model.layers.{i}.{kind}.{name}"
            tensors[f"{p}.qweight"] = np.zeros((fan_in // 8, fan_out), np.int32)
            tensors[f"{p}.qzeros"] = np.zeros((fan_in // 32, fan_out // 8), np.int32)
            tensors[f"{p}.scales"] = np.zeros((fan_in // 32, fan_out), np.float16)
            tensors[f"{p}.g_idx"] = np.zeros(fan_in, np.int32)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"model.layers.{i}.{norm}.weight"] = np.zeros(h, np.float16)
    # An MTP layer past num_hidden_layers, as DeepSeek-V3 stores its own.
    tensors["model.layers.2.eh_proj.weight"] = np.zeros((h, 2 * h), np.float16)
    model = tmp_path / "org" / "tiny-gptq"
    write_config(model, cfg)
    half = len(tensors) // 2
    names = sorted(tensors)
    save_file(
        {k: tensors[k] for k in names[:half]}, str(model / "model-00001-of-00002.safetensors")
    )
    save_file(
        {k: tensors[k] for k in names[half:]}, str(model / "model-00002-of-00002.safetensors")
    )
    index, _ = build_index((tmp_path,))
    entry = index.get("org/tiny-gptq")
    assert entry is not None and entry.checkpoint is not None
    mtp = tensors["model.layers.2.eh_proj.weight"].nbytes
    assert entry.checkpoint.component("mtp") == mtp
    assert entry.checkpoint.component("text") == sum(t.nbytes for t in tensors.values()) - mtp


def test_gguf_files_by_quant_and_split(tmp_path: Path) -> None:
    repo = tmp_path / "bartowski" / "Tiny-GGUF"
    repo.mkdir(parents=True)
    q8 = write_gguf(repo / "Tiny-Q8_0.gguf")
    import gguf

    q4 = write_gguf(
        repo / "Tiny-Q4_0.gguf",
        matrix_type=gguf.GGMLQuantizationType.Q4_0,
        file_type=gguf.LlamaFileType.MOSTLY_Q4_0,
        output=False,
    )
    names = sorted(q8)
    first = tuple(names[: len(names) // 2])
    (repo / "Q5").mkdir()
    part1 = write_gguf(repo / "Q5" / "Tiny-Q5_0-00001-of-00002.gguf", split=(1, 2), tensors=first)
    rest = tuple(names[len(names) // 2 :])
    part2 = write_gguf(repo / "Q5" / "Tiny-Q5_0-00002-of-00002.gguf", split=(2, 2), tensors=rest)
    write_gguf(repo / "Tiny-Q3_K-00001-of-00002.gguf", split=(1, 2), tensors=first)
    (repo / "mmproj-Tiny-F16.gguf").write_bytes(b"GGUF")  # a projector: not a model
    index, _ = build_index((tmp_path,))
    a = index.get("bartowski/tiny-gguf:q8_0")
    assert a is not None and a.checkpoint is not None and a.checkpoint.gguf is not None
    assert a.checkpoint.total_bytes == sum(q8.values())
    b = index.get("bartowski/Tiny-GGUF:Q4_0")
    assert b is not None and b.checkpoint is not None
    assert b.checkpoint.total_bytes == sum(q4.values())
    assert b.architecture.tie_word_embeddings
    c = index.get("bartowski/Tiny-GGUF:Q5_0")
    assert c is not None and c.checkpoint is not None
    assert c.checkpoint.total_bytes == sum(part1.values()) + sum(part2.values())
    assert index.get("bartowski/Tiny-GGUF:Q3_K") is None
    reasons = {s.path: s.reason for s in index.skipped}
    assert "1 of 2 parts" in reasons["bartowski/Tiny-GGUF/Tiny-Q3_K.gguf"]
    assert not any("mmproj" in p for p in reasons)


def test_bad_files_are_skipped_with_a_logged_reason(
    tmp_path: Path, saved: tuple[Path, int], caplog: pytest.LogCaptureFixture
) -> None:
    source, _ = saved
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    good = root / "ok" / "model"
    good.mkdir(parents=True)
    for f in source.iterdir():
        (good / f.name).write_bytes(f.read_bytes())
        (outside / f.name).write_bytes(f.read_bytes())
    # A link out of the root (a directory and a file).
    os.symlink(outside, root / "escaped")
    linked = root / "ok" / "linked-file"
    write_config(linked, {**TINY_LLAMA, "model_type": "llama"})
    os.symlink(outside / "model.safetensors", linked / "model.safetensors")
    # A config that is not JSON; a truncated header; a header over the cap.
    write_config(root / "ok" / "bad-config", {})
    (root / "ok" / "bad-config" / "config.json").write_text("{not json")
    truncated = root / "ok" / "truncated"
    write_config(truncated, {**TINY_LLAMA, "model_type": "llama"})
    (truncated / "model.safetensors").write_bytes(struct.pack("<Q", 500) + b"{")
    huge = root / "ok" / "huge-header"
    write_config(huge, {**TINY_LLAMA, "model_type": "llama"})
    (huge / "model.safetensors").write_bytes(struct.pack("<Q", 20_000) + b" " * 20_000)
    limits = ScanLimits(max_safetensors_header_bytes=10_000)
    with caplog.at_level(logging.WARNING, logger="service.model_store"):
        index, _ = build_index((root,), limits)
    assert [e.id for e in index.all()] == ["ok/linked-file", "ok/model"]
    # The link's target was never read: that model is indexed from its config alone.
    assert index.get("ok/linked-file").format == "config"  # type: ignore[union-attr]
    reasons = {s.path: s.reason for s in index.skipped}
    assert reasons["escaped"] == "link target outside the root"
    assert reasons["ok/linked-file/model.safetensors"] == "link target outside the root"
    assert "not JSON" in reasons["ok/bad-config"]
    assert "past the end" in reasons["ok/truncated"]
    assert "exceeds the cap" in reasons["ok/huge-header"]
    logged = " ".join(r.getMessage() for r in caplog.records)
    for path in ("escaped", "ok/bad-config", "ok/truncated", "ok/huge-header"):
        assert path in logged


def test_entry_budget_stops_the_walk(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"d{i:02}").mkdir()
    index, _ = build_index((tmp_path,), ScanLimits(walk=WalkLimits(max_entries=10)))
    assert not index.complete
    assert any("stopped after 10 entries" in s.reason for s in index.skipped)


def test_rescans_pick_up_new_models_and_reuse_unchanged_headers(
    tmp_path: Path, saved: tuple[Path, int]
) -> None:
    source, _ = saved
    seen = []
    store = ModelStore((tmp_path,), rescan_interval_s=3600, on_change=seen.append)
    assert store.scan().entries == {}
    into_hub_cache(tmp_path, "acme/tiny-llama", source)
    first = store.scan()
    assert [e.id for e in first.all()] == ["acme/tiny-llama"]
    assert first.header_bytes > 0
    again = store.scan()
    assert again.header_bytes == 0  # unchanged files: their parses are reused
    assert len(seen) == 1  # the third scan changed nothing
    store.stop()


def test_background_thread_indexes_without_blocking(
    tmp_path: Path, saved: tuple[Path, int]
) -> None:
    source, _ = saved
    into_hub_cache(tmp_path, "acme/tiny-llama", source)
    store = ModelStore((tmp_path,), rescan_interval_s=3600)
    store.start()
    try:
        for _ in range(200):
            if store.scans:
                break
            import time

            time.sleep(0.05)
        assert store.index.get("acme/tiny-llama") is not None
    finally:
        store.stop()


def _sharded_tiny_llama(directory: Path) -> tuple[int, list[str]]:
    """A tiny Llama saved in several shards with its index; (torch's byte count, shards)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA)).to(torch.bfloat16)
    model.save_pretrained(directory, max_shard_size="60KB")
    nbytes = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    shards = sorted(p.name for p in directory.glob("model-*.safetensors"))
    return nbytes, shards


def test_shards_missing_from_the_directory_come_from_the_index_total(tmp_path: Path) -> None:
    target = tmp_path / "team" / "partial"
    nbytes, shards = _sharded_tiny_llama(target)
    assert len(shards) >= 2 and (target / "model.safetensors.index.json").exists()
    (target / shards[-1]).unlink()  # a download that has not finished
    index, _ = build_index((tmp_path,))
    entry = index.get("team/partial")
    assert entry is not None and entry.checkpoint is not None
    assert entry.checkpoint.total_bytes == nbytes  # torch's count, not the headers present
    assert any("metadata.total_size" in n and "1 shard(s)" in n for n in entry.notes)


def test_an_index_without_shards_gives_the_total(tmp_path: Path) -> None:
    target = tmp_path / "team" / "metadata-only"
    nbytes, shards = _sharded_tiny_llama(target)
    for name in shards:
        (target / name).unlink()
    index, _ = build_index((tmp_path,))
    entry = index.get("team/metadata-only")
    assert entry is not None and entry.format == "safetensors"
    assert entry.checkpoint is not None
    assert entry.checkpoint.components == (("text", nbytes),)


def test_files_the_index_does_not_list_are_not_counted(tmp_path: Path) -> None:
    # Mistral's repositories keep consolidated.safetensors (another packaging of the same
    # weights) beside the transformers shards the index lists.
    target = tmp_path / "team" / "two-packagings"
    nbytes, _ = _sharded_tiny_llama(target)
    save_file(
        {"tok_embeddings.weight": np.zeros((256, 64), np.float16)},
        str(target / "consolidated.safetensors"),
    )
    index, _ = build_index((tmp_path,))
    entry = index.get("team/two-packagings")
    assert entry is not None and entry.checkpoint is not None
    assert entry.checkpoint.total_bytes == nbytes
    assert any("consolidated.safetensors not listed" in n for n in entry.notes)
