"""What a family's modeling code builds: its traits, as transformers' ``modeling_X``.

:class:`Modeling` says which attention and MLP layout the family instantiates, where its
biases come from, its norms and their dtype, how its layers alternate between full and
sliding-window attention, its mixture of experts and what its kernels do (softmax dtype, logit
caps, sinks). :class:`Flag` is a bias or norm switch that is fixed or read from a config key;
the enumerations name the attention and MLP layouts, the layer layouts, where a mixture of
experts sits and how its shared experts are built, and which norms a layer holds;
:class:`MoeSchema` and :class:`QkNorm` group the traits of a mixture of experts and of
query/key norms. The config's keys and their defaults are the schema's
(:mod:`.config_schema`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "ATTENTION_BIAS",
    "OFF",
    "ON",
    "Attention",
    "Flag",
    "LayerLayout",
    "LinearMixer",
    "Mlp",
    "Modeling",
    "MoePlacement",
    "MoeSchema",
    "NormRule",
    "QkNorm",
    "SharedExperts",
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
    # Kimi-Linear: layer_types, else linear_attn_config's full_attn_layers / kda_layers
    # (1-indexed), else full attention on every 4th layer from layer 4.
    KIMI_LINEAR = "kimi_linear"


class LinearMixer(StrEnum):
    """The linear-attention token mixer a family's linear layers run."""

    GATED_DELTANET = "gated_deltanet"  # Qwen3-Next / Qwen3.5: linear_attn module
    # Kimi Delta Attention (Kimi-Linear): q/k/v projections with a short convolution each, a
    # low-rank per-channel forget gate, a beta projection and a low-rank output gate, under
    # self_attn.
    KDA = "kda"


class MoePlacement(StrEnum):
    ALL = "all"  # every decoder layer
    SPARSE_STEP = "sparse_step"  # every decoder_sparse_step-th, minus mlp_only_layers (Qwen)
    FIRST_K_DENSE = "first_k_dense"  # from first_k_dense_replace on (DeepSeek)
    # moe_layers if given, else every interleave_moe_layer_step-th layer (Llama 4)
    INTERLEAVE = "interleave"
    # mlp_layer_types' "sparse" layers if given, else from first_k_dense_replace on (GLM-5,
    # GLM-4.7-Flash)
    MLP_LAYER_TYPES = "mlp_layer_types"


class SharedExperts(StrEnum):
    NONE = "none"
    GATED_ONE = "gated_one"  # one shared expert of its own width, behind a sigmoid gate (Qwen)
    FUSED_N = "fused_n"  # n_shared_experts fused into one MLP of n × expert width (DeepSeek)
    ONE = "one"  # one shared expert of the routed experts' width, no gate (Llama 4)


class NormRule(StrEnum):
    """Which hidden-size norms a decoder layer holds."""

    FIXED = "fixed"  # layer_norms, plus each conditional_norms entry whose flag holds
    # Falcon: input + post-attention without parallel_attn; with it, ln_attn + ln_mlp when
    # num_ln_in_parallel_attn is 2 (its default under new_decoder_architecture), else one.
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
    # The config flag that builds the experts at all (Gemma 4's enable_moe_block); None: always.
    enabled: Flag | None = None
    in_mlp: bool = True  # router and experts inside the mlp module; False: on the layer itself
    # Gemma 4's router scales its input per channel (router.scale) and its output per expert
    # (router.per_expert_scale).
    router_scales: bool = False
    beside_dense: bool = False  # the dense MLP stays on every layer, beside the experts
    # MLP_LAYER_TYPES without a list: the config names its dense prefix (first_k_dense_replace),
    # or its config class has no such key and the family's default stands (GLM-4.7-Flash: 1).
    dense_prefix_in_config: bool = True


@dataclass(frozen=True)
class QkNorm:
    """Query/key norms: per head (``head_dim`` weights) or over the whole projection."""

    per_head: bool = True
    enabled: Flag = ON
    names: tuple[str, str] = ("q_norm", "k_norm")
    bias: bool = False  # a LayerNorm with bias (Phi) instead of a weight-only norm


