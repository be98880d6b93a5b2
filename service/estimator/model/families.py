"""The family table: how each transformers model family builds its modules, as data.

One :class:`Family` per ``model_type`` says, field by field, what the family's modeling code
does: which attention and MLP layout it instantiates, where its biases come from, its norms
and their dtype, how its layers alternate between full and sliding-window attention, its
mixture of experts, the config keys it reads under other names (transformers'
``attribute_map``) and the defaults its ``*Config`` class applies to keys a config leaves out.
Formulas read these traits from the :class:`~service.estimator.model.Architecture`; nothing
asks for a family by name. A family that differs from its parent says only how
(``dataclasses.replace``), as transformers' ``modular_*.py`` files do.

Adding a family is one entry here (docs/CONTRIBUTING.md); its counting rules are written out
in docs/architectures.md and checked against transformers on the meta device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

__all__ = [
    "ARCHITECTURE_CLASSES",
    "FAMILIES",
    "GENERIC_DECODER",
    "GENERIC_DECODER_KEYS",
    "NOT_A_DENSE_DECODER",
    "SUPPORTED_MODEL_TYPES",
    "WRAPPER_TEXT_TYPES",
    "Attention",
    "Family",
    "Flag",
    "KvHeads",
    "LayerLayout",
    "Mlp",
    "ModuleNames",
    "MoePlacement",
    "MoeSchema",
    "NormRule",
    "QkNorm",
    "SharedExperts",
    "family_for",
]


@dataclass(frozen=True)
class Flag:
    """A boolean trait: a constant, or a config key (optionally negated, e.g. ``no_bias``)."""

    key: str | None = None
    const: bool = False
    negate: bool = False

    @classmethod
    def of(cls, value: bool) -> Flag:
        return cls(const=value)

    @classmethod
    def config(cls, key: str, *, negate: bool = False) -> Flag:
        return cls(key=key, negate=negate)


OFF = Flag.of(False)
ON = Flag.of(True)
ATTENTION_BIAS = Flag.config("attention_bias")


class Attention(StrEnum):
    STANDARD = "standard"  # q_proj, k_proj, v_proj, o_proj
    FUSED_QKV = "fused_qkv"  # qkv_proj, o_proj (Phi-3)
    QWEN_C_ATTN = "qwen_c_attn"  # c_attn (fused, full heads), c_proj (Qwen v1)
    MLA = "mla"  # DeepSeek's latent attention


class Mlp(StrEnum):
    GATED = "gated"  # gate_proj, up_proj, down_proj
    FUSED_GATE_UP = "fused_gate_up"  # gate_up_proj, down_proj
    PLAIN = "plain"  # c_fc, c_proj (StarCoder2)
    PLAIN_FC = "plain_fc"  # fc1, fc2 (Phi-1/2)
    PLAIN_DENSE = "plain_dense"  # dense_h_to_4h, dense_4h_to_h (Falcon)
    QWEN_W = "qwen_w"  # w1, w2, c_proj; intermediate_size counts w1 and w2 together


class LayerLayout(StrEnum):
    FULL = "full"  # every layer full attention
    ALL_SLIDING = "all_sliding"  # every layer sliding when a window is set
    QWEN2 = "qwen2"  # sliding from max_window_layers on, when use_sliding_window
    QWEN2_MOE = "qwen2_moe"  # odd layers below max_window_layers, when use_sliding_window
    ALTERNATING = "alternating"  # every `pattern`-th layer full, the rest sliding
    GEMMA3 = "gemma3"  # as ALTERNATING with the config's sliding_window_pattern (default 6)
    # Llama 4: layers that use RoPE attend within chunks of attention_chunk_size, the NoPE
    # layers (every no_rope_layer_interval-th, or no_rope_layers' zeros) attend to everything.
    LLAMA4_CHUNKED = "llama4_chunked"
    # Qwen3-Next: linear attention, with full attention every full_attention_interval-th layer.
    HYBRID_LINEAR = "hybrid_linear"


class MoePlacement(StrEnum):
    ALL = "all"  # every decoder layer
    SPARSE_STEP = "sparse_step"  # every decoder_sparse_step-th, minus mlp_only_layers (Qwen)
    FIRST_K_DENSE = "first_k_dense"  # from first_k_dense_replace on (DeepSeek)
    # moe_layers if given, else every interleave_moe_layer_step-th layer (Llama 4)
    INTERLEAVE = "interleave"


class SharedExperts(StrEnum):
    NONE = "none"
    GATED_ONE = "gated_one"  # one shared expert of its own width, behind a sigmoid gate (Qwen)
    FUSED_N = "fused_n"  # n_shared_experts fused into one MLP of n × expert width (DeepSeek)
    ONE = "one"  # one shared expert of the routed experts' width, no gate (Llama 4)


class KvHeads(StrEnum):
    """How the config says how many key/value heads there are."""

    STANDARD = "standard"  # num_key_value_heads (family keys), else every head
    # Falcon: num_kv_heads with new_decoder_architecture, else 1 with multi_query, else all.
    FALCON = "falcon"


class NormRule(StrEnum):
    """Which hidden-size norms a decoder layer holds."""

    FIXED = "fixed"  # layer_norms, plus each conditional_norms entry whose flag holds
    # Falcon: input + post-attention without parallel_attn; with it, ln_attn + ln_mlp when
    # num_ln_in_parallel_attn is 2 (its default under new_decoder_architecture), else one.
    FALCON = "falcon"


class LlamaCppType(StrEnum):
    """What llama.cpp's loader makes of the family's 80-layer models, which llama-quantize's
    presets read (``LLM_TYPE_70B``: src/models/llama.cpp with GQA, qwen2.cpp, olmo.cpp), and
    whether its quantize rules treat the architecture as Falcon (``LLM_ARCH_FALCON``)."""

    OTHER = "other"
    TYPE_70B_WITH_GQA = "type_70b_with_gqa"  # convert writes these as llama (Llama, Mistral)
    TYPE_70B = "type_70b"  # Qwen2, OLMo
    FALCON = "falcon"


@dataclass(frozen=True)
class MoeSchema:
    """How a family lays out and configures its mixture of experts."""

    width_key: str  # config key of one routed expert's intermediate size
    placement: MoePlacement = MoePlacement.ALL
    shared: SharedExperts = SharedExperts.NONE
    shared_path: str = "shared_experts"
    router_name: str = "gate"
    router_is_nn_linear: bool = False
    router_bias: bool = False
    expert_bias: bool = False
    e_score_correction_bias: bool = False
    router_dtype: str | None = None
    zero_experts_means_dense: bool = False  # Qwen: num_experts 0 builds a dense model
    shared_bias_follows_mlp_bias: bool = False  # DeepSeek-V2's mlp_bias reaches the shared MLP


@dataclass(frozen=True)
class QkNorm:
    """Query/key norms: per head (``head_dim`` weights) or over the whole projection."""

    per_head: bool = True
    enabled: Flag = ON
    names: tuple[str, str] = ("q_norm", "k_norm")
    bias: bool = False  # a LayerNorm with bias (Phi) instead of a weight-only norm


@dataclass(frozen=True)
class ModuleNames:
    """Module paths of the family's modeling code (for peft targets and quantizer exclusions)."""

    prefix: str = "model"
    embed: str = "embed_tokens"
    final_norm: str = "norm"
    layers: str = "layers"
    attn: str = "self_attn"
    mlp: str = "mlp"
    qkv: str = "qkv_proj"  # a fused q/k/v projection
    o: str = "o_proj"  # the attention output projection


