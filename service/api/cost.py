"""What a request will cost before it runs, in layer-items, and the budget it must fit.

An estimate walks the model's layers a bounded number of times: every inverse question is a
search capped at ``MAX_SEARCH_STEPS`` evaluations (service/estimator/search.py) and the
minimum-GPU search builds at most 2 · log2(layers) + 1 setups per TP size (inference/fit.py), so
the work of one item grows with its layer count and nothing else that a request controls. A
batch's cost is therefore the sum of its items' layer counts (items × layers, searches being a
bounded factor), read from the request before any estimate runs: a posted config's layer
count (under any name the config reader accepts) or a named model's (the store's, a catalog
GGUF repository's or a catalog model's, as the estimate resolves it). A batch over
``LLMMEM_BATCH_COST_BUDGET`` is refused up front (413, naming the budget); one within it still
runs under the request deadline, and items not reached by then are answered with a 503
problem each (service/api/routes/estimates.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from service.catalog.model_catalog import ModelCatalog
from service.estimator.errors import EstimatorError
from service.estimator.model.config_reader import ALIASES, Bounds
from service.model_store import StoreIndex

__all__ = ["BatchOverBudget", "batch_cost", "item_cost"]

# A config's language model may sit inside a wrapper under one of these keys.
_NESTED_CONFIGS = ("text_config", "llm_config", "language_config")
_LAYER_KEYS = ("num_hidden_layers", *ALIASES["num_hidden_layers"])


class BatchOverBudget(Exception):
    """A batch whose items × layers exceed the budget: answered 413 naming the budget."""

    def __init__(self, cost: int, budget: int) -> None:
        super().__init__(
            f"this batch costs {cost} layer-items (the sum of its items' layer counts) and the "
            f"budget per request is {budget}; split it into batches of at most {budget} "
            "layer-items (LLMMEM_BATCH_COST_BUDGET sets the budget)."
        )
        self.cost = cost
        self.budget = budget


def _layers_in(config: Mapping[str, Any]) -> int | None:
    for key in _LAYER_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return min(max(value, 1), Bounds.LAYERS)
    return None


def _named_layers(model: str, models: ModelCatalog, store: StoreIndex | None) -> int | None:
    """The layers of a named model, looked up in the order the estimate resolves it
    (service/application/resolve.py: the store shadows the catalog; then GGUF files, then
    models)."""
    found = store.get(model) if store is not None else None
    if found is not None:
        return found.architecture.num_layers
    try:
        gguf = models.gguf_file(model)
    except EstimatorError:  # a tag the repository lacks: the item fails on its own
        gguf = None
    if gguf is not None:
        return gguf[0].architecture.num_layers
    name = model.strip()
    return models.get(name).architecture.num_layers if name in models else None


def item_cost(
    request: Mapping[str, Any], models: ModelCatalog, store: StoreIndex | None = None
) -> int:
    """Layers one estimate request walks: its posted config's or its named model's; 1 when
    it names neither (the simple estimator, or an item that will fail validation)."""
    config = request.get("hf_config")
    if isinstance(config, Mapping):
        for nested in _NESTED_CONFIGS:
            inner = config.get(nested)
            if isinstance(inner, Mapping) and (layers := _layers_in(inner)) is not None:
                return layers
        return _layers_in(config) or 1
    model = request.get("model")
    if isinstance(model, str):
        return _named_layers(model, models, store) or 1
    return 1


def batch_cost(
    requests: Iterable[Mapping[str, Any]], models: ModelCatalog, store: StoreIndex | None = None
) -> int:
    return sum(item_cost(r, models, store) for r in requests)