@dataclass(frozen=True)
class Modeling:
    """What one family's modeling code builds (module docstring)."""

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
    # Queries carry an output gate of their own width: q_proj is twice as wide (Qwen3-Next).
    attn_output_gate: bool = False
    qk_norm: QkNorm | None = None
    moe: MoeSchema | None = None
    layout: LayerLayout = LayerLayout.FULL
    alternating_period: int = 2  # ALTERNATING: every n-th layer is full attention
    sinks: bool = False  # per-head attention sink logits (gpt-oss)
    softcapping: bool = False  # reads attn_logit_softcapping / final_logit_softcapping
    softmax_fp32: Flag = ON  # eager attention's softmax in fp32
    eager_mask_kept: bool = False  # eager attention's torch.where keeps a bool mask (Qwen v1)
    # Activations overflow float16 (vLLM's _FLOAT16_NOT_SUPPORTED_MODELS: gemma2, gemma3, glm4).
    fp16_unsafe: bool = False
    # max_position_embeddings already is the rope-scaled context (Gemma 3's 131072).
    context_includes_rope_scaling: bool = False
    rope_tables: int = 1  # distinct rotary tables (Gemma 3: its global and local ropes)
    # Learned absolute positions: a table of max_position_embeddings + this many rows (OPT's
    # OPTLearnedPositionalEmbedding keeps 2 extra rows); None: rotary, no table.
    position_table_offset: int | None = None
    # The final norm before lm_head exists (OPT drops it when do_layer_norm_before is false).
    final_norm: Flag = ON
    # Gemma 4: the full-attention layers have their own head size (global_head_dim) and, with
    # attention_k_eq_v, their own KV heads (num_global_key_value_heads) and no v_proj.
    global_attention: bool = False
    # Gemma 4: the last num_kv_shared_layers layers reuse an earlier layer's keys and values.
    kv_sharing: bool = False
    # Gemma 4 E2B/E4B: per-layer embeddings (hidden_size_per_layer_input wide per layer).
    per_layer_embeddings: bool = False
    # Gemma 4 E2B: use_double_wide_mlp doubles the dense MLP of the KV-shared layers.
    double_wide_shared_mlp: bool = False
    last_layer_full: bool = False  # the last layer is full attention whatever the pattern says
    # Qwen3.5's Gated DeltaNet projects q/k/v, z, b and a separately (in_proj_qkv, in_proj_z,
    # in_proj_b, in_proj_a) where Qwen3-Next fuses them (in_proj_qkvz, in_proj_ba).
    linear_attention_split: bool = False
    # Llama 3.2 Vision: the layers cross_attention_layers lists attend to the image through a
    # cross_attn module (q/k/v/o, per-head q/k norms, two scalar gates) instead of self_attn;
    # only they carry q/k norms.
    cross_attention: bool = False
    # Rows the token embedding holds beyond vocab_size (Llama 3.2 Vision: 8 image tokens).
    extra_embedding_rows: int = 0
    # DeepSeek sparse attention: a lightning indexer beside the latent attention
    # (DeepSeek-V3.2, GLM-5), on the layers indexer_types marks "full".
    indexer: bool = False
    linear_mixer: LinearMixer = LinearMixer.GATED_DELTANET
    # vLLM keeps the linear-attention recurrent state in the config's mamba_ssm_dtype (Qwen3.5).
    ssm_dtype_from_config: bool = False
    # vLLM runs the latent attention as MLA and caches the latent (its is_deepseek_mla model
    # types); False: as standard attention over every head, V padded to the key's width
    # (vllm/model_executor/models/minicpm3.py, MiniCPM3).
    vllm_mla: bool = True
    # vLLM builds this family's rotary cos/sin table in float32 whatever the model dtype
    # (vllm/model_executor/models/gpt_oss.py: OAIAttention.__init__, get_rope(...,
    # dtype=torch.float32), v0.10.1 - v0.19.0); other families' tables take the model dtype.
    vllm_rope_fp32: bool = False
