"""Speculative decoding: what a drafter adds to every GPU that runs it.

The engines load the drafter beside the target and give its attention layers KV-cache blocks
of their own, allocated with the target's for every token of the pool (vLLM v1: the drafter's
layers join the KV-cache spec, ``vllm/v1/spec_decode/*.py`` and ``gpu_model_runner.
get_kv_cache_spec``; SGLang: the draft worker's own token pool of the same size). So a drafter
costs its weights per GPU and its KV bytes on every token the pool holds. By method (vLLM's
``SpeculativeConfig.method``; SGLang's ``--speculative-algorithm``):

- ``draft_model``: a separate small model (``--speculative-config '{"model": ...}'``), its
  weights at its own TP (``draft_tensor_parallel_size``: the target's or 1) and its KV per
  token at that TP.
- ``eagle`` / ``eagle3``: a head of one decoder layer over the target's hidden states, with an
  ``fc`` that fuses its inputs (2 × hidden for EAGLE, 3 × hidden for EAGLE-3) and, for
  EAGLE-3, a language-model head over its own draft vocabulary; the embedding (and EAGLE's
  lm_head) is shared with the target (``vllm/model_executor/models/llama_eagle*.py``). Priced
  from the head's own config when it is known, else as one decoder layer of the target with
  those additions (the published heads are such a layer).
- ``mtp``: the checkpoint's multi-token-prediction layer (DeepSeek-V3's
  ``num_nextn_predict_layers`` = 1, ``deepseek_mtp.py``): one decoder layer shaped like the
  target's last, an ``eh_proj`` of 2 × hidden → hidden and its norms; embedding and head shared.
- ``ngram`` / ``suffix``: proposals from the prompt on the CPU: nothing on the GPU.

``num_speculative_tokens`` changes the batches the scheduler forms, not what is allocated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.estimator.errors import InvalidRequest
from service.estimator.kv_cache import MlaCache, stage_kv_layouts
from service.estimator.model import Architecture
from service.estimator.units import GIB, bytes_per_element, cdiv
from service.estimator.weights import Placement, WeightLayout, weight_layout

__all__ = [
    "DRAFTLESS",
    "METHODS",
    "DraftCost",
    "Speculative",
    "draft_cost",
    "speculative_method",
]

#: Methods and whether they need a drafter's config (True), can derive it from the target
#: (None), or hold nothing on the GPU (False).
METHODS: dict[str, bool | None] = {
    "draft_model": True,
    "eagle": None,
    "eagle3": None,
    "mtp": None,
    "ngram": False,
    "suffix": False,
}
DRAFTLESS = frozenset(m for m, needs in METHODS.items() if needs is False)
#: EAGLE-3's default draft vocabulary (the published heads' ``draft_vocab_size``).
EAGLE3_DRAFT_VOCAB = 32000
_FC_INPUTS = {"eagle": 2, "eagle3": 3, "mtp": 2}
# The engines' own words for a method: SGLang's --speculative-algorithm, vLLM's method names
# (the per-family MTP methods, ``[ngram]``).
_WORDS = {
    "standalone": "draft_model",
    "draft_model": "draft_model",
    "nextn": "mtp",
    "mtp": "mtp",
    "eagle": "eagle",
    "eagle3": "eagle3",
    "ngram": "ngram",
    "[ngram]": "ngram",
    "ngram_gpu": "ngram",
    "lookahead": "ngram",
    "suffix": "suffix",
}


@dataclass(frozen=True, slots=True)
class Speculative:
    """A speculative-decoding setup: the method, tokens proposed per step, and the drafter's
    config when known (a draft model's, an EAGLE head's)."""

    method: str
    num_tokens: int = 1
    draft: Architecture | None = None
    draft_tp: int | None = None
    label: str | None = None


@dataclass(frozen=True, slots=True)
class DraftCost:
    """What the drafter adds on one GPU: weights, KV bytes per token, and how."""

    weights: int
    kv_token_bytes: int
    note: str


def speculative_method(word: str) -> str | None:
    """The method an engine's word names (``EAGLE3``, ``deepseek_mtp``, ``[ngram]``), or, as
    vLLM's ``SpeculativeConfig`` infers it when only a model is given, from the model's name:
    ``eagle3`` or ``eagle`` in it, else a draft model. None: a method not modelled (Medusa,
    MLP speculators)."""
    key = word.strip().lower()
    if key in _WORDS:
        return _WORDS[key]
    if key.endswith("_mtp"):
        return "mtp"
    if "medusa" in key or "mlp_speculator" in key:
        return None
    if "eagle3" in key:
        return "eagle3"
    if "eagle" in key:
        return "eagle"
    return "draft_model" if key else None


def _layer_bytes(layout: WeightLayout, index: int) -> int:
    return sum(layout.layer_tensors[index])


def draft_cost(
    spec: Speculative,
    target: Architecture,
    target_layout: WeightLayout,
    kv_bytes: float,
    tp: int,
    dense_dtype: str,
    mla_cache: Callable[[Architecture], MlaCache],
) -> DraftCost:
    """The drafter's bytes on one GPU of a target served at TP ``tp`` (``target_layout``: the
    target's weights at that TP, ``kv_bytes``: bytes per KV element, ``mla_cache``: what the
    engine caches for a model's latent attention, ``Engine.mla_cache``)."""
    method = spec.method
    if method not in METHODS:
        raise InvalidRequest(
            f"speculative method {method!r} is not modelled; one of {', '.join(METHODS)}",
            field="speculative.method",
        )
    who = spec.label or method
    if method in DRAFTLESS:
        return DraftCost(
            0,
            0,
            f"speculative decoding ({method}): proposals from the prompt on "
            "the CPU, nothing on the GPU",
        )
    if spec.draft is not None:
        dtp = spec.draft_tp or tp
        if dtp not in (1, tp):
            raise InvalidRequest(
                f"draft_tensor_parallel_size must be 1 or the target's {tp}",
                field="speculative.draft_tensor_parallel_size",
            )
        if dtp not in spec.draft.valid_tensor_parallel_sizes:
            raise InvalidRequest(
                f"the drafter cannot be split {dtp} ways (its heads); set "
                "draft_tensor_parallel_size to 1",
                field="speculative.draft_tensor_parallel_size",
            )
        layout = weight_layout(spec.draft, None, dtp, 1, Placement(vocab_padding=64))
        weights = layout.per_stage[0]
        shared = ""
        if method != "draft_model":
            # EAGLE heads read the target's embedding (and EAGLE-1 its lm_head).
            weights -= layout.by_component.get("embeddings", 0) // dtp
            shared = "; the embedding is the target's"
        draft = spec.draft
        kv = stage_kv_layouts(draft, kv_bytes, dtp, 1, mla_cache(draft))[0].full_token_bytes
        return DraftCost(
            weights,
            kv,
            f"speculative decoding ({method}, {who}, TP {dtp}): drafter weights "
            f"{weights / GIB:.3f} GiB and {kv} KV bytes per token per GPU{shared}",
        )
    if METHODS[method]:
        raise InvalidRequest(
            "a draft model needs its config: name it in speculative.model (a catalog or store "
            "model) or post speculative.hf_config",
            field="speculative.model",
        )
    size = bytes_per_element(dense_dtype)
    h = target.hidden_size
    index = target.num_layers - 1 if method == "mtp" else 0
    layer = _layer_bytes(target_layout, index)
    extra = int(_FC_INPUTS[method] * h * h * size)
    if method == "eagle3":
        extra += int(cdiv(EAGLE3_DRAFT_VOCAB, tp) * h * size)
    kv = stage_kv_layouts(target, kv_bytes, tp, 1, mla_cache(target))[0].layer_token_bytes
    what = {
        "eagle": "one decoder layer of the target plus its 2h→h fc",
        "eagle3": f"one decoder layer of the target, its 3h→h fc and a {EAGLE3_DRAFT_VOCAB}-"
        "token head",
        "mtp": "one multi-token-prediction layer shaped like the target's last, with its "
        "2h→h eh_proj",
    }[method]
    return DraftCost(
        layer + extra,
        kv,
        f"speculative decoding ({method}): {what}, {(layer + extra) / GIB:.3f} GiB and one "
        f"layer's KV ({kv} bytes per token) per GPU (the head's own config not given: derived "
        "from the target)",
    )
