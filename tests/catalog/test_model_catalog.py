"""The model catalog: every record loads, and totals agree with published figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.validate.paths import MEASURED
from service.catalog.model_catalog import CatalogError, load_model_catalog
from service.estimator.errors import NotFound

VALIDATION = MEASURED / "model_configs.json"
REQUIRED = [
    "Qwen/Qwen-7B",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen3-235B-A22B",
    "deepseek-ai/DeepSeek-R1",
    "meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-2-13b-hf",
    "meta-llama/Llama-2-70b-hf",
    "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Meta-Llama-3-70B",
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-405B-Instruct",
    "meta-llama/Llama-3.2-1B-Instruct",
    "meta-llama/Llama-3.2-3B",
    "meta-llama/Llama-3.3-70B-Instruct",
    "Qwen/Qwen2.5-0.5B",
    "Qwen/Qwen2.5-1.5B",
    "Qwen/Qwen2.5-3B",
    "Qwen/Qwen2.5-14B",
    "Qwen/Qwen2.5-32B",
    "Qwen/Qwen2.5-72B",
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-4B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B",
    "mistralai/Mistral-7B-Instruct-v0.1",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mistral-Nemo-Instruct-2407",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "mistralai/Mixtral-8x22B-v0.1",
    "google/gemma-2-2b",
    "google/gemma-2-9b-it",
    "google/gemma-2-27b",
    "google/gemma-3-1b-it",
    "google/gemma-3-4b-it",
    "google/gemma-3-12b-it",
    "google/gemma-3-27b-it",
    "microsoft/Phi-3-mini-4k-instruct",
    "microsoft/Phi-3-medium-4k-instruct",
    "microsoft/Phi-3.5-MoE-instruct",
    "microsoft/phi-4",
    "deepseek-ai/DeepSeek-V2-Lite-Chat",
    "deepseek-ai/DeepSeek-V3",
    "openai/gpt-oss-20b",
    "openai/gpt-oss-120b",
    "codellama/CodeLlama-7b-hf",
    "ibm-granite/granite-3.1-8b-instruct",
]


@pytest.fixture(scope="module")
def catalog():
    return load_model_catalog()


def test_size_and_required_models(catalog) -> None:
    assert len(catalog) >= 45
    for model_id in REQUIRED:
        assert model_id in catalog, model_id


def test_validation_csv_models_resolve(catalog) -> None:
    import csv

    names = set()
    for name in ("vllm_v0.19_h100.csv",):
        with open(VALIDATION.parent / name) as f:
            names |= {row["model"] for row in csv.DictReader(f)}
    for name in names:
        catalog.get(name)


def test_lookup_is_case_insensitive_and_suggests(catalog) -> None:
    assert catalog.get("qwen/qwen2.5-7b-INSTRUCT").id == "Qwen/Qwen2.5-7B-Instruct"
    with pytest.raises(NotFound) as err:
        catalog.get("Qwen/Qwen2.5-7B-Instrct")
    assert "Qwen/Qwen2.5-7B-Instruct" in err.value.detail


def _billions(text: str) -> tuple[float, float]:
    """'7.61B' -> (7.61, 0.01): the figure and one unit of its last digit, since model
    cards both round and truncate."""
    digits = text.removesuffix("B")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits), 10.0**-decimals


def _published(official: str) -> tuple[str, str | None]:
    """Total (the Hub's safetensors figure when given, else the card's) and active figure."""
    hub = re.search(r"HF(?: safetensors)?: (\d+(?:\.\d+)?B)", official)
    total = hub.group(1) if hub else re.search(r"\d+(?:\.\d+)?B", official).group(0)
    active = re.search(r"(\d+(?:\.\d+)?B) activ", official)
    return total, active.group(1) if active else None


def test_totals_match_published_figures(catalog) -> None:
    records = json.loads(VALIDATION.read_text())
    for rec in records:
        model_id = re.sub(r"\(.*?\)|\s.*$", "", rec["model"]).strip()
        entry = catalog.get(model_id if model_id in catalog else model_id + "-it")
        official = rec["official_params"]
        total_text, active_text = _published(official)
        if "vision" not in official:  # Gemma 3's figure includes the vision tower
            figure, unit = _billions(total_text)
            assert abs(entry.counts.total / 1e9 - figure) <= unit, (model_id, entry.counts.total)
        if active_text:
            figure, unit = _billions(active_text)
            active = entry.counts.active
            if model_id.startswith("openai/"):
                # OpenAI's active figure leaves out the input embedding.
                active -= entry.counts.by_component["embeddings"]
            assert abs(active / 1e9 - figure) <= unit, (model_id, active)


def test_deepseek_r1(catalog) -> None:
    r1 = catalog.get("deepseek-ai/DeepSeek-R1")
    assert round(r1.counts.total / 1e9) == 671
    assert 37.0e9 <= r1.counts.active < 38.0e9
    assert r1.architecture.mla is not None
    assert r1.architecture.quantization is not None
    assert r1.architecture.quantization.method == "fp8"


def test_filter(catalog) -> None:
    gemma3 = catalog.filter(family="gemma3")
    assert {e.id for e in gemma3} >= {"google/gemma-3-1b-it", "google/gemma-3-27b-it"}
    small = catalog.filter(max_parameters=2_000_000_000)
    assert small and all(e.counts.total <= 2e9 for e in small)
    big_moe = catalog.filter(family="deepseek_v3", min_parameters=600_000_000_000)
    assert {e.id for e in big_moe} >= {"deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"}
    assert all(e.architecture.model_type == "deepseek_v3" for e in big_moe)
    assert not catalog.filter(family="deepseek_v3", max_parameters=600_000_000_000)


_SMALL = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 100,
    "torch_dtype": "bfloat16",
}
# By hand: embeddings 100*64 + 2 layers * (4*64*64 attention + 3*64*128 mlp + 2*64 norms)
# + final norm 64 + untied lm_head 64*100.
_SMALL_TOTAL = 6400 + 2 * (16384 + 24576 + 128) + 64 + 6400


def _record(model_id: str = "x/y", **kw: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"id": model_id, "source": "written in this test"}
    if "base" not in kw:
        record.update(dtype="bfloat16", config=dict(_SMALL))
    record.update(kw)
    return record


def _write(path: Path, *records: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"models": list(records)}))
    return path


def test_bad_records_raise_catalog_error(tmp_path: Path) -> None:
    good = _record(aliases=[])
    cases = [
        {**good, "config": {**good["config"], "hidden_size": -1}},
        {**good, "dtype": "float16"},
        {k: v for k, v in good.items() if k != "source"},
        {k: v for k, v in good.items() if k != "dtype"},
        {**good, "extra": 1},
        {**good, "config": {**good["config"], "model_type": "bert"}},
        {**good, "aliases": "y"},
        {**good, "published_parameters": 7},
        {**good, "id": "no-owner"},
    ]
    for n, record in enumerate(cases):
        with pytest.raises(CatalogError):
            load_model_catalog(_write(tmp_path / f"bad{n}.json", record))
    with pytest.raises(CatalogError, match="also defined"):
        load_model_catalog(_write(tmp_path / "dup.json", good, {**good, "id": "X/Y"}))
    with pytest.raises(CatalogError, match="used by both"):
        load_model_catalog(_write(tmp_path / "alias.json", good, _record("x/z", aliases=["X/Y"])))
    assert load_model_catalog(_write(tmp_path / "ok.json", good)).get("X/Y").counts.total == (
        _SMALL_TOTAL
    )


def test_base_resolves_across_files_in_any_order(tmp_path: Path) -> None:
    # "a.json" is read before "b.json", which holds the base; the chain is two deep.
    _write(
        tmp_path / "a.json",
        _record("q/y-awq", base="x/y-it", config_overrides={"torch_dtype": "float16"}),
    )
    _write(tmp_path / "b.json", _record("x/y"), _record("x/y-it", base="x/y"))
    catalog = load_model_catalog(tmp_path)
    base, it, awq = (catalog.get(i) for i in ("x/y", "x/y-it", "q/y-awq"))
    assert it.base == "x/y" and awq.base == "x/y-it" and base.base is None
    assert dict(it.config) == _SMALL
    assert it.counts.total == base.counts.total == _SMALL_TOTAL
    # The record keeps its whole resolved config, not the difference.
    assert dict(awq.config) == {**_SMALL, "torch_dtype": "float16"}
    assert awq.dtype == "float16" and awq.counts.total == _SMALL_TOTAL


def test_base_is_matched_case_insensitively_and_named_by_its_id(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.json", _record("x/y"), _record("x/y-it", base="X/Y"))
    assert load_model_catalog(path).get("x/y-it").base == "x/y"


def test_overrides_change_the_shape(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "m.json",
        _record("x/y"),
        _record("x/y-big-vocab", base="x/y", config_overrides={"vocab_size": 200}),
    )
    entry = load_model_catalog(path).get("x/y-big-vocab")
    # 100 more rows in both the embeddings and the untied lm_head, 64 wide.
    assert entry.counts.total == _SMALL_TOTAL + 2 * 100 * 64


def test_override_replaces_a_nested_object_whole(tmp_path: Path) -> None:
    rope = {"rope_type": "linear", "factor": 2.0}
    path = _write(
        tmp_path / "m.json",
        _record("x/y", config={**_SMALL, "rope_scaling": rope}),
        _record("x/y-ntk", base="x/y", config_overrides={"rope_scaling": {"factor": 4.0}}),
    )
    assert load_model_catalog(path).get("x/y-ntk").config["rope_scaling"] == {"factor": 4.0}


def test_config_drop_removes_base_keys(tmp_path: Path) -> None:
    quant = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    path = _write(
        tmp_path / "m.json",
        _record("x/y-fp8", config={**_SMALL, "quantization_config": quant}),
        _record("x/y-bf16", base="x/y-fp8", config_drop=["quantization_config"]),
    )
    catalog = load_model_catalog(path)
    assert catalog.get("x/y-fp8").architecture.quantization is not None
    bf16 = catalog.get("x/y-bf16")
    assert "quantization_config" not in bf16.config
    assert bf16.architecture.quantization is None


def test_base_dtype_is_checked_when_given(tmp_path: Path) -> None:
    ok = _write(tmp_path / "ok.json", _record("x/y"), _record("x/z", base="x/y", dtype="bfloat16"))
    assert load_model_catalog(ok).get("x/z").dtype == "bfloat16"
    bad = _write(tmp_path / "bad.json", _record("x/y"), _record("x/z", base="x/y", dtype="float16"))
    with pytest.raises(CatalogError, match="disagrees"):
        load_model_catalog(bad)


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([_record("x/z", base="x/nope")], "not a record"),
        ([_record("x/y"), _record("x/z", base="x/yy")], "did you mean x/y"),
        ([_record("x/a", base="x/b"), _record("x/b", base="x/a")], "cycle x/a -> x/b -> x/a"),
        ([_record("x/a", base="x/a")], "cycle"),
        ([_record("x/y"), _record("x/z", base="x/y", config={})], "either config"),
        ([{"id": "x/z", "source": "s"}], "either config"),
        ([_record("x/y", config_overrides={"vocab_size": 1})], "need a base"),
        ([_record("x/y", config_drop=["vocab_size"])], "need a base"),
        ([_record("x/y"), _record("x/z", base="x/y", config_overrides=[1])], "must be an object"),
        ([_record("x/y"), _record("x/z", base="x/y", config_drop="vocab_size")], "list of"),
        ([_record("x/y"), _record("x/z", base="x/y", config_drop=["nope"])], "not in base"),
        ([_record("x/y"), _record("x/z", base=7)], "base must be"),
        # An override that breaks the config is caught like a bad config.
        ([_record("x/y"), _record("x/z", base="x/y", config_overrides={"hidden_size": 0})], "x/z"),
    ],
)
def test_bad_bases_raise_catalog_error(
    tmp_path: Path, records: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(CatalogError, match=re.escape(message)):
        load_model_catalog(_write(tmp_path / "m.json", *records))


def test_every_base_names_a_record_of_the_same_family(catalog) -> None:
    for entry in catalog.all():
        if entry.base is not None:
            assert catalog.get(entry.base).architecture.model_type == entry.architecture.model_type


# An absolute path (a "/" opening a word) or a search-index id; URLs and repository paths
# ("owner/repo path/file.py") never match.
_NOT_PUBLIC = re.compile(r"(?:^|[\s(\[])/[\w.-]+/|index id|\bid \d{6,}")


def test_sources_are_public_references(catalog) -> None:
    """A source names a public repository file or model card, never a path of a build machine
    or an internal search-index id."""
    assert _NOT_PUBLIC.search("copied from /srv/data/model_configs.json")
    assert _NOT_PUBLIC.search("a fixture (search index id 0)")
    assert _NOT_PUBLIC.search("read from id 123456 of a search tool")
    assert not _NOT_PUBLIC.search("https://huggingface.co/x/y/blob/main/config.json")
    for entry in catalog.all():
        assert not _NOT_PUBLIC.search(entry.source), entry.id


def _published_figure(text: str, word: str) -> tuple[float, float] | None:
    """'15.7B total' -> (15.7e9, 0.1e9): the figure and one unit of its last digit, since
    model cards both round and truncate. A bare leading figure is the total."""
    pattern = r"(\d+(?:\.\d+)?)([MB])" + (rf" {word}" if word != "total" else "")
    match = re.search(pattern, text) if word != "total" else re.match(pattern, text)
    if match is None:
        return None
    digits, unit = match.groups()
    scale = 1e9 if unit == "B" else 1e6
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits) * scale, 10.0**-decimals * scale


def test_totals_match_each_records_published_figure(catalog) -> None:
    checked = 0
    for entry in catalog.all():
        text = entry.published_parameters
        if text is None:
            continue
        total = _published_figure(text, "total")
        assert total is not None, (entry.id, text)
        assert abs(entry.counts.total - total[0]) <= total[1], (entry.id, entry.counts.total)
        active = _published_figure(text, "active")
        if active is not None:
            counted = entry.counts.active
            if "active excl. embeddings" in text:
                counted -= entry.counts.by_component["embeddings"]
            assert abs(counted - active[0]) <= active[1], (entry.id, counted)
        checked += 1
    assert checked >= 40


# Keys that change how a model computes or how far it reaches, never which parameters it
# has: records that differ only in these share one build in the reference test below.
_NOT_SHAPE = frozenset(
    {
        "architectures",
        "torch_dtype",
        "dtype",
        "quantization_config",
        "max_position_embeddings",
        "rope_theta",
        "rope_scaling",
        "rope_local_base_freq",
        "sliding_window",
        "use_sliding_window",
        "max_window_layers",
        "layer_types",
        "sliding_window_pattern",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "rms_norm_eps",
        "layer_norm_eps",
        "norm_epsilon",
        "initializer_range",
        "use_cache",
        "hidden_act",
        "hidden_activation",
        "attention_dropout",
        "logit_scale",
        "embedding_multiplier",
        "logits_scaling",
        "residual_multiplier",
        "attention_multiplier",
        "query_pre_attn_scalar",
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "initial_context_length",
        "swiglu_limit",
        "router_aux_loss_coef",
        "cache_implementation",
    }
)


def _shape_key(config: Any) -> str:
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in _NOT_SHAPE}
        return value

    return json.dumps(strip(dict(config)), sort_keys=True, default=list)


def _transformers_total(config: dict[str, Any]) -> int:
    """Parameters of the model transformers builds from ``config`` on the meta device."""
    import torch
    import transformers

    from service.estimator.model import read_config

    cfg = json.loads(json.dumps(config))
    cfg.pop("quantization_config", None)
    arch = read_config(config)
    # The type the estimator resolved (Kimi-K2's kimi_k2 is built as DeepseekV3ForCausalLM).
    model_type = arch.wrapper_model_type or arch.model_type
    cfg.pop("model_type")
    if "vision_config" in cfg:
        # transformers 5 ties a wrapper's lm_head by its top-level flag (Mistral3Config: true)
        # and un-ties it at load when the checkpoint stores both; on the meta device the flag
        # alone decides, so it gets the language model's own.
        cfg.setdefault("tie_word_embeddings", arch.tie_word_embeddings)
    with torch.device("meta"):
        hf = transformers.AutoConfig.for_model(model_type, **cfg)
        if "vision_config" in cfg:
            model = transformers.AutoModelForImageTextToText.from_config(hf)
        else:
            model = transformers.AutoModelForCausalLM.from_config(hf)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.reference
@pytest.mark.slow
def test_every_record_matches_transformers(catalog) -> None:
    """Every record's total equals the model transformers builds from its config, each
    distinct shape built once. Qwen-1 and MiniCPM (remote code, not in transformers) are
    checked by hand in tests/estimator/test_parameters.py and test_minicpm.py."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    groups: dict[str, list[Any]] = {}
    for entry in catalog.all():
        if entry.architecture.model_type not in ("qwen", "minicpm"):
            groups.setdefault(_shape_key(entry.config), []).append(entry)
    for entries in groups.values():
        expected = _transformers_total(dict(entries[0].config))
        for entry in entries:
            assert entry.counts.total == expected, (entry.id, entry.counts.total, expected)
