"""The normalized shape of a decoder-only language model: one immutable :class:`Architecture`.

Built once from a Hugging Face ``config.json`` (:func:`service.estimator.model.read_config`)
and read by every formula, which never sees raw config keys. Two inventories describe every
tensor of the language model, with the roles formulas need (:mod:`.shapes`):
:attr:`Architecture.linear_modules` (each projection, lm_head last) and
:attr:`Architecture.parameter_groups` (embeddings, norms, sinks, router biases). A multimodal
wrapper's vision tower is listed apart (:attr:`vision_modules`, :attr:`vision_parameter_groups`),
so code that walks the language model (fine-tuning, LoRA targets) does not meet it.
Inventories are derived once per instance and kept on it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from service.estimator import memo
from service.estimator.model.family_traits import Family
from service.estimator.model.quantization import QuantizationSpec
from service.estimator.model.shapes import (
    ATTENTION_LAYER_TYPES,
    CHUNKED_ATTENTION,
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    AttentionKind,
    AudioSpec,
    GlobalAttentionSpec,
    IndexerSpec,
    LinearAttentionSpec,
    LinearModule,
    MlaSpec,
    MoeSpec,
    ParameterGroup,
    VisionSpec,
)

__all__ = ["Architecture"]


@dataclass(frozen=True)
class Architecture:
    """The normalized, validated shape of one decoder-only model.

    Sizes follow transformers' naming: ``head_dim`` is the query/key head size (for MLA
    ``qk_nope_head_dim + qk_rope_head_dim``), ``v_head_dim`` the value head size.
    ``intermediate_size`` is the dense MLP width; in families whose every layer is MoE
    (Mixtral, Phi-3.5-MoE, gpt-oss) it equals the expert width. ``attention_bias`` is the
    bias on the q/k/v projections and ``attention_out_bias`` on the output projection.
    ``norms_per_layer`` counts the hidden-size norms of one decoder layer; ``qk_norm`` says
    whether queries and keys are normalized per head (``"per_head"``) or over the whole
    projection (``"full_width"``). ``rope_scaling_factor`` is the factor of a ``linear`` or
    ``dynamic`` rope scaling (1.0 without one): the positions a precomputed rotary cache spans
    grow by it. ``rope_type``, ``rope_factor`` and ``original_max_position_embeddings`` are the
    config's rope scaling as written (any type), ``model_max_length`` a context limit some
    configs state (Cohere): engines derive their default context from them.
    ``attn_logit_softcapping`` / ``final_logit_softcapping`` are the caps of
    ``tanh(x / cap) · cap`` on attention scores and on the final logits (None: off).
    ``attention_softmax_fp32`` says whether eager attention takes its softmax in fp32.
    ``family`` holds the family's traits (:mod:`.families`). ``layer_types`` names each
    layer's token mixer: full, sliding-window or chunked attention (``attention_chunk_size``
    tokens per chunk), or a linear-attention mixer (``linear_attention``) that keeps a
    per-sequence state instead of per-token keys and values. ``layer_norm_names`` are the
    hidden-size norms of one decoder layer as this config builds them.
    ``embedding_size`` is the width of the token embedding and of lm_head's input when it is
    not ``hidden_size`` (OPT-350m's ``word_embed_proj_dim``: ``project_in`` / ``project_out``
    map between the two); ``position_embeddings`` the rows of a learned absolute position
    table (0: none); ``final_norm`` whether a norm precedes lm_head. ``global_attention`` is
    the full-attention layers' own geometry (Gemma 4's 512-wide heads), ``kv_shared_layers``
    the layers that read an earlier layer's keys and values (no k/v projections, no cache of
    their own); ``per_layer_input`` / ``per_layer_vocab`` size Gemma 4's per-layer embeddings
    (a ``per_layer_vocab × num_layers · per_layer_input`` table); ``wide_mlp_layers`` hold a
    dense MLP twice ``intermediate_size`` wide. ``audio`` is a wrapper's audio tower (Gemma 4
    E2B/E4B), listed with the vision tower's tensors.
    """

    model_type: str
    family: Family
    num_layers: int
    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    intermediate_size: int
    gated_mlp: bool
    hidden_act: str
    tie_word_embeddings: bool
    attention_bias: bool
    attention_out_bias: bool
    mlp_bias: bool
    lm_head_bias: bool
    norm: str
    norm_bias: bool
    norms_per_layer: int
    qk_norm: str | None
    dtype: str
    max_position_embeddings: int | None
    sliding_window: int | None
    layer_types: tuple[str, ...]
    mla: MlaSpec | None = None
    moe: MoeSpec | None = None
    quantization: QuantizationSpec | None = None
    attention_sinks: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    wrapper_model_type: str | None = None
    architectures: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()
    vision: VisionSpec | None = None
    rope_scaling_factor: float = 1.0
    rope_type: str | None = None
    rope_factor: float = 1.0
    original_max_position_embeddings: int | None = None
    model_max_length: int | None = None
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    attention_softmax_fp32: bool = True
    layer_norm_names: tuple[str, ...] = ()
    linear_attention: LinearAttentionSpec | None = None
    attention_chunk_size: int | None = None
    embedding_size: int | None = None
    position_embeddings: int = 0
    final_norm: bool = True
    global_attention: GlobalAttentionSpec | None = None
    kv_shared_layers: tuple[int, ...] = ()
    per_layer_input: int = 0
    per_layer_vocab: int = 0
    wide_mlp_layers: tuple[int, ...] = ()
    audio: AudioSpec | None = None
    cross_attention_layers: tuple[int, ...] = ()
    indexer: IndexerSpec | None = None

    def __hash__(self) -> int:
        # An Architecture keys the estimator's caches and a request looks several of them up;
        # the generated hash would walk all ~40 fields each time. It is frozen: hash once.
        cached: int | None = self.__dict__.get("_cached_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
            object.__setattr__(self, "_cached_hash", cached)
        return cached

    # ---- traits ----------------------------------------------------------------------

    @property
    def family_name(self) -> str:
        """The family as people name it (``gemma3`` for both the wrapper and ``gemma3_text``)."""
        return self.family.name

    @property
    def norm_fp32(self) -> bool:
        """Norms compute in fp32 and keep fp32 copies for backward (Gemma)."""
        return self.family.modeling.norm_fp32

    @property
    def rope_tables(self) -> int:
        """Distinct rotary tables an engine precomputes (Gemma 3: its global and local ropes)."""
        return self.family.modeling.rope_tables

    @property
    def eager_mask_kept(self) -> bool:
        """Eager attention keeps a boolean causal mask per layer for backward (Qwen v1)."""
        return self.family.modeling.eager_mask_kept

    @property
    def context_includes_rope_scaling(self) -> bool:
        """``max_position_embeddings`` already is the rope-scaled context (Gemma 3)."""
        return self.family.modeling.context_includes_rope_scaling

    @property
    def fp16_unsafe(self) -> bool:
        """Activations overflow float16 (Gemma 2 / 3, GLM-4): engines refuse fp16 for it."""
        return self.family.modeling.fp16_unsafe

    @property
    def attn_output_gate(self) -> bool:
        """Queries carry a sigmoid output gate of their own width (Qwen3-Next)."""
        return self.family.modeling.attn_output_gate

    @property
    def embedding_rows(self) -> int:
        """Rows of the token embedding (vocab_size, and Llama 3.2 Vision's 8 more)."""
        return self.vocab_size + self.family.modeling.extra_embedding_rows

    @property
    def embed_width(self) -> int:
        """Width of the token embedding and of lm_head's input."""
        return self.embedding_size or self.hidden_size

    @property
    def vllm_runs_mla(self) -> bool:
        """vLLM runs the latent attention as MLA, caching the latent (not MiniCPM3)."""
        return self.mla is not None and self.family.modeling.vllm_mla

    @property
    def vllm_rope_fp32(self) -> bool:
        """vLLM keeps this model's rotary table in float32 (gpt-oss), not the model dtype."""
        return self.family.modeling.vllm_rope_fp32

    @property
    def rope_dim(self) -> int:
        """Width of the rotary part of a query/key head."""
        return self.mla.qk_rope_head_dim if self.mla is not None else self.head_dim

    # ---- layer layout ----------------------------------------------------------------

    @cached_property
    def layer_linear_modules(self) -> tuple[tuple[LinearModule, ...], ...]:
        """The linear modules of each decoder layer, indexed by layer (one pass over the
        inventory, instead of a scan of every module's layer list per layer)."""
        out: list[list[LinearModule]] = [[] for _ in range(self.num_layers)]
        for m in self.linear_modules:
            for i in m.layers:
                out[i].append(m)
        return tuple(tuple(mods) for mods in out)

    @cached_property
    def moe_layer_set(self) -> frozenset[int]:
        return frozenset(self.moe.layers) if self.moe is not None else frozenset()

    def is_moe_layer(self, i: int) -> bool:
        """Whether decoder layer ``i`` holds routed experts."""
        if not 0 <= i < self.num_layers:
            raise IndexError(f"layer {i} out of range 0..{self.num_layers - 1}")
        return i in self.moe_layer_set

    @property
    def moe_layers(self) -> tuple[int, ...]:
        return self.moe.layers if self.moe is not None else ()

    @cached_property
    def dense_layers(self) -> tuple[int, ...]:
        moe = self.moe_layer_set
        return tuple(i for i in range(self.num_layers) if i not in moe)

    @property
    def num_moe_layers(self) -> int:
        return len(self.moe_layers)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def is_sliding_layer(self, i: int) -> bool:
        return self.layer_types[i] == SLIDING_ATTENTION

    @cached_property
    def num_sliding_layers(self) -> int:
        return sum(1 for t in self.layer_types if t == SLIDING_ATTENTION)

    @property
    def num_full_attention_layers(self) -> int:
        return sum(1 for t in self.layer_types if t == FULL_ATTENTION)

    @cached_property
    def num_chunked_layers(self) -> int:
        return sum(1 for t in self.layer_types if t == CHUNKED_ATTENTION)

    @cached_property
    def attention_layers(self) -> tuple[int, ...]:
        """Layers whose token mixer is softmax attention (they hold per-token KV)."""
        return tuple(i for i, t in enumerate(self.layer_types) if t in ATTENTION_LAYER_TYPES)

    @cached_property
    def attention_kinds(self) -> tuple[AttentionKind, ...]:
        """The attention layers grouped by geometry (one kind for most models)."""
        shared = frozenset(self.kv_shared_layers)
        cross = frozenset(self.cross_attention_layers)
        g = self.global_attention
        groups: dict[tuple[str, bool, bool], list[int]] = {}
        for i in self.attention_layers:
            t = self.layer_types[i]
            key = (t if g is not None else "", i not in shared, i in cross)
            groups.setdefault(key, []).append(i)
        out = []
        for (t, own, is_cross), layers in groups.items():
            full = g is not None and t == FULL_ATTENTION
            out.append(
                AttentionKind(
                    layers=tuple(layers),
                    layer_type=t,
                    head_dim=g.head_dim if full and g is not None else self.head_dim,
                    kv_heads=g.kv_heads if full and g is not None else self.num_kv_heads,
                    own_kv=own,
                    k_eq_v=full and g is not None and g.k_eq_v,
                    cross=is_cross,
                )
            )
        return tuple(out)

    @cached_property
    def dense_mlp_layers(self) -> tuple[int, ...]:
        """Layers holding the dense MLP: those without experts, or every layer when the
        experts run beside it (Gemma 4's 26B-A4B)."""
        if self.moe is not None and self.moe.beside_dense:
            return tuple(range(self.num_layers))
        return self.dense_layers

    @cached_property
    def linear_attention_layers(self) -> tuple[int, ...]:
        """Layers whose token mixer is linear attention (a per-sequence state)."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == LINEAR_ATTENTION)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def q_proj_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_proj_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    # ---- inventories (derived once) ---------------------------------------------------

    @cached_property
    def linear_modules(self) -> tuple[LinearModule, ...]:
        """Every linear projection of the language model, lm_head last."""
        from service.estimator.model.inventory import linear_modules

        return linear_modules(self)

    @cached_property
    def parameter_groups(self) -> tuple[ParameterGroup, ...]:
        """Every non-linear tensor: embeddings, norms, sinks, router correction biases."""
        from service.estimator.model.inventory import parameter_groups

        return parameter_groups(self)

    @cached_property
    def vision_modules(self) -> tuple[LinearModule, ...]:
        """The vision tower's linear projections (empty without one)."""
        from service.estimator.model.audio import audio_modules
        from service.estimator.model.vision import vision_modules

        return (*vision_modules(self.vision), *audio_modules(self.audio))

    @cached_property
    def vision_parameter_groups(self) -> tuple[ParameterGroup, ...]:
        """The vision tower's other tensors and the projector (empty without one)."""
        from service.estimator.model.audio import audio_parameter_groups
        from service.estimator.model.vision import vision_parameter_groups

        return (*vision_parameter_groups(self.vision), *audio_parameter_groups(self.audio))

    @cached_property
    def valid_tensor_parallel_sizes(self) -> tuple[int, ...]:
        """TP sizes that divide the attention heads and fit the KV heads (divide or multiple,
        heads replicated beyond their count); MLA has no KV heads to place."""
        heads, kv = self.num_attention_heads, self.num_kv_heads
        lin = self.linear_attention
        return tuple(
            t
            for t in range(1, heads + 1)
            if heads % t == 0
            and (self.mla is not None or kv % t == 0 or t % kv == 0)
            # vLLM splits a linear-attention mixer's key and value heads evenly.
            and (lin is None or (lin.num_key_heads % t == 0 and lin.num_value_heads % t == 0))
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields (for the model record's ``architecture``): the family as its
        name, per-layer lists as counts, the MoE layer list as its length."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "family":
                value = self.family_name
            elif f.name == "layer_types":
                counts: dict[str, int] = {}
                for t in value:
                    counts[t] = counts.get(t, 0) + 1
                out["layer_type_counts"] = counts
                continue
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                value = {
                    k: list(v) if isinstance(v, tuple) else v
                    for k, v in dataclasses.asdict(value).items()
                    if k != "layers"
                }
            elif isinstance(value, tuple):
                if len(value) > 16:
                    continue
                value = list(value)
            out[f.name] = value
        if self.moe is not None:
            out["moe"]["num_moe_layers"] = self.num_moe_layers
        return out


# Every cached value derived from an architecture is keyed on it: size it once, not per entry.
memo.size_once(Architecture)
