"""Reading safetensors headers and GGUF tensor infos from real files, without tensor data."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from service.estimator.ggml import cuda_alloc_bytes
from service.model_store.gguf_file import GgufError, metadata_size, quant_tag, read_gguf
from service.model_store.safetensors_header import HeaderError, read_header
from tests.model_store.files import write_gguf


def test_header_agrees_with_the_safetensors_library(tmp_path: Path) -> None:
    tensors = {
        "a.qweight": np.zeros((64, 256), dtype=np.int32),
        "a.scales": np.zeros((4, 256), dtype=np.float16),
        "b": np.zeros((3, 5, 7), dtype=np.float32),
    }
    path = tmp_path / "m.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    header = read_header(path)
    assert {t.name: t.nbytes for t in header.tensors} == {k: v.nbytes for k, v in tensors.items()}
    assert header.metadata == {"format": "pt"}
    with safe_open(str(path), framework="numpy") as f:
        for t in header.tensors:
            piece = f.get_slice(t.name)
            assert tuple(piece.get_shape()) == t.shape
            assert piece.get_dtype() == t.dtype
    # Data bytes = file size minus the 8-byte length and the header.
    assert header.data_bytes == path.stat().st_size - header.header_bytes


def test_truncated_and_oversized_headers_are_refused(tmp_path: Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x02")
    with pytest.raises(HeaderError, match="8-byte"):
        read_header(short)
    past_end = tmp_path / "past.safetensors"
    past_end.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(HeaderError, match="past the end"):
        read_header(past_end)
    big = tmp_path / "big.safetensors"
    body = json.dumps({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    big.write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * 4)
    assert read_header(big).data_bytes == 4
    with pytest.raises(HeaderError, match="exceeds the cap"):
        read_header(big, max_header_bytes=len(body) - 1)
    lying = tmp_path / "lying.safetensors"
    body = json.dumps({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 400]}}).encode()
    lying.write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * 4)
    with pytest.raises(HeaderError, match="data_offsets"):
        read_header(lying)


def test_gguf_bytes_per_layer_match_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "Tiny-Q8_0.gguf"
    written = write_gguf(path)
    model = read_gguf([path])
    w = model.weights
    assert w.total_bytes == sum(written.values())
    layer0 = sum(b for n, b in written.items() if n.startswith("blk.0."))
    assert w.layers == (layer0, layer0)
    assert w.token_embd == written["token_embd.weight"]
    assert w.output == written["output.weight"]
    assert w.output_norm == written["output_norm.weight"]
    # Q8_0: 34 bytes per block of 32; the 256-wide rows are not a multiple of 512, so the
    # CUDA backend pads each quantized tensor by 256 more elements (8 blocks), then aligns to
    # 128 bytes: 69632 + 272 = 69904 -> 547 × 128.
    q = 256 * 256 // 32 * 34
    assert q + 8 * 34 == 69904
    assert cuda_alloc_bytes(gguf.GGMLQuantizationType.Q8_0, 256 * 256, 256) == 547 * 128
    # What the file puts on the GPU, tensor by tensor as above (Q8_0 matrices padded and
    # aligned, f32 norms aligned): the embedding (320 × 256: 87040 + 272 -> 683 × 128), the
    # Q6_K output (320 × 256: 210 bytes per 256, 67200 + 210 -> 527 × 128), the f32 norm.
    assert w.token_embd_cuda == 683 * 128
    assert w.output_cuda == 527 * 128
    assert w.output_norm_cuda == 256 * 4
    assert w.layers_cuda[0] == w.layers_cuda[1] >= layer0
    assert model.config["num_hidden_layers"] == 2
    assert model.config["hidden_size"] == 256
    assert model.config["num_key_value_heads"] == 2
    assert model.config["vocab_size"] == 320
    assert model.config["tie_word_embeddings"] is False
    assert model.file_type == "Q8_0"


def test_gguf_reader_reads_no_tensor_data(tmp_path: Path) -> None:
    # A file whose tensor data is 1 GiB of holes: reading it must not bring that into memory.
    path = tmp_path / "big.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(4096)
    writer.add_head_count(32)
    writer.add_head_count_kv(8)
    writer.add_feed_forward_length(14336)
    n = 2**30 // 2
    writer.add_tensor_info("token_embd.weight", (n // 4096, 4096), np.dtype(np.float16), n * 2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    size = metadata_size(path)
    with path.open("r+b") as f:
        f.truncate(-(-size // 32) * 32 + n * 2)  # sparse: the data region is never written

    def rss() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    before = rss()
    model = read_gguf([path])
    assert model.weights.token_embd == n * 2
    assert rss() - before < 64 * 2**20


def test_gguf_metadata_cap_and_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path)
    size = metadata_size(path)
    with pytest.raises(GgufError, match="metadata exceeds"):
        read_gguf([path], cap=size - 1)
    truncated = tmp_path / "t.gguf"
    truncated.write_bytes(path.read_bytes()[: size // 2])
    with pytest.raises(GgufError):
        read_gguf([truncated])
    other = tmp_path / "o.gguf"
    write_gguf(other, arch="rwkv6")
    with pytest.raises(GgufError, match="not supported"):
        read_gguf([other])


@pytest.mark.parametrize(
    ("name", "tag"),
    [
        ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("qwen2.5-7b-instruct-q8_0.gguf", "Q8_0"),
        ("Qwen3-235B-A22B-UD-Q4_K_XL-00001-of-00003.gguf", "Q4_K_XL"),
        ("model.IQ4_XS.gguf", "IQ4_XS"),
        ("gemma-3-4b-it-BF16.gguf", "BF16"),
        ("model.gguf", None),
    ],
)
def test_quant_tag_of_a_file_name(name: str, tag: str | None) -> None:
    assert quant_tag(name) == tag
