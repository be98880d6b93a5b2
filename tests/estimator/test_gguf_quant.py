"""llama-quantize's per-tensor types (src/llama-quant.cpp), against cases worked by hand from
its rule, and the bytes of a Q4_K_M file of Llama-3-8B written out tensor by tensor.

The hand-worked type patterns below also agree with llama.cpp's own snapshots of its rule
(ggml-org/llama.cpp tests/snapshots/meta-llama-3.1-70b-instruct.schema, qwen3-14b.schema,
written by tests/test-quant-type-selection.cpp)."""

from __future__ import annotations

import pytest
from gguf.constants import GGMLQuantizationType as T

from service.estimator.engines.llamacpp import gguf_weights_for_preset
from service.estimator.errors import InvalidRequest
from service.estimator.gguf_quant import (
    GgufTensor,
    QuantModel,
    Role,
    converted_tensors,
    get_preset,
    preset_types,
    quant_model,
)
from tests.estimator.conftest import catalog_architecture

DENSE_32 = QuantModel(n_layer=32, n_expert=0, n_gqa=4, tied=False, falcon=False, type_70b=False)
# use_more_bits over 32 layers: i < 4, i >= 28, and (i - 4) % 3 == 2: 6, 9, ..., 27.
MORE_BITS_32 = {0, 1, 2, 3, 28, 29, 30, 31, *range(6, 28, 3)}


def _layer_types(preset: str, role: Role, model: QuantModel = DENSE_32, **kw: bool) -> list[T]:
    tensors = [GgufTensor(role, i, 4096, 4096 * 1024) for i in range(model.n_layer)]
    return list(preset_types(get_preset(preset), model, tensors, imatrix=kw.get("imatrix", False)))


def test_more_bits_layers_of_q4_k_m() -> None:
    assert len(MORE_BITS_32) == 16
    for role in (Role.ATTN_V, Role.FFN_DOWN):
        types = _layer_types("Q4_K_M", role)
        assert {i for i, t in enumerate(types) if t == T.Q6_K} == MORE_BITS_32
        assert {t for i, t in enumerate(types) if i not in MORE_BITS_32} == {T.Q4_K}
    # The other matrices keep the bulk type; Q5_K_M does the same with Q5_K.
    assert set(_layer_types("Q4_K_M", Role.ATTN_Q)) == {T.Q4_K}
    assert set(_layer_types("Q5_K_M", Role.FFN_UP)) == {T.Q5_K}
    assert {i for i, t in enumerate(_layer_types("Q5_K_M", Role.ATTN_V)) if t == T.Q6_K} == (
        MORE_BITS_32
    )


def test_small_and_medium_three_bit_presets() -> None:
    # Q3_K_M: the first two attn_v Q5_K, the rest Q4_K; ffn_down Q5_K below n/16 = 2, else
    # Q4_K (not Falcon); attn_output Q4_K.
    assert _layer_types("Q3_K_M", Role.ATTN_V)[:3] == [T.Q5_K, T.Q5_K, T.Q4_K]
    assert _layer_types("Q3_K_M", Role.FFN_DOWN)[:3] == [T.Q5_K, T.Q5_K, T.Q4_K]
    assert set(_layer_types("Q3_K_M", Role.ATTN_OUTPUT)) == {T.Q4_K}
    # Q4_K_S: the first 4 attn_v and the first n/8 = 4 ffn_down Q5_K.
    assert _layer_types("Q4_K_S", Role.ATTN_V)[3:5] == [T.Q5_K, T.Q4_K]
    assert _layer_types("Q4_K_S", Role.FFN_DOWN)[3:5] == [T.Q5_K, T.Q4_K]
    # Q2_K: attn_v Q4_K with GQA >= 4 (Q3_K below), ffn_down and attn_output Q3_K.
    assert set(_layer_types("Q2_K", Role.ATTN_V)) == {T.Q4_K}
    mha = QuantModel(32, 0, 1, False, False, False)
    assert set(_layer_types("Q2_K", Role.ATTN_V, mha)) == {T.Q3_K}
    assert set(_layer_types("Q2_K", Role.FFN_DOWN)) == {T.Q3_K}


def test_importance_matrix_changes_only_the_first_eighth_of_legacy_ffn_down() -> None:
    assert set(_layer_types("Q4_0", Role.FFN_DOWN)) == {T.Q4_0}
    with_imatrix = _layer_types("Q4_0", Role.FFN_DOWN, imatrix=True)
    assert with_imatrix[:5] == [T.Q4_1] * 4 + [T.Q4_0]
    # IQ4_XS: the first eighth gets Q5_K only without an importance matrix.
    assert _layer_types("IQ4_XS", Role.FFN_DOWN)[3:5] == [T.Q5_K, T.IQ4_XS]
    assert set(_layer_types("IQ4_XS", Role.FFN_DOWN, imatrix=True)) == {T.IQ4_XS}