@dataclass(frozen=True)
class Family:
    """Traits of one transformers family (module docstring)."""

    name: str  # the family as people name it (gemma3 for both gemma3 and gemma3_text)
    model_type: str = ""  # the config's model_type for it, when not `name` (gemma3_text)
    attention: Attention = Attention.STANDARD
    qkv_bias: Flag = ATTENTION_BIAS
    o_bias: Flag = ATTENTION_BIAS
    mlp: Mlp = Mlp.GATED
    mlp_bias: Flag = OFF
    lm_head_bias: Flag = OFF
    norm: str = "rmsnorm"
    norm_bias: bool = False
    # Gemma's RMSNorm computes in fp32 and keeps fp32 copies for backward.
    norm_fp32: bool = False
    layer_norms: tuple[str, ...] = ("input_layernorm", "post_attention_layernorm")
    # Norms a layer holds only when a config flag says so (StableLM's parallel residual).
    conditional_norms: tuple[tuple[str, Flag], ...] = ()
    norm_rule: NormRule = NormRule.FIXED
    norm_weights: bool = True  # OLMo's LayerNorm has no weight and no bias
    kv_heads: KvHeads = KvHeads.STANDARD
    # The dense MLP width as a multiple of hidden_size when the config gives none (Falcon).
    intermediate_ratio: int | None = None
    # Queries carry an output gate of their own width: q_proj is twice as wide (Qwen3-Next).
    attn_output_gate: bool = False
    # Checkpoints carry this many multi-token-prediction layers beyond num_hidden_layers
    # (config key); neither transformers nor vLLM's main model builds them.
    mtp_key: str | None = None
    qk_norm: QkNorm | None = None
    moe: MoeSchema | None = None
    layout: LayerLayout = LayerLayout.FULL
    alternating_period: int = 2  # ALTERNATING: every n-th layer is full attention
    # A config flag that must be on for the sliding window to apply (Qwen's use_sliding_window).
    sliding_window_switch: str | None = None
    names: ModuleNames = ModuleNames()
    sinks: bool = False  # per-head attention sink logits (gpt-oss)
    softcapping: bool = False  # reads attn_logit_softcapping / final_logit_softcapping
    softmax_fp32: Flag = ON  # eager attention's softmax in fp32
    eager_mask_kept: bool = False  # eager attention's torch.where keeps a bool mask (Qwen v1)
    # Activations overflow float16 (vLLM's _FLOAT16_NOT_SUPPORTED_MODELS: gemma2, gemma3, glm4).
    fp16_unsafe: bool = False
    # max_position_embeddings already is the rope-scaled context (Gemma 3's 131072).
    context_includes_rope_scaling: bool = False
    rope_tables: int = 1  # distinct rotary tables (Gemma 3: its global and local ropes)
    head_dim_key: str = "head_dim"
    # Canonical key -> the keys this family's config uses for it, in order of precedence.
    keys: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # peft 0.21 maps pre-fusion expert projection names onto the fused 3-D expert weights
    # (`peft.utils.transformers_weight_conversion._MOE_TARGET_MODULE_MAPPING`).
    expert_target_aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    llamacpp_type: LlamaCppType = LlamaCppType.OTHER

    def __hash__(self) -> int:
        return hash(self.name)


