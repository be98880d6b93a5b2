"""MiniCPM (``minicpm``, remote code): MiniCPM4-8B's parameters worked by hand from its config
and vLLM's ``minicpm.py`` layout, its KV bytes per token under each engine, and the
MiniCPM-MoE layout a ``num_experts`` config builds."""

from __future__ import annotations

import dataclasses

import pytest

from service.estimator.inference import InferenceRequest
from service.estimator.inference.request import setup_for
from service.estimator.model import read_config
from service.estimator.model.parameters import count_parameters
from tests.estimator.conftest import catalog_architecture

MINICPM4_8B = "openbmb/MiniCPM4-8B"
MINICPM3_4B = "openbmb/MiniCPM3-4B"


def _request(model: str, engine: str, tp: int = 1) -> InferenceRequest:
    return InferenceRequest(
        architecture=catalog_architecture(model),
        engine=engine,
        sequence_length=4096,
        tensor_parallel_size=tp,
        gpu_memory_bytes=80 * 2**30,
    )


def _kv_bytes_per_token(model: str, engine: str, tp: int) -> int:
    stage = setup_for(_request(model, engine, tp)).stages[-1]
    return stage.kv.layer_token_bytes * stage.kv.layers


def _hand_count(h: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tied: bool):
    """vLLM's MiniCPMForCausalLM: embed_tokens, per layer q/k/v/o (head_dim h // heads, no
    bias), gate/up/down, two RMSNorms; the final norm; lm_head unless tied."""
    d = h // heads
    attention = h * heads * d + 2 * h * kv * d + heads * d * h
    mlp = 3 * h * inter
    per_layer = attention + mlp + 2 * h
    return vocab * h * (1 if tied else 2) + layers * per_layer + h


def test_minicpm4_8b_counts_its_architecture() -> None:
    arch = catalog_architecture(MINICPM4_8B)
    expected = _hand_count(4096, 16384, 32, 32, 2, 73448, tied=False)
    assert expected == 8_185_253_888
    assert count_parameters(arch).total == expected
    # The model card's "8B parameters" is rounded to its one figure.
    assert abs(expected - 8e9) <= 0.5e9


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(("tp", "kv_heads"), [(1, 2), (2, 1), (4, 1)])
def test_minicpm4_8b_kv_bytes_per_token(engine: str, tp: int, kv_heads: int) -> None:
    """K and V of 128 wide heads in bf16 on each of 32 layers; the 2 KV heads split over TP 2
    and are replicated beyond it."""
    assert _kv_bytes_per_token(MINICPM4_8B, engine, tp) == 2 * kv_heads * 128 * 2 * 32


def _config(
    h: int, inter: int, layers: int, heads: int, kv: int, vocab: int, **extra: object
) -> dict[str, object]:
    """A MiniCPM config.json of these widths (the arguments of :func:`_hand_count`)."""
    return {
        "architectures": ["MiniCPMForCausalLM"],
        "model_type": "minicpm",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        **extra,
    }


def test_minicpm_ties_the_head_unless_the_config_says_not() -> None:
    widths = (1024, 4096, 24, 16, 2, 73448)
    tied = count_parameters(read_config(_config(*widths))).total
    assert tied == _hand_count(*widths, tied=True)
    untied = count_parameters(read_config(_config(*widths, tie_word_embeddings=False))).total
    assert untied - tied == 73448 * 1024


def test_minicpm_moe_puts_experts_in_place_of_the_mlp() -> None:
    """MiniCPMMoE: a router without bias (h x E) and E gated experts of intermediate_size."""
    widths = (256, 512, 2, 4, 4, 1000)
    cfg = _config(*widths, num_experts=8, num_experts_per_tok=2)
    dense = _hand_count(*widths, tied=True)
    experts = 2 * (8 * 3 * 256 * 512 + 256 * 8 - 3 * 256 * 512)
    assert count_parameters(read_config(cfg)).total == dense + experts


