"""llama.cpp's allocations at context creation, against hand calculations from its source
(src/llama-model.cpp load_tensors, src/llama-kv-cache.cpp, src/llama-context.cpp)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from service.estimator.checkpoint import CheckpointWeights, GgufWeights
from service.estimator.engines import EngineContext, get_engine
from service.estimator.engines.llamacpp import LlamaCppEngine
from service.estimator.errors import InvalidRequest
from service.estimator.inference import InferenceRequest, estimate_inference
from service.estimator.model import Architecture
from service.estimator.weights import weight_layout
from tests.estimator.conftest import LLAMA_8B, catalog_architecture

MIB = 2**20


def _estimate(arch: Architecture, checkpoint: CheckpointWeights | None = None, **options: Any):
    return estimate_inference(
        InferenceRequest(
            architecture=arch,
            engine="llama.cpp",
            engine_options=options,
            sequence_length=None,
            checkpoint=checkpoint,
        )
    )


def _settings(arch: Architecture, **options: Any):
    return get_engine("llama.cpp").resolve(options, EngineContext(arch, None))


def test_kv_cache_of_llama_3_8b() -> None:
    # 32 layers, 8 KV heads × 128: f16 K and V rows of 1024 × 2 bytes per cell.
    arch = catalog_architecture(LLAMA_8B)
    e = _estimate(arch, n_ctx=8192, n_parallel=1)
    assert e.per_gpu["kv_cache"] == 32 * 8192 * 2 * 1024 * 2 == 2**30
    # q8_0: 34 bytes per block of 32 (gguf's GGML_QUANT_SIZES), K and V, with flash attention.
    e = _estimate(arch, n_ctx=8192, cache_type_k="q8_0", cache_type_v="q8_0", n_parallel=1)
    assert e.per_gpu["kv_cache"] == 32 * 8192 * 2 * (1024 // 32 * 34)
    # n_ctx is rounded up to 256 cells.
    assert _estimate(arch, n_ctx=8000, n_parallel=1).per_gpu["kv_cache"] == 2**30


def test_slots_unified_or_per_slot() -> None:
    arch = catalog_architecture(LLAMA_8B)
    per_cell = 32 * 1024 * 2 * 2
    # Default: 4 slots sharing one cache of n_ctx cells.
    s = _settings(arch, n_ctx=8192)
    assert (s["n_parallel"], s["kv_unified"]) == (4, True)
    assert _estimate(arch, n_ctx=8192).per_gpu["kv_cache"] == 8192 * per_cell
    # Three slots of their own: ceil(8192 / 3) = 2731 -> 2816 cells each (256-aligned).
    s = _settings(arch, n_ctx=8192, n_parallel=3)
    assert s["kv_unified"] is False
    assert LlamaCppEngine.cells(s) == (3, 2816, 3 * 2816)
    assert _estimate(arch, n_ctx=8192, n_parallel=3).per_gpu["kv_cache"] == 3 * 2816 * per_cell


def test_default_context_is_the_trained_one() -> None:
    arch = catalog_architecture(LLAMA_8B)
    assert _settings(arch)["n_ctx"] == arch.max_position_embeddings == 131072


def test_quantized_v_needs_flash_attention() -> None:
    arch = catalog_architecture(LLAMA_8B)
    with pytest.raises(InvalidRequest) as err:
        _estimate(arch, n_ctx=4096, cache_type_v="q4_0", flash_attn=False)
    assert err.value.field == "engine_options.cache_type_v"
    # A quantized K alone is fine without it.
    assert _estimate(arch, n_ctx=4096, cache_type_k="q4_0", flash_attn=False).total_bytes > 0


def test_compute_buffer_without_flash_attention() -> None:
    # u = 512 tokens over 8192 cells: K·Q of 32 heads in f32 (512 MiB), the f32 mask (16 MiB),
    # the V-cache row indices (512 × 1024 × 8 = 4 MiB) and 2(E + Q)·u f32 (32 MiB).
    arch = catalog_architecture(LLAMA_8B)
    e = _estimate(arch, n_ctx=8192, n_parallel=1, flash_attn=False)
    assert e.per_gpu["activations"] == (512 + 16 + 4 + 32) * MIB
    # At 512 cells and 512 logit rows the logits set the peak: 128256 × 512 × 4 + E·u·4.
    e = _estimate(arch, n_ctx=512, n_parallel=1, flash_attn=False, n_outputs_max=512)
    assert e.per_gpu["activations"] == 128256 * 512 * 4 + 4096 * 512 * 4


def test_compute_buffer_with_flash_attention_is_the_ffn_peak() -> None:
    # With flash attention and one logit row: 3·F·u + 3·E·u f32 values and the f16 mask.
    arch = catalog_architecture(LLAMA_8B)
    e = _estimate(arch, n_ctx=8192, n_parallel=1)
    expected = 3 * 14336 * 512 * 4 + 3 * 4096 * 512 * 4 + 8192 * 512 * 2
    assert e.per_gpu["activations"] == expected


GGUF = GgufWeights(
    file_type="Q4_K_M",
    layers=(1000, 2000, 3000),
    layers_cuda=(1024, 2048, 3072),
    token_embd=500,
    token_embd_cuda=512,
    output=700,
    output_cuda=768,
    output_norm=40,
    output_norm_cuda=128,
)


def _arch_of_three_layers() -> Architecture:
    from service.estimator.model import read_config

    return read_config(
        {
            "model_type": "llama",
            "hidden_size": 256,
            "intermediate_size": 512,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 1000,
            "max_position_embeddings": 1024,
        }
    )


@pytest.mark.parametrize(
    ("ngl", "gpu", "host"),
    [
        # -ngl 0: everything in CPU buffers.
        (0, 0, 500 + 1000 + 2000 + 3000 + 700 + 40),
        # -ngl 1: the output layer (and the final norm) first.
        (1, 768 + 128, 500 + 1000 + 2000 + 3000),
        # -ngl 2: the output layer and the last repeating layer.
        (2, 768 + 128 + 3072, 500 + 1000 + 2000),
        # all (and more than all): every layer; token_embd stays on the CPU.
        (4, 768 + 128 + 1024 + 2048 + 3072, 500),
        (999, 768 + 128 + 1024 + 2048 + 3072, 500),
    ],
)
def test_layers_offloaded_output_first(ngl: int, gpu: int, host: int) -> None:
    arch = _arch_of_three_layers()
    s = _settings(arch, n_gpu_layers=ngl)
    split = get_engine("llama.cpp").place_weights(
        arch, weight_layout(arch), CheckpointWeights("gguf", (("text", 0),), gguf=GGUF), s
    )
    assert split is not None
    assert split.per_stage == (gpu,)
    assert split.host_bytes == host


def test_tied_output_is_a_gpu_copy_of_the_embedding() -> None:
    arch = _arch_of_three_layers()
    tied = GgufWeights(**{**_fields(GGUF), "output": 0, "output_cuda": 0})
    split = get_engine("llama.cpp").place_weights(
        arch, weight_layout(arch), CheckpointWeights("gguf", (), gguf=tied), _settings(arch)
    )
    assert split is not None
    assert split.per_stage == (512 + 128 + 1024 + 2048 + 3072,)
    assert split.host_bytes == 500


def _fields(w: GgufWeights) -> Mapping[str, Any]:
    return {k: getattr(w, k) for k in w.__dataclass_fields__}


def test_cpu_layers_keep_their_kv_in_host_memory() -> None:
    arch = _arch_of_three_layers()
    # 2 of 3 layers on the CPU (-ngl 2: output + layer 2): their KV is host memory.
    e = _estimate(arch, CheckpointWeights("gguf", (), gguf=GGUF), n_gpu_layers=2, n_ctx=1024)
    per_layer_kv = 1024 * 2 * (2 * 64 * 2)
    assert e.per_gpu["kv_cache"] == per_layer_kv
    assert e.cpu_bytes >= 500 + 1000 + 2000 + 2 * per_layer_kv
    # Exactly: the host weights, the CPU layers' KV and the host compute buffer, which holds
    # the graph inputs of one micro-batch (n_ubatch 512 by default): the embedded tokens in
    # f32 (256 wide) and the f32 attention mask over the 1024 KV cells.
    host_compute = 256 * 512 * 4 + 1024 * 512 * 4
    assert e.cpu_bytes == 500 + 1000 + 2000 + 2 * per_layer_kv + host_compute


def test_converted_checkpoint_in_bf16() -> None:
    # A bf16 Hugging Face checkpoint converts to BF16 matrices and F32 norms; the GPU holds
    # all but the token embedding (128256 × 4096 × 2 bytes on the CPU).
    arch = catalog_architecture(LLAMA_8B)
    e = _estimate(arch, n_ctx=4096)
    assert e.cpu_bytes >= 128256 * 4096 * 2
    layout = weight_layout(arch)
    # bf16 everywhere minus the embedding, plus the f32 norms' extra 2 bytes per element.
    norms = (2 * 32 + 1) * 4096
    expected = layout.model_bytes - 128256 * 4096 * 2 + norms * 2
    assert abs(e.per_gpu["weights"] - expected) < 128 * 400  # within 128 B of alignment per tensor


def test_engine_args_are_llama_server_flags() -> None:
    arch = catalog_architecture(LLAMA_8B)
    args = get_engine("llama.cpp").command_args(_settings(arch, n_ctx=8192), 1, 1, "auto")
    assert args[:4] == ["--n-gpu-layers", "33", "--ctx-size", "8192"]  # 32 layers + output
    assert "--kv-unified" in args


def test_several_gpus_split_layers_not_tensors() -> None:
    arch = catalog_architecture(LLAMA_8B)
    req = InferenceRequest(
        architecture=arch,
        engine="llama.cpp",
        engine_options={"n_ctx": 4096, "n_parallel": 1},
        sequence_length=None,
        tensor_parallel_size=2,
    )
    with pytest.raises(InvalidRequest) as err:
        estimate_inference(req)
    assert err.value.field == "tensor_parallel_size"
    # Two GPUs by layers: 16 layers each, the second also the output layer; each holds the
    # KV of its own 16 layers (4096 cells × 16 × 4096 bytes).
    import dataclasses

    e = estimate_inference(
        dataclasses.replace(req, tensor_parallel_size=1, pipeline_parallel_size=2)
    )
    assert e.per_gpu["kv_cache"] == 4096 * 16 * 4096


def test_a_sequence_longer_than_a_slot_is_refused() -> None:
    arch = catalog_architecture(LLAMA_8B)
    req = InferenceRequest(
        architecture=arch,
        engine="llama.cpp",
        engine_options={"n_ctx": 8192, "n_parallel": 4},
        sequence_length=4096,
    )
    with pytest.raises(InvalidRequest) as err:
        estimate_inference(req)  # 4 slots of their own: 2048 cells each
    assert err.value.field == "sequence_length" and "n_ctx" in err.value.detail