def _frozen(**kw: Any) -> Mapping[str, Any]:
    return MappingProxyType(kw)


def _keys(**kw: tuple[str, ...]) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType(kw)


_QWEN_MOE_TARGETS = _frozen(
    gate_proj="experts.gate_up_proj", up_proj="experts.gate_up_proj", down_proj="experts.down_proj"
)
_SANDWICH_NORMS = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)

LLAMA = Family(
    "llama",
    mlp_bias=Flag.config("mlp_bias"),
    llamacpp_type=LlamaCppType.TYPE_70B_WITH_GQA,
    defaults=_frozen(tie_word_embeddings=False, attention_bias=False, mlp_bias=False),
)
MISTRAL = Family(
    "mistral",
    llamacpp_type=LlamaCppType.TYPE_70B_WITH_GQA,
    qkv_bias=OFF,
    o_bias=OFF,
    layout=LayerLayout.ALL_SLIDING,
    defaults=_frozen(tie_word_embeddings=False, num_key_value_heads=8, sliding_window=4096),
)
QWEN2 = Family(
    "qwen2",
    llamacpp_type=LlamaCppType.TYPE_70B,
    qkv_bias=ON,
    o_bias=OFF,
    layout=LayerLayout.QWEN2,
    sliding_window_switch="use_sliding_window",
    defaults=_frozen(
        tie_word_embeddings=False,
        use_sliding_window=False,
        sliding_window=4096,
        max_window_layers=28,
    ),
)
QWEN3 = Family(
    "qwen3",
    qk_norm=QkNorm(),
    layout=LayerLayout.QWEN2,
    sliding_window_switch="use_sliding_window",
    defaults=_frozen(
        tie_word_embeddings=False,
        attention_bias=False,
        use_sliding_window=False,
        sliding_window=4096,
        max_window_layers=28,
    ),
)
GEMMA2 = Family(
    "gemma2",
    norm_fp32=True,
    fp16_unsafe=True,
    layer_norms=_SANDWICH_NORMS,
    layout=LayerLayout.ALTERNATING,
    softcapping=True,
    defaults=_frozen(
        tie_word_embeddings=True,
        attention_bias=False,
        num_key_value_heads=4,
        sliding_window=4096,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
    ),
)
GEMMA3 = dataclasses.replace(
    GEMMA2,
    name="gemma3",
    model_type="gemma3_text",
    qk_norm=QkNorm(),
    layout=LayerLayout.GEMMA3,
    rope_tables=2,
    context_includes_rope_scaling=True,
    defaults=_frozen(
        tie_word_embeddings=True,
        attention_bias=False,
        num_key_value_heads=4,
        sliding_window=4096,
    ),
)
DEEPSEEK_V2_MOE = MoeSchema(
    width_key="moe_intermediate_size",
    placement=MoePlacement.FIRST_K_DENSE,
    shared=SharedExperts.FUSED_N,
    router_dtype="float32",
    shared_bias_follows_mlp_bias=True,
)
DEEPSEEK_V2 = Family(
    "deepseek_v2",
    attention=Attention.MLA,
    mlp_bias=Flag.config("mlp_bias"),
    moe=DEEPSEEK_V2_MOE,
    keys=_keys(num_experts=("n_routed_experts",)),
    defaults=_frozen(
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        first_k_dense_replace=0,
        n_shared_experts=2,
        moe_layer_freq=1,
    ),
    expert_target_aliases=_QWEN_MOE_TARGETS,
)