@pytest.mark.reference
@pytest.mark.slow
def test_minicpm4_8b_has_llamas_tensors() -> None:
    """vLLM's minicpm.py builds Llama's tensors (the muP scalars add none): transformers'
    LlamaForCausalLM on the meta device from the same widths has MiniCPM4-8B's count."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    arch = catalog_architecture(MINICPM4_8B)
    config = transformers.LlamaConfig(
        hidden_size=4096,
        intermediate_size=16384,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=2,
        vocab_size=73448,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    assert count_parameters(arch).total == sum(p.numel() for p in model.parameters())


def test_minicpm3_4b_counts_its_latent_attention() -> None:
    """MiniCPM3Attention: q_a_proj, q_a_layernorm, q_b_proj (40 heads x 96), kv_a_proj_with_mqa
    (256 + 32), kv_a_layernorm, kv_b_proj (40 x (64 + 64)), o_proj (40 x 64); a SwiGLU MLP;
    the head tied."""
    h, heads, q_rank, kv_rank, nope, rope, v = 2560, 40, 768, 256, 64, 32, 64
    attention = (
        h * q_rank + q_rank + q_rank * heads * (nope + rope)
        + h * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v) + heads * v * h
    )  # fmt: skip
    per_layer = attention + 3 * h * 6400 + 2 * h
    expected = 73448 * h + 62 * per_layer + h
    assert expected == 4_073_875_968
    assert count_parameters(catalog_architecture(MINICPM3_4B)).total == expected
    assert abs(expected - 4e9) <= 0.5e9  # the model card's "4B"


@pytest.mark.parametrize(
    ("engine", "tp", "per_token"),
    [
        # SGLang's MLA pool and transformers 5: the latent (256 + 32) on every layer.
        ("sglang", 1, (256 + 32) * 2 * 62),
        ("sglang", 2, (256 + 32) * 2 * 62),
        ("transformers", 1, (256 + 32) * 2 * 62),
        # vLLM's standard Attention: K and V of 96 wide heads (V padded), split by TP.
        ("vllm", 1, 2 * 40 * 96 * 2 * 62),
        ("vllm", 2, 2 * 20 * 96 * 2 * 62),
        # llama.cpp's graph: K of 96 and V of 64 per head, every head (f16).
        ("llama.cpp", 1, 40 * (96 + 64) * 2 * 62),
    ],
)
def test_minicpm3_kv_bytes_per_token_per_engine(engine: str, tp: int, per_token: int) -> None:
    assert _kv_bytes_per_token(MINICPM3_4B, engine, tp) == per_token


def test_minicpm3_llamacpp_caches_expanded_heads() -> None:
    """src/models/minicpm3.cpp: K of 96 and V of 64 per head (f16), 40 heads, per cell."""
    from service.estimator.engines import get_engine
    from service.estimator.engines.llamacpp import LlamaCppEngine

    engine = get_engine("llama.cpp")
    assert isinstance(engine, LlamaCppEngine)
    s = setup_for(_request(MINICPM3_4B, "llama.cpp")).settings
    _, cells, _ = engine.cells(s)
    assert (
        engine.layer_kv_bytes(catalog_architecture(MINICPM3_4B), s, 0) == cells * 40 * (96 + 64) * 2
    )


def test_minicpm3_v_head_dim_defaults_to_the_head_size_and_says_so() -> None:
    cfg = {
        "model_type": "minicpm3",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "q_lora_rank": 64,
        "kv_lora_rank": 32,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
    }
    arch = read_config(cfg)
    assert arch.mla is not None and arch.mla.v_head_dim == 256 // 4
    assert any(a.startswith("v_head_dim not in config") for a in arch.assumptions)
    assert read_config({**cfg, "v_head_dim": 32}).mla.v_head_dim == 32  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("engine", "layer_bytes"),
    [("vllm", 2 * 40 * 96 * 2), ("sglang", (256 + 32) * 2)],
)
def test_minicpm3_eagle_head_caches_as_its_engine_caches_the_target(
    engine: str, layer_bytes: int
) -> None:
    """An EAGLE head is one decoder layer shaped like the target's: its KV per token is one of
    the target's layers as the engine caches it (vLLM: K and V of 40 heads, V padded to 96;
    SGLang: the latent)."""
    from service.estimator.inference.evaluate import estimate_inference
    from service.estimator.speculative import Speculative

    plain = _request(MINICPM3_4B, engine)
    eagle = dataclasses.replace(plain, speculative=Speculative(method="eagle"))
    per_token = "kv_cache_bytes_per_token_per_gpu"
    added = estimate_inference(eagle).details[per_token]
    assert added - estimate_inference(plain).details[per_token] == layer_bytes