def test_output_and_a_tied_embedding_take_q6_k() -> None:
    p = get_preset("Q4_K_M")
    embd = GgufTensor(Role.TOKEN_EMBD, None, 4096, 4096 * 1000)
    out = GgufTensor(Role.OUTPUT, None, 4096, 4096 * 1000)
    assert preset_types(p, DENSE_32, [embd, out], imatrix=False) == (T.Q4_K, T.Q6_K)
    tied = QuantModel(32, 0, 4, True, False, False)
    assert preset_types(p, tied, [embd], imatrix=False) == (T.Q6_K,)
    # Q8_0 keeps Q8_0 for the output; 1-D tensors stay F32 whatever the preset.
    q8 = preset_types(get_preset("Q8_0"), DENSE_32, [out], imatrix=False)
    assert q8 == (T.Q8_0,)
    assert preset_types(p, DENSE_32, [GgufTensor(Role.KEPT, 0, 4096, 4096)], imatrix=False) == (
        T.F32,
    )


def test_rows_that_are_not_whole_blocks_fall_back() -> None:
    # 2880 = 11.25 blocks of 256 but 90 of 32 (gpt-oss's width): Q4_K -> Q5_0, Q6_K -> Q8_0,
    # Q3_K -> Q4_0; a width of 100 is not even whole blocks of 32: F16.
    cases = [
        ("Q4_K_M", Role.ATTN_Q, 2880, T.Q5_0),
        ("Q4_K_M", Role.OUTPUT, 2880, T.Q8_0),
        ("Q3_K_S", Role.FFN_UP, 2880, T.Q4_0),
        ("Q5_K_S", Role.FFN_UP, 2880, T.Q5_1),
        ("Q4_K_M", Role.ATTN_Q, 100, T.F16),
    ]
    for preset, role, ne0, expected in cases:
        t = GgufTensor(role, 0 if role is not Role.OUTPUT else None, ne0, ne0 * 64)
        assert preset_types(get_preset(preset), DENSE_32, [t], imatrix=False) == (expected,)


def test_eight_experts_and_seventy_b() -> None:
    mixtral = QuantModel(32, 8, 4, False, False, False)
    assert set(_layer_types("Q4_K_M", Role.ATTN_V, mixtral)) == {T.Q8_0}
    assert set(_layer_types("Q4_K_M", Role.ATTN_K, mixtral)) == {T.Q8_0}
    assert set(_layer_types("Q4_K_M", Role.ATTN_OUTPUT, mixtral)) == {T.Q5_K}
    # A 70B (80 layers, GQA): attn_v that would be Q4_K becomes Q5_K; 40 of 80 get Q6_K.
    seventy = QuantModel(80, 0, 8, False, False, True)
    v = _layer_types("Q4_K_M", Role.ATTN_V, seventy)
    assert (v.count(T.Q6_K), v.count(T.Q5_K)) == (40, 40)
    assert quant_model(catalog_architecture("meta-llama/Llama-3.1-70B-Instruct")).type_70b
    assert not quant_model(catalog_architecture("meta-llama/Llama-3.1-8B")).type_70b


def test_moe_layers_come_from_the_tensor_not_a_counter() -> None:
    # Qwen3-30B-A3B: 48 layers, ffn_down_exps per layer; use_more_bits(i, 48) by layer index:
    # i < 6, i >= 42, or (i - 6) % 3 == 2 (8, 11, ..., 41).
    arch = catalog_architecture("Qwen/Qwen3-30B-A3B")
    tensors = converted_tensors(arch)
    types = preset_types(get_preset("Q4_K_M"), quant_model(arch), tensors, imatrix=False)
    down = {t.layer: ty for t, ty in zip(tensors, types, strict=True) if t.role is Role.FFN_DOWN}
    got = [down[i] for i in (0, 5, 6, 8, 40, 41, 42)]
    assert got == [T.Q6_K, T.Q6_K, T.Q4_K, T.Q6_K, T.Q4_K, T.Q6_K, T.Q6_K]


def test_llama_3_8b_q4_k_m_bytes_by_hand() -> None:
    arch = catalog_architecture("meta-llama/Meta-Llama-3-8B")
    g = gguf_weights_for_preset(arch, "Q4_K_M", imatrix=False)

    def q4k(n: int) -> int:
        return n // 256 * 144

    def q6k(n: int) -> int:
        return n // 256 * 210

    e, kv, ff, vocab = 4096, 1024, 14336, 128256
    base_layer = 2 * q4k(e * e) + q4k(kv * e) + 2 * q4k(ff * e) + 2 * e * 4  # q, o, k, gate, up
    more = q6k(kv * e) + q6k(ff * e)  # attn_v and ffn_down on the 16 use_more_bits layers
    less = q4k(kv * e) + q4k(ff * e)
    assert g.layers[0] == base_layer + more and g.layers[4] == base_layer + less
    assert g.token_embd == q4k(vocab * e) == 295_501_824  # llama.cpp prints 281.81 MiB
    assert g.output == q6k(vocab * e)
    total = g.token_embd + g.output + e * 4 + 32 * base_layer + 16 * (more + less)
    assert g.total_bytes == total
    # Every tensor's rows are whole 512-element rows and 128-byte multiples: no CUDA padding.
    assert sum(g.layers_cuda) == sum(g.layers)


def test_models_the_rule_does_not_cover_are_refused() -> None:
    for model_id in ("deepseek-ai/DeepSeek-V3", "openai/gpt-oss-20b"):
        with pytest.raises(InvalidRequest):
            quant_model(catalog_architecture(model_id))
    with pytest.raises(InvalidRequest, match="not modelled"):
        get_preset("IQ2_M")