_TABLE: tuple[Family, ...] = (
    LLAMA,
    dataclasses.replace(LLAMA, name="granite", llamacpp_type=LlamaCppType.OTHER),
    MISTRAL,
    Family(
        "mixtral",
        qkv_bias=OFF,
        o_bias=OFF,
        moe=MoeSchema(width_key="intermediate_size"),
        layout=LayerLayout.ALL_SLIDING,
        keys=_keys(num_experts=("num_local_experts",)),
        defaults=_frozen(
            tie_word_embeddings=False,
            num_key_value_heads=8,
            sliding_window=None,
            num_experts=8,
            num_experts_per_tok=2,
        ),
        expert_target_aliases=_frozen(
            w1="experts.gate_up_proj", w3="experts.gate_up_proj", w2="experts.down_proj"
        ),
    ),
    QWEN2,
    Family(
        "qwen2_moe",
        qkv_bias=Flag.config("qkv_bias"),
        o_bias=OFF,
        moe=MoeSchema(
            width_key="moe_intermediate_size",
            placement=MoePlacement.SPARSE_STEP,
            shared=SharedExperts.GATED_ONE,
            shared_path="shared_expert",
            zero_experts_means_dense=True,
        ),
        layout=LayerLayout.QWEN2_MOE,
        sliding_window_switch="use_sliding_window",
        keys=_keys(num_experts=("num_experts", "num_local_experts")),
        defaults=_frozen(
            tie_word_embeddings=False,
            qkv_bias=True,
            use_sliding_window=False,
            sliding_window=4096,
            max_window_layers=28,
            decoder_sparse_step=1,
            num_experts=60,
            num_experts_per_tok=4,
            moe_intermediate_size=1408,
            shared_expert_intermediate_size=5632,
            mlp_only_layers=[],
        ),
        expert_target_aliases=_QWEN_MOE_TARGETS,
    ),
    QWEN3,
    dataclasses.replace(
        QWEN3,
        name="qwen3_moe",
        moe=MoeSchema(
            width_key="moe_intermediate_size",
            placement=MoePlacement.SPARSE_STEP,
            zero_experts_means_dense=True,
        ),
        layout=LayerLayout.ALL_SLIDING,
        keys=_keys(num_experts=("num_experts", "num_local_experts")),
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            use_sliding_window=False,
            sliding_window=4096,
            num_key_value_heads=4,
            decoder_sparse_step=1,
            num_experts=128,
            num_experts_per_tok=8,
            moe_intermediate_size=768,
            mlp_only_layers=[],
        ),
        expert_target_aliases=_QWEN_MOE_TARGETS,
    ),
    Family(
        "gemma",
        norm_fp32=True,
        defaults=_frozen(tie_word_embeddings=True, attention_bias=False),
    ),
    GEMMA2,
    GEMMA3,
    Family(
        "phi3",
        attention=Attention.FUSED_QKV,
        qkv_bias=OFF,
        o_bias=OFF,
        mlp=Mlp.FUSED_GATE_UP,
        layout=LayerLayout.ALL_SLIDING,
        defaults=_frozen(tie_word_embeddings=False, sliding_window=None),
    ),
    Family(
        "phimoe",
        norm="layernorm",
        norm_bias=True,
        moe=MoeSchema(
            width_key="intermediate_size", router_name="router", router_is_nn_linear=True
        ),
        layout=LayerLayout.ALL_SLIDING,
        lm_head_bias=Flag.config("lm_head_bias"),
        keys=_keys(num_experts=("num_local_experts",)),
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            lm_head_bias=False,
            num_key_value_heads=8,
            sliding_window=None,
            num_experts=16,
            num_experts_per_tok=2,
        ),
    ),
    DEEPSEEK_V2,
    dataclasses.replace(
        DEEPSEEK_V2,
        name="deepseek_v3",
        mlp_bias=OFF,
        moe=dataclasses.replace(
            DEEPSEEK_V2_MOE, e_score_correction_bias=True, shared_bias_follows_mlp_bias=False
        ),
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            first_k_dense_replace=3,
            n_shared_experts=1,
            moe_layer_freq=1,
        ),
    ),
    Family(
        "gpt_oss",
        moe=MoeSchema(
            width_key="intermediate_size", router_name="router", router_bias=True, expert_bias=True
        ),
        layout=LayerLayout.ALTERNATING,
        sinks=True,
        keys=_keys(num_experts=("num_local_experts",)),
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=True,
            num_key_value_heads=8,
            sliding_window=128,
            num_experts=128,
            num_experts_per_tok=4,
        ),
    ),
    Family(
        "olmo2",
        layer_norms=("post_attention_layernorm", "post_feedforward_layernorm"),
        qk_norm=QkNorm(per_head=False),
        defaults=_frozen(tie_word_embeddings=False, attention_bias=False),
    ),
    Family(
        "cohere",
        norm="layernorm",
        layer_norms=("input_layernorm",),
        # Cohere's q/k norms hold (heads, head_dim) weights: the whole projection's width.
        qk_norm=QkNorm(per_head=False, enabled=Flag.config("use_qk_norm")),
        defaults=_frozen(tie_word_embeddings=True, attention_bias=False, use_qk_norm=False),
    ),
    Family(
        "glm",
        o_bias=OFF,
        mlp=Mlp.FUSED_GATE_UP,
        defaults=_frozen(tie_word_embeddings=False, attention_bias=True, num_key_value_heads=2),
    ),
    Family(
        "starcoder2",
        qkv_bias=Flag.config("use_bias"),
        o_bias=Flag.config("use_bias"),
        mlp=Mlp.PLAIN,
        mlp_bias=Flag.config("use_bias"),
        norm="layernorm",
        norm_bias=True,
        layout=LayerLayout.ALL_SLIDING,
        defaults=_frozen(
            tie_word_embeddings=True, use_bias=True, num_key_value_heads=2, sliding_window=None
        ),
    ),
    # The original Qwen (Qwen-7B, Qwen-14B, Qwen-72B): remote code "QWenLMHeadModel".
    Family(
        "qwen",
        attention=Attention.QWEN_C_ATTN,
        qkv_bias=ON,
        o_bias=Flag.config("no_bias", negate=True),
        mlp=Mlp.QWEN_W,
        mlp_bias=Flag.config("no_bias", negate=True),
        layer_norms=("ln_1", "ln_2"),
        names=ModuleNames(
            prefix="transformer", embed="wte", final_norm="ln_f", layers="h", attn="attn"
        ),
        softmax_fp32=Flag.config("softmax_in_fp32"),
        eager_mask_kept=True,
        head_dim_key="kv_channels",
        keys=_keys(max_position_embeddings=("max_position_embeddings", "seq_length")),
        defaults=_frozen(tie_word_embeddings=False, no_bias=True, softmax_in_fp32=False),
    ),
)

