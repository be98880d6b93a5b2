"""The alias rules: names the catalog does not hold, read as models it does.

Expected resolutions are facts about the repositories (TheBloke's Llama-2-7B-GPTQ is Meta's
Llama 2 7B quantized, NousResearch's Meta-Llama-3-8B is Meta's upload re-hosted, ...); a
guessed copy's bytes are checked against a catalog record of the same copy whose config was
read from its publisher (Qwen's own -AWQ and -GPTQ-Int4 records, unsloth's -bnb-4bit records,
bartowski's GGUF repository), never against the guess's own output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.application.resolve import _named_model
from service.catalog.model_aliases import AliasRulesError, load_alias_rules
from service.catalog.model_catalog import CatalogError, ModelCatalog, load_model_catalog
from service.estimator.errors import NotFound
from service.estimator.weights import weight_layout

_CATALOG = load_model_catalog()


@pytest.fixture(scope="module")
def catalog() -> ModelCatalog:
    return _CATALOG


# (name as typed, catalog model it names, the format it names)
ISSUE_26 = [
    ("NousResearch/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-8B", None),
    ("unsloth/Phi-4", "microsoft/phi-4", None),
    ("meta-llama/Llama-2-7b", "meta-llama/Llama-2-7b-hf", None),
    ("TheBloke/Llama-2-7B-GPTQ", "meta-llama/Llama-2-7b-hf", "gptq-int4"),
    ("cognitivecomputations/DeepSeek-V3-0324-AWQ", "deepseek-ai/DeepSeek-V3-0324", "awq-int4"),
    ("unsloth/Llama-3.1-8B-Instruct-bnb-4bit", "meta-llama/Llama-3.1-8B-Instruct", "nf4"),
    ("QwQ-32B-unsloth-bnb-4bit", "Qwen/QwQ-32B", "nf4"),
    (
        "nm-testing/Mistral-7B-Instruct-v0.3-FP8-dynamic",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "fp8-channel",
    ),
    ("someone/Mistral-7B-Instruct-v0.3-FP8", "mistralai/Mistral-7B-Instruct-v0.3", "fp8-block"),
    ("Llama-3.3-70B-Instruct-Q4_K_M.gguf", "meta-llama/Llama-3.3-70B-Instruct", "gguf-Q4_K_M"),
    (
        "bartowski/Llama-3.3-70B-Instruct-GGUF:Q4_K_M",
        "meta-llama/Llama-3.3-70B-Instruct",
        "gguf-Q4_K_M",
    ),
    ("TheBloke/CodeLlama-13B-Instruct-fp16", "codellama/CodeLlama-13b-Instruct-hf", "fp16"),
    ("Qwen3-8B", "Qwen/Qwen3-8B", None),
]


@pytest.mark.parametrize(("name", "resolved", "fmt"), ISSUE_26)
def test_names_people_type_resolve_with_what_and_why(
    catalog: ModelCatalog, name: str, resolved: str, fmt: str | None
) -> None:
    model = _named_model(name, catalog, None)
    r = model.resolution
    assert r is not None
    assert (r.requested, r.resolved_to, r.route, r.exact) == (name, resolved, "rules", False)
    assert r.format == fmt
    assert r.reasons and all(": " in reason for reason in r.reasons)
    # The assumption line names the model it read and says it is a guess from the name.
    assert any(resolved in note and "alias rules" in note for note in model.notes)


def test_exact_routes_win_over_the_rules(catalog: ModelCatalog) -> None:
    # A catalog id that a rule would also read (its -AWQ suffix) is the catalog's own record.
    model = _named_model("Qwen/Qwen2.5-7B-Instruct-AWQ", catalog, None)
    assert model.resolution is not None and model.resolution.route == "catalog"
    gguf = _named_model("bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0", catalog, None)
    assert gguf.resolution is not None and gguf.resolution.route == "catalog-gguf"


def _weights(catalog: ModelCatalog, name: str) -> int:
    model = _named_model(name, catalog, None)
    if model.checkpoint is not None:
        return model.checkpoint.total_bytes
    assert model.architecture is not None
    return weight_layout(model.architecture).total_bytes


@pytest.mark.parametrize(
    ("guess", "record"),
    [
        # Qwen's own AWQ and GPTQ-Int4 records (configs from Qwen's quantization guide).
        ("casperhansen/Qwen2.5-7B-Instruct-AWQ-4bit", "Qwen/Qwen2.5-7B-Instruct-AWQ"),
        ("TheBloke/Qwen2.5-7B-Instruct-GPTQ", "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"),
        # unsloth's bnb-4bit record, from its repository's config.
        ("hugging-quants/Qwen2.5-7B-Instruct-bnb-4bit", "unsloth/Qwen2.5-7B-Instruct-bnb-4bit"),
        # bartowski's GGUF repository in the catalog (imatrix quants): lmstudio-community
        # publishes bartowski's files.
        (
            "lmstudio-community/Qwen2.5-7B-Instruct-GGUF:Q4_K_M",
            "bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M",
        ),
    ],
)
def test_a_guessed_copy_prices_as_the_publishers_record(
    catalog: ModelCatalog, guess: str, record: str
) -> None:
    assert record in catalog or catalog.gguf_file(record) is not None
    assert _weights(catalog, guess) == _weights(catalog, record)


def test_a_quantized_copy_keeps_the_base_shape_and_takes_the_format_dtype(
    catalog: ModelCatalog,
) -> None:
    base = catalog.get("meta-llama/Llama-2-7b-hf")
    model = _named_model("TheBloke/Llama-2-7B-GPTQ", catalog, None)
    assert model.architecture is not None and model.architecture.quantization is not None
    assert model.parameter_count == base.counts.total
    assert (model.architecture.quantization.method, model.architecture.quantization.bits) == (
        "gptq",
        4,
    )
    assert model.dtype == "float16"  # AutoGPTQ writes float16
    # 4-bit weights with group-128 fp16 scales and zeros: well under half the fp16 bytes.
    assert (
        _weights(catalog, "TheBloke/Llama-2-7B-GPTQ")
        < 0.35 * weight_layout(base.architecture).total_bytes
    )


def test_a_dequantized_copy_drops_the_quantization(catalog: ModelCatalog) -> None:
    original = catalog.get("openai/gpt-oss-20b")
    assert original.architecture.quantization is not None
    model = _named_model("openai/gpt-oss-20b-bf16", catalog, None)
    assert model.architecture is not None and model.architecture.quantization is None
    assert model.resolution is not None and model.resolution.format == "bf16"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("mlx-community/Llama-3.2-3B-Instruct-4bit", "MLX"),
        ("someone/Qwen3-8B-MLX-4bit", "MLX"),
        ("unsloth/Llama-3.3-70B-Instruct-GGUF:UD-Q4_K_XL", "not a modelled"),
        ("Qwen3-8B-IQ2_XXS.gguf", "not a modelled"),
        ("someone/Qwen3-8B-NVFP4", "4-bit float"),
        ("someone/Llama-3-8B-EXL2", "ExLlama"),
    ],
)
def test_unpriced_formats_are_a_404_saying_so(catalog: ModelCatalog, name: str, said: str) -> None:
    with pytest.raises(NotFound) as exc:
        _named_model(name, catalog, None)
    assert said in exc.value.detail and exc.value.field == "model"


def test_an_unknown_org_is_not_guessed_without_a_format(catalog: ModelCatalog) -> None:
    # A same-named repository of an unlisted organisation may be a fine-tune: no guess.
    with pytest.raises(NotFound) as exc:
        _named_model("someone/Llama-2-7b-hf", catalog, None)
    assert "is not in the catalog" in exc.value.detail


def test_a_name_of_several_different_models_lists_them(tmp_path: Path) -> None:
    base = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    import json

    wider = dict(base, hidden_size=512)
    records = [
        {"id": "a/Tiny", "source": "test", "dtype": "bfloat16", "config": base},
        {"id": "b/Tiny", "source": "test", "dtype": "bfloat16", "config": wider},
        {"id": "c/Small", "source": "test", "dtype": "bfloat16", "config": base},
        {"id": "d/Small", "source": "test", "base": "c/Small"},
    ]
    (tmp_path / "m.json").write_text(json.dumps({"models": records}))
    cat = load_model_catalog(tmp_path)
    with pytest.raises(NotFound) as exc:
        _named_model("Tiny", cat, None)
    assert "a/Tiny" in exc.value.detail and "b/Tiny" in exc.value.detail
    # Same-named records that share one config are one model: the record with its own config.
    small = _named_model("unsloth/Small", cat, None)
    assert small.resolution is not None and small.resolution.resolved_to == "c/Small"


def test_rules_file_is_checked_at_load(tmp_path: Path) -> None:
    bad = tmp_path / "rules.toml"
    bad.write_text(
        '[[format]]\nname = "x"\nsuffixes = ["-X"]\nreason = "r"\n'
        'quantization_config = { quant_method = "nonsense" }\n'
    )
    with pytest.raises(AliasRulesError, match="quantization_config"):
        load_alias_rules(bad)
    bad.write_text('[[publisher]]\norg = "a"\n')
    with pytest.raises(AliasRulesError, match="reason"):
        load_alias_rules(bad)
    bad.write_text('[[same_weights]]\nsuffix = "hf"\nreason = "r"\n')
    with pytest.raises(AliasRulesError, match="suffix"):
        load_alias_rules(bad)
    bad.write_text("[[whatever]]\n")
    with pytest.raises(CatalogError):
        load_model_catalog(rules=bad)


def test_every_rule_has_a_reason_and_every_format_parses() -> None:
    rules = load_alias_rules()
    assert rules.publishers and rules.formats
    assert all(p.reason for p in rules.publishers.values())
    assert all(f.reason and f.suffixes for f in rules.formats)


def test_a_whole_name_another_publisher_holds_is_that_record(catalog: ModelCatalog) -> None:
    # Qwen publishes Qwen3-235B-A22B-FP8 itself: a bare or mirrored name is that record, not
    # the base with a guessed FP8 layout.
    model = _named_model("Qwen3-235B-A22B-FP8", catalog, None)
    assert model.resolution is not None
    assert (model.resolution.resolved_to, model.resolution.format) == (
        "Qwen/Qwen3-235B-A22B-FP8",
        None,
    )


_PIECES = st.sampled_from(
    [
        *("unsloth/", "TheBloke/", "/", ":", "Qwen3-8B", "Llama-2-7b", "-GGUF", ":Q4_K_M"),
        *(".gguf", "-GPTQ", "-AWQ", "-bnb-4bit", "-FP8", "-hf", "-fp16", "-Instruct"),
        *("-00001-of-00002", "hf.co/", "-Q4_K_M", "UD-", "-MLX-4bit", " ", "-"),
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(_PIECES, min_size=1, max_size=6).map("".join), st.text(max_size=60)))
def test_any_name_resolves_or_is_a_not_found(name: str) -> None:
    catalog = _CATALOG
    if not name.strip():
        return
    try:
        model = _named_model(name, catalog, None)
    except NotFound as exc:
        assert exc.field == "model"
    else:
        assert model.resolution is not None and model.parameter_count > 0


@pytest.mark.parametrize(
    "name", ["Llama-2-7b ", " meta-llama/Llama-3.1-8B-Instruct", "QWEN/qwen2.5-7b-instruct\t"]
)
def test_blanks_and_case_around_a_catalog_name_do_not_matter(name: str) -> None:
    """Found by the property test above: the catalog's membership test and its lookup must
    read a name the same way (a name with a trailing blank reached an unreachable branch)."""
    assert name in _CATALOG
    model = _named_model(name, _CATALOG, None)
    assert model.parameter_count > 0
