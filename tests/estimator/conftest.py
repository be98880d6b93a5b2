"""Model shapes shared by the estimator tests, read from the model catalog.

The catalog (``service/catalog/models/*.json``) holds each model's ``config.json`` fields once;
tests take an :class:`Architecture` or a raw config from it instead of writing the dict again.
A test that needs a variant copies the raw config and overrides the fields it changes.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest

from service.catalog.model_catalog import ModelCatalog, load_model_catalog
from service.estimator.model import Architecture

LLAMA_8B = "meta-llama/Llama-3.1-8B"
LLAMA_1B = "meta-llama/Llama-3.2-1B"


@cache
def _catalog() -> ModelCatalog:
    return load_model_catalog()


def catalog_config(model_id: str) -> dict[str, Any]:
    """The catalog's raw config for ``model_id``: a fresh deep copy, safe to change."""
    return copy.deepcopy(dict(_catalog().get(model_id).config))


def catalog_architecture(model_id: str) -> Architecture:
    """The Architecture the catalog built for ``model_id``."""
    return _catalog().get(model_id).architecture


@pytest.fixture(scope="session")
def llama_8b() -> Architecture:
    return catalog_architecture(LLAMA_8B)


def full_bf16_activation_setup(arch: Architecture, **overrides: Any) -> Any:
    """The activation setup of full fine-tuning in pure bf16 (no autocast, every weight
    trains, SDPA, no checkpointing), with ``overrides`` applied."""
    from service.estimator.training.activations import ActivationSetup

    fields: dict[str, Any] = dict(
        arch=arch,
        compute_bytes=2,
        residual_bytes=2,
        autocast=False,
        base_trainable=True,
        trainable_from=0,
        lora_names=frozenset(),
        lora_rank=16,
        attention="sdpa",
        checkpointing="none",
    )
    fields.update(overrides)
    return ActivationSetup(**fields)