_NEW: tuple[Family, ...] = (
    Family(
        "llama4",
        model_type="llama4_text",
        moe=MoeSchema(
            width_key="expert_intermediate_size",
            placement=MoePlacement.INTERLEAVE,
            shared=SharedExperts.ONE,
            shared_path="shared_expert",
            router_name="router",
            router_is_nn_linear=True,
        ),
        layout=LayerLayout.LLAMA4_CHUNKED,
        names=ModuleNames(mlp="feed_forward"),
        keys=_keys(
            num_experts=("num_local_experts",),
            intermediate_size=("intermediate_size_mlp",),
            expert_intermediate_size=("intermediate_size",),
        ),
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            num_key_value_heads=8,
            num_experts=16,
            num_experts_per_tok=1,
            intermediate_size=16384,
            expert_intermediate_size=8192,
            interleave_moe_layer_step=1,
            no_rope_layer_interval=4,
            attention_chunk_size=8192,
        ),
    ),
    Family(
        "qwen3_next",
        qk_norm=QkNorm(),
        attn_output_gate=True,
        moe=MoeSchema(
            width_key="moe_intermediate_size",
            placement=MoePlacement.SPARSE_STEP,
            shared=SharedExperts.GATED_ONE,
            shared_path="shared_expert",
            zero_experts_means_dense=True,
        ),
        layout=LayerLayout.HYBRID_LINEAR,
        keys=_keys(num_experts=("num_experts",)),
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            num_key_value_heads=2,
            head_dim=256,
            decoder_sparse_step=1,
            num_experts=512,
            num_experts_per_tok=10,
            moe_intermediate_size=512,
            shared_expert_intermediate_size=512,
            mlp_only_layers=[],
            full_attention_interval=4,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=128,
            linear_value_head_dim=128,
            linear_num_key_heads=16,
            linear_num_value_heads=32,
        ),
    ),
    Family(
        "glm4_moe",
        o_bias=OFF,
        qk_norm=QkNorm(enabled=Flag.config("use_qk_norm")),
        moe=dataclasses.replace(DEEPSEEK_V2_MOE, e_score_correction_bias=True),
        keys=_keys(num_experts=("n_routed_experts",)),
        mtp_key="num_nextn_predict_layers",
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            use_qk_norm=False,
            first_k_dense_replace=1,
            n_shared_experts=1,
        ),
        expert_target_aliases=_QWEN_MOE_TARGETS,
    ),
    Family(
        "falcon",
        llamacpp_type=LlamaCppType.FALCON,
        attention=Attention.FUSED_QKV,
        qkv_bias=Flag.config("bias"),
        o_bias=Flag.config("bias"),
        mlp=Mlp.PLAIN_DENSE,
        mlp_bias=Flag.config("bias"),
        norm="layernorm",
        norm_bias=True,
        norm_rule=NormRule.FALCON,
        kv_heads=KvHeads.FALCON,
        intermediate_ratio=4,
        names=ModuleNames(
            prefix="transformer",
            embed="word_embeddings",
            final_norm="ln_f",
            layers="h",
            attn="self_attention",
            qkv="query_key_value",
            o="dense",
        ),
        keys=_keys(
            intermediate_size=("ffn_hidden_size",),
            num_key_value_heads=("num_kv_heads", "n_head_kv"),
            hidden_act=("activation",),
        ),
        defaults=_frozen(
            tie_word_embeddings=True,
            bias=False,
            multi_query=True,
            new_decoder_architecture=False,
            parallel_attn=True,
        ),
    ),
    Family(
        "phi",
        qkv_bias=ON,
        o_bias=ON,
        mlp=Mlp.PLAIN_FC,
        mlp_bias=ON,
        lm_head_bias=ON,
        norm="layernorm",
        norm_bias=True,
        layer_norms=("input_layernorm",),
        qk_norm=QkNorm(
            enabled=Flag.config("qk_layernorm"), names=("q_layernorm", "k_layernorm"), bias=True
        ),
        names=ModuleNames(final_norm="final_layernorm", o="dense"),
        defaults=_frozen(tie_word_embeddings=False, qk_layernorm=False),
    ),
    Family(
        "stablelm",
        qkv_bias=Flag.config("use_qkv_bias"),
        o_bias=OFF,
        norm="layernorm",
        norm_bias=True,
        layer_norms=("input_layernorm",),
        conditional_norms=(
            ("post_attention_layernorm", Flag.config("use_parallel_residual", negate=True)),
        ),
        # One LayerNorm (weight only) per head: the whole projection's width.
        qk_norm=QkNorm(
            per_head=False,
            enabled=Flag.config("qk_layernorm"),
            names=("q_layernorm", "k_layernorm"),
        ),
        defaults=_frozen(
            tie_word_embeddings=False,
            use_qkv_bias=False,
            qk_layernorm=False,
            use_parallel_residual=False,
            num_key_value_heads=32,
        ),
    ),
    Family(
        "olmo",
        llamacpp_type=LlamaCppType.TYPE_70B,
        norm="layernorm",
        norm_weights=False,
        defaults=_frozen(tie_word_embeddings=False, attention_bias=False),
    ),
)

