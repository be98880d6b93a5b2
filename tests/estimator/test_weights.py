"""Weight bytes by format and placement, against hand counts of Llama-3.1-8B's tensors."""

from __future__ import annotations

import pytest

from service.estimator.errors import InvalidRequest
from service.estimator.model import Architecture, read_config
from service.estimator.parallel import pp_layer_partition
from service.estimator.weights import Placement, weight_layout
from tests.estimator.conftest import LLAMA_8B, catalog_config

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
    # At TP 16 each rank holds 1/16 of q, o, gate, up, down and of the vocabulary (128256 /
    # 16 = 8016 rows), but a whole KV head (128 columns) of k and of v: 8 KV heads cannot be
    # split 16 ways, so each is replicated on two ranks.
    per_layer = (
        4096 * 256  # q_proj
        + 2 * 4096 * 128  # k_proj, v_proj: one whole head each
        + 256 * 4096  # o_proj
        + 3 * 4096 * 896  # gate, up, down
        + 2 * 4096  # two norms, replicated
    )
    expected = 2 * (32 * per_layer + 2 * 8016 * 4096 + 4096)
    assert weight_layout(llama_8b, "bf16", 16, 1).per_stage[0] == expected
    # At TP 8 (exactly one KV head per rank) the split parts double and the K/V part and the
    # replicated norms stay as they are.
    kv = 2 * 32 * 2 * 4096 * 128
    norms = 2 * (32 * 2 * 4096 + 4096)
    split_16 = expected - kv - norms
    assert weight_layout(llama_8b, "bf16", 8, 1).per_stage[0] == 2 * split_16 + kv + norms


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
    arch = read_config({**catalog_config(LLAMA_8B), "vocab_size": 32016})
    plain = weight_layout(arch, "bf16").per_stage[0]
    padded = weight_layout(arch, "bf16", placement=Placement(vocab_padding=64)).per_stage[0]
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
    arch = read_config(cfg)
    lay = weight_layout(arch)
    assert lay.format == "awq-int4"
    assert lay.model_bytes < weight_layout(arch, "bf16").model_bytes * 0.4
