"""Catalog GGUF repositories: their validation at load and how `<repo>:<tag>` resolves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.catalog.model_catalog import CatalogError, load_model_catalog
from service.estimator.errors import NotFound

_BASE: dict[str, Any] = {
    "id": "x/base",
    "source": "written in this test",
    "dtype": "bfloat16",
    "config": {
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
    },
}


def _repo(**gguf: Any) -> dict[str, Any]:
    files = {"Q4_K_M": "base-Q4_K_M.gguf", "Q8_0": "base-Q8_0.gguf"}
    return {
        "id": "pub/base-GGUF",
        "base": "x/base",
        "source": "written in this test",
        "gguf": {"files": files, "mix": "stock", "imatrix": False, **gguf},
    }


def _load(tmp_path: Path, *records: dict[str, Any]):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"models": [_BASE, *records]}))
    return load_model_catalog(path)


def test_a_tag_resolves_in_any_case_and_a_bare_repo_is_its_q4_k_m(tmp_path: Path) -> None:
    catalog = _load(tmp_path, _repo())
    entry, tag, file = catalog.gguf_file("PUB/base-gguf:q8_0")
    assert (entry.id, tag, file) == ("pub/base-GGUF", "Q8_0", "base-Q8_0.gguf")
    assert entry.base == "x/base" and entry.architecture.num_layers == 2
    assert catalog.gguf_file("pub/base-GGUF")[1] == "Q4_K_M"
    only_q8 = _repo(files={"Q8_0": "b.gguf", "Q6_K": "c.gguf"})
    assert _load(tmp_path, only_q8).gguf_file("pub/base-GGUF")[1] == "Q8_0"
    # Not a GGUF repository, or not in the catalog: not this lookup's answer.
    assert catalog.gguf_file("x/base:Q4_K_M") is None
    assert catalog.gguf_file("nobody/else") is None
    with pytest.raises(NotFound, match="lists Q4_K_M, Q8_0"):
        catalog.gguf_file("pub/base-GGUF:IQ2_M")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mix": "dynamic"}, "gguf.mix"),
        ({"files": {}}, "gguf.files"),
        ({"files": {"Q4_K_M": "base.bin"}}, ".gguf file name"),
        ({"files": {"IQ2_M": "base-IQ2_M.gguf"}}, "not modelled"),
        ({"files": {"q4_k_m": "base.gguf"}}, "write the tag as 'Q4_K_M'"),
        ({"imatrix": "yes"}, "true or false"),
        ({"colour": 1}, "unknown gguf fields"),
    ],
)
def test_bad_gguf_records_stop_the_load(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(CatalogError, match=message):
        _load(tmp_path, _repo(**change))


def test_a_gguf_record_needs_a_base_the_rule_covers(tmp_path: Path) -> None:
    no_base = {k: v for k, v in _repo().items() if k != "base"}
    with pytest.raises(CatalogError, match="names its base"):
        _load(tmp_path, {**no_base, "config": _BASE["config"], "dtype": "bfloat16"})
    quantized = {
        **_BASE,
        "id": "x/awq",
        "dtype": "float16",
        "config": {
            **_BASE["config"],
            "torch_dtype": "float16",
            "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128},
        },
    }
    with pytest.raises(CatalogError, match="16-bit checkpoint"):
        _load(tmp_path, quantized, {**_repo(), "base": "x/awq"})


def test_shipped_gguf_records() -> None:
    catalog = load_model_catalog()
    repos = [e for e in catalog.all() if e.gguf is not None]
    assert len(repos) >= 13
    for e in repos:
        assert e.base is not None and e.id.endswith("-GGUF")
        assert e.gguf.mix == ("stock" if e.id.startswith("bartowski/") else "custom")
    entry, _tag, file = catalog.gguf_file("bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M")
    assert file == "Llama-3.2-1B-Instruct-Q4_K_M.gguf"
    assert entry.base == "meta-llama/Llama-3.2-1B-Instruct"