#: model_type -> family. gemma3_text is the language model of the gemma3 wrapper.
FAMILIES: Mapping[str, Family] = MappingProxyType(
    {(f.model_type or f.name): f for f in (*_TABLE, *_NEW)}
)

#: Outer model_type of a multimodal wrapper -> model_type of its language model, when the
#: inner config does not name one.
WRAPPER_TEXT_TYPES: Mapping[str, str] = MappingProxyType(
    {"gemma3": "gemma3_text", "llama4": "llama4_text", "mistral3": "mistral"}
)

#: model_type values (inner model_type for multimodal wrappers) this package can describe.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted({*FAMILIES, *WRAPPER_TEXT_TYPES}))

#: transformers model classes (a config's ``architectures``) -> the model_type that builds
#: them, for configs whose model_type this table does not know (Kimi-K2's ``kimi_k2`` runs
#: as ``DeepseekV3ForCausalLM``). Wrapper classes map to the wrapper's type.
ARCHITECTURE_CLASSES: Mapping[str, str] = MappingProxyType(
    {
        "LlamaForCausalLM": "llama",
        "GraniteForCausalLM": "granite",
        "MistralForCausalLM": "mistral",
        "MixtralForCausalLM": "mixtral",
        "Qwen2ForCausalLM": "qwen2",
        "Qwen2MoeForCausalLM": "qwen2_moe",
        "Qwen3ForCausalLM": "qwen3",
        "Qwen3MoeForCausalLM": "qwen3_moe",
        "Qwen3NextForCausalLM": "qwen3_next",
        "GemmaForCausalLM": "gemma",
        "Gemma2ForCausalLM": "gemma2",
        "Gemma3ForCausalLM": "gemma3_text",
        "Gemma3ForConditionalGeneration": "gemma3",
        "Phi3ForCausalLM": "phi3",
        "PhiMoEForCausalLM": "phimoe",
        "PhiForCausalLM": "phi",
        "DeepseekV2ForCausalLM": "deepseek_v2",
        "DeepseekV3ForCausalLM": "deepseek_v3",
        "GptOssForCausalLM": "gpt_oss",
        "OlmoForCausalLM": "olmo",
        "Olmo2ForCausalLM": "olmo2",
        "CohereForCausalLM": "cohere",
        "GlmForCausalLM": "glm",
        "Glm4MoeForCausalLM": "glm4_moe",
        "Starcoder2ForCausalLM": "starcoder2",
        "QWenLMHeadModel": "qwen",
        "Llama4ForCausalLM": "llama4_text",
        "Llama4ForConditionalGeneration": "llama4",
        "Mistral3ForConditionalGeneration": "mistral3",
        "FalconForCausalLM": "falcon",
        "StableLmForCausalLM": "stablelm",
    }
)

#: A decoder whose family is unknown but whose config has the standard keys is read as Llama
#: (but llama.cpp's loader knows nothing of it: no Llama typing in its quantize rules).
GENERIC_DECODER = dataclasses.replace(LLAMA, llamacpp_type=LlamaCppType.OTHER)

#: Config keys of the standard decoder a generic read needs (under ALIASES' names too).
GENERIC_DECODER_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)

#: Keys that say an unknown config is more than a dense decoder: read as one, it would be
#: wrong (experts, latent attention, recurrent mixers), so it is refused instead.
NOT_A_DENSE_DECODER = (
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "moe_intermediate_size",
    "kv_lora_rank",
    "linear_num_value_heads",
    "ssm_state_size",
    "mamba_d_state",
)


def family_for(model_type: str) -> Family | None:
    return FAMILIES.get(model_type)
