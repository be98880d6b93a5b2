"""Request fields the chosen engine does not use are named in the answer with the engine
option that decides instead, and llama.cpp's quantization names are accepted as written.

The tables of unused fields are checked against the estimates themselves: every field an
engine declares unused changes nothing when varied, and every workload field it does not
declare changes something. Expected bytes come from the model's config worked by hand.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.estimator.engines import ENGINES

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"  # 32 layers, 8 KV heads of 128, 131072 positions


def post(client: TestClient, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    response = client.post("/v1/estimate/inference", json=body)
    assert response.status_code == status, response.text[:600]
    return response.json()  # type: ignore[no-any-return]


def test_llama_cpp_names_n_ctx_where_sequence_length_is_ignored(client: TestClient) -> None:
    body = {"model": LLAMA_8B, "engine": "llama.cpp", "gpu": "l4", "sequence_length": 8192}
    answer = post(client, body)
    (entry,) = [u for u in answer["unused_fields"] if u["field"] == "sequence_length"]
    # llama-server's -c 0: the model's trained context, 131072 cells.
    assert entry["decided_by"] == ["engine_options.n_ctx"]
    assert entry["engine_values"] == {"n_ctx": 131072}
    assert entry["given"] is True
    assert any(
        a.startswith("sequence_length 8192 is not used by llama.cpp: engine_options.n_ctx (131072)")
        for a in answer["assumptions"]
    )
    # f16 K and V of 8 heads × 128 over 32 layers: 131072 bytes a cell, for every cell.
    cell = 32 * 2 * 8 * 128 * 2
    assert answer["breakdown"]["kv_cache"] == 131072 * cell
    # The field indeed changes nothing; the option it names does.
    other = post(client, {**body, "sequence_length": 1024})
    assert other["breakdown"] == answer["breakdown"]
    sized = post(client, {**body, "engine_options": {"n_ctx": 8192}})
    assert sized["breakdown"]["kv_cache"] == 8192 * cell
    assert sized["engine_options"]["n_ctx"] == 8192
    assert "n_ctx" not in sized["engine_defaults"]
    assert "n_ctx" in answer["engine_defaults"]


def test_fields_left_at_their_defaults_are_listed_without_an_assumption(
    client: TestClient,
) -> None:
    answer = post(client, {"model": LLAMA_8B, "engine": "llama.cpp"})
    listed = {u["field"]: u for u in answer["unused_fields"]}
    assert set(listed) >= {"sequence_length", "batch_size", "prompt_tokens", "kv_cache_dtype"}
    assert not any(u["given"] for u in listed.values())
    assert not any("is not used by" in a for a in answer["assumptions"])


# A workload field and a second value for it (the first is the base request's).
VARIED: dict[str, Any] = {
    "sequence_length": 8192,
    "batch_size": 4,
    "concurrency": 3,
    "prompt_tokens": 1000,
    "kv_cache_dtype": "fp8",
    "attention": "eager",
}


def _figures(answer: dict[str, Any]) -> tuple[Any, ...]:
    fit = answer["fit"]
    return (answer["breakdown"], answer["per_gpu"], fit["required_bytes"], fit["fits"])


@pytest.mark.parametrize("engine", ENGINES)
def test_the_declared_fields_are_exactly_those_that_change_nothing(
    client: TestClient, engine: str
) -> None:
    base = {"model": LLAMA_8B, "engine": engine, "gpu": "h100-sxm-80gb", "sequence_length": 4096}
    answer = post(client, base)
    declared = {u["field"] for u in answer["unused_fields"]}
    for field, value in VARIED.items():
        varied = post(client, {**base, field: value})
        unchanged = _figures(varied) == _figures(answer)
        assert unchanged == (field in declared), (engine, field)
        if field in declared:
            (entry,) = [u for u in varied["unused_fields"] if u["field"] == field]
            assert entry["given"] is True
            assert any(a.startswith(f"{field} {value} ") for a in varied["assumptions"])


def test_the_simple_rules_name_the_engine_they_do_not_use(client: TestClient) -> None:
    answer = post(client, {"parameter_count": 7e9, "estimator": "simple", "engine": "vllm"})
    listed = {u["field"]: u for u in answer["unused_fields"]}
    assert listed["engine"]["given"] is True and listed["engine"]["decided_by"] == []
    assert answer["engine_options"] is None


@pytest.mark.parametrize("written", ["Q4_K_M", "q4_k_m", "Q4_k_M"])
def test_llama_cpp_quant_names_are_priced_as_the_preset(client: TestClient, written: str) -> None:
    """Meta-Llama-3-8B as llama-quantize Q4_K_M writes it, worked by hand from its config
    (Q4_K: 144 bytes per 256 weights, Q6_K: 210; attn_v and ffn_down in Q6_K on the 16
    use_more_bits layers of 32, the output in Q6_K, norms in F32)."""
    answer = post(
        client,
        {"model": "meta-llama/Meta-Llama-3-8B", "engine": "llama.cpp", "weight_format": written},
    )

    def q4k(n: int) -> int:
        return n // 256 * 144

    def q6k(n: int) -> int:
        return n // 256 * 210

    e, kv, ff, vocab = 4096, 1024, 14336, 128256
    layer = 2 * q4k(e * e) + q4k(kv * e) + 2 * q4k(ff * e) + 2 * e * 4
    more, less = q6k(kv * e) + q6k(ff * e), q4k(kv * e) + q4k(ff * e)
    embd, output = q4k(vocab * e), q6k(vocab * e)
    total = embd + output + e * 4 + 32 * layer + 16 * (more + less)
    assert answer["details"]["weight_format"] == "Q4_K_M"
    assert any(
        f"Q4_K_M makes from this model's 16-bit checkpoint, {total} bytes" in a
        for a in answer["assumptions"]
    )
    # llama.cpp keeps the token embedding in a CPU buffer; the rest is on the GPU.
    assert answer["breakdown"]["weights"] == total - embd
    # A single-type Q4_K file is smaller: the preset gives some tensors 6 bits.
    pure = post(
        client,
        {
            "model": "meta-llama/Meta-Llama-3-8B",
            "engine": "llama.cpp",
            "weight_format": "gguf-q4_k",
        },
    )
    assert pure["breakdown"]["weights"] < answer["breakdown"]["weights"]


def test_every_engine_takes_the_names_and_plain_ones_map_to_plain_formats(
    client: TestClient,
) -> None:
    for name in ("Q8_0", "IQ4_XS", "Q5_K_S", "Q4_0", "q3_k_l"):
        answer = post(client, {"model": LLAMA_8B, "engine": "vllm", "weight_format": name})
        assert answer["details"]["weight_format"] == name.upper()
    for written, plain in (("F16", "fp16"), ("BF16", "bf16"), ("f32", "fp32")):
        named = post(client, {"model": LLAMA_8B, "engine": "llama.cpp", "weight_format": written})
        canonical = post(client, {"model": LLAMA_8B, "engine": "llama.cpp", "weight_format": plain})
        assert named["breakdown"] == canonical["breakdown"]
    problem = post(client, {"model": LLAMA_8B, "weight_format": "Q9_K"}, status=422)
    assert problem["errors"][0]["field"] == "weight_format"


def test_a_preset_on_a_model_its_rule_does_not_cover_is_its_bulk_type(client: TestClient) -> None:
    # DeepSeek-V2-Lite's latent attention: the preset rule is not modelled; every matrix in
    # Q4_K (rows that are not whole 256-blocks fall back as llama-quantize does), said so.
    answer = post(
        client,
        {"model": "deepseek-ai/DeepSeek-V2-Lite", "engine": "llama.cpp", "weight_format": "Q4_K_M"},
    )
    assert any("a lower bound" in a for a in answer["assumptions"])
