"""Weight bytes by format and placement, against hand counts of Llama-3.1-8B's tensors."""

from __future__ import annotations

import pytest

from service.estimator.architecture import Architecture
from service.estimator.errors import InvalidRequest
from service.estimator.inference import InferenceRequest, stage_figures
from service.estimator.weights import pp_layer_partition, weight_layout
from tests.estimator.conftest import LLAMA_8B, catalog_architecture, catalog_config

# Per layer: q 4096², k,v 4096×1024 each, o 4096², gate/up/down 4096×14336, two norms.
LINEAR_PER_LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
NORMS_PER_LAYER = 2 * 4096
EMBED = 128256 * 4096


def test_bf16_matches_parameter_count(llama_8b: Architecture) -> None:
    params = 32 * (LINEAR_PER_LAYER + NORMS_PER_LAYER) + 2 * EMBED + 4096
    assert params == 8_030_261_248  # the published 8.03B
    assert weight_layout(llama_8b).model_bytes == 2 * params


def test_fp8_channel_quantizes_linears_only(llama_8b: Architecture) -> None:
    scales = 32 * 4 * (4096 + 1024 + 1024 + 4096 + 14336 * 2 + 4096)
    expected = 32 * LINEAR_PER_LAYER + scales + 2 * (2 * EMBED + 32 * NORMS_PER_LAYER + 4096)
    assert weight_layout(llama_8b, "fp8-channel").model_bytes == expected


def test_tensor_parallel_halves_layers_and_replicates_norms(llama_8b: Architecture) -> None:
    one = weight_layout(llama_8b, "bf16", 1, 1).per_stage[0]
    two = weight_layout(llama_8b, "bf16", 2, 1)
    norms = 2 * (32 * NORMS_PER_LAYER + 4096)
    assert two.per_stage[0] == (one - norms) // 2 + norms
    assert two.total_bytes == one + norms  # one extra copy of the norms


def test_kv_heads_replicated_beyond_their_count(llama_8b: Architecture) -> None:
    l8 = weight_layout(llama_8b, "bf16", 8, 1).per_stage[0]
    l16 = weight_layout(llama_8b, "bf16", 16, 1).per_stage[0]
    # At TP 16 each rank still holds one whole KV head (128 columns) of k and v.
    kv_16 = 32 * 2 * 4096 * 128 * 2
    kv_8 = 32 * 2 * 4096 * 128 * 2
    assert kv_16 == kv_8  # per-rank K/V unchanged from TP 8 to TP 16
    assert l16 > l8 // 2


def test_pipeline_stages(llama_8b: Architecture) -> None:
    assert pp_layer_partition(32, 3) == (11, 11, 10)  # remainder before the last stage
    assert pp_layer_partition(10, 4) == (2, 3, 3, 2)
    pp2 = weight_layout(llama_8b, "bf16", 1, 2).per_stage
    layer = 2 * (LINEAR_PER_LAYER + NORMS_PER_LAYER)
    assert pp2[0] == 16 * layer + 2 * EMBED
    assert pp2[1] == 16 * layer + 2 * EMBED + 2 * 4096
    with pytest.raises(InvalidRequest):
        pp_layer_partition(32, 33)


def test_vllm_vocab_padding_and_gguf() -> None:
    arch = Architecture.from_hf_config({**catalog_config(LLAMA_8B), "vocab_size": 32016})
    plain = weight_layout(arch, "bf16").per_stage[0]
    padded = weight_layout(arch, "bf16", vocab_padding=64).per_stage[0]
    assert padded - plain == 2 * (32064 - 32016) * 4096 * 2
    gguf = weight_layout(arch, "gguf-q8_0").by_component
    assert gguf["embeddings"] == 32016 * 4096 // 32 * 34  # GGUF quantizes embeddings too


def test_quantization_config_honoured() -> None:
    cfg = {
        **catalog_config(LLAMA_8B),
        "quantization_config": {
            "quant_method": "awq",
            "bits": 4,
            "group_size": 128,
            "zero_point": True,
        },
    }
    arch = Architecture.from_hf_config(cfg)
    lay = weight_layout(arch)
    assert lay.format == "awq-int4"
    assert lay.model_bytes < weight_layout(arch, "bf16").model_bytes * 0.4


def _vllm_weights_per_gpu(arch: Architecture, tp: int) -> int:
    req = InferenceRequest(
        architecture=arch,
        engine="vllm",
        engine_options={"max_model_len": 8192},
        tensor_parallel_size=tp,
    )
    return stage_figures(req)[0].weights


def test_vllm_mla_model_holds_flashinfer_mla_workspace_on_every_gpu() -> None:
    """vLLM validates every MLA backend of the platform's list by importing it, and
    vllm/v1/attention/backends/mla/flashinfer_mla.py allocates a 128 MiB workspace at import:
    each GPU of DeepSeek-V2-Lite holds its weights, the yarn rope cache and that workspace."""
    hidden, vocab, layers, heads = 2048, 102400, 27, 16  # DeepSeek-V2-Lite's config.json
    rope_rows, rope_dim, kv_lora, moe_width, experts = 163840, 64, 512, 1408, 64
    workspace = 128 * 2**20  # vLLM's FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE
    rope = rope_rows * rope_dim * 2  # one shared bf16 cos/sin cache
    for tp in (1, 2, 4):
        attention = (
            heads * (128 + rope_dim) // tp * hidden  # q_proj, column-parallel
            + (kv_lora + rope_dim) * hidden  # kv_a_proj_with_mqa, replicated
            + heads * (128 + 128) // tp * kv_lora  # kv_b_proj, column-parallel
            + hidden * heads * 128 // tp  # o_proj, row-parallel
            + 2 * hidden
            + kv_lora  # norms
        )
        dense_mlp = 3 * 10944 // tp * hidden  # layer 0 (first_k_dense_replace 1)
        moe = experts * 3 * moe_width // tp * hidden + 3 * 2 * moe_width // tp * hidden
        bf16 = layers * attention + dense_mlp + (layers - 1) * moe + 2 * vocab // tp * hidden
        router = (layers - 1) * experts * hidden * 4  # the inventory prices the gate in fp32
        expected = 2 * (bf16 + hidden) + router + rope + workspace
        assert _vllm_weights_per_gpu(catalog_architecture("deepseek-ai/DeepSeek-V2-Lite"), tp) == (
            expected
        )
    # No MLA, no workspace: Llama-3.1-8B holds its weights and its rope cache only.
    llama = catalog_architecture(LLAMA_8B)
    rope_llama = 131072 * 128 * 2
    layout = weight_layout(llama, None, 1, 1, vocab_padding=64)
    assert _vllm_weights_per_gpu(llama, 1) == layout.per_stage[0] + rope_llama
