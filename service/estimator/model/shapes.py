"""Value objects that describe a model's tensors: modules with their roles, and sub-specs.

A :class:`LinearModule` carries what every formula needs to know about a projection without
asking for it by name: its component (for accounting), how tensor parallelism splits it
(:class:`Shard`, as vLLM's column/row-parallel layers do) and which activation it reads
(:class:`Reads`, which decides what a training step keeps for backward and which inputs
projections share). Names and paths are kept for what matches by name outside this service:
peft's ``target_modules`` and a checkpoint's ``modules_to_not_convert``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "ATTENTION_LAYER_TYPES",
    "CHUNKED_ATTENTION",
    "COMPONENTS",
    "FULL_ATTENTION",
    "LINEAR_ATTENTION",
    "SLIDING_ATTENTION",
    "AttentionKind",
    "AudioSpec",
    "GlobalAttentionSpec",
    "IndexerSpec",
    "LinearAttentionSpec",
    "LinearModule",
    "MlaSpec",
    "MoeSpec",
    "ParameterGroup",
    "Reads",
    "Shard",
    "VisionSpec",
    "VisionTower",
]

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
# Attention within fixed chunks of `attention_chunk_size` tokens (Llama 4's RoPE layers).
CHUNKED_ATTENTION = "chunked_attention"
# A recurrent token mixer (Qwen3-Next's Gated DeltaNet): per-sequence state, no per-token KV.
LINEAR_ATTENTION = "linear_attention"

#: Layer types whose token mixer is softmax attention with a per-token KV cache.
ATTENTION_LAYER_TYPES = frozenset({FULL_ATTENTION, SLIDING_ATTENTION, CHUNKED_ATTENTION})

#: Component names used by both inventories and by ``ParameterCounts.by_component``.
COMPONENTS = (
    "embeddings",
    "attention",
    "mlp",
    "experts",
    "shared_experts",
    "router",
    "norms",
    "lm_head",
    "vision",
)


class Shard(StrEnum):
    """How tensor parallelism places a linear weight on the ranks (Megatron layout, vLLM)."""

    COLUMN = "column"  # outputs split (q/k/v, gate/up, experts' gate_up, MLA's q_b/kv_b)
    ROW = "row"  # inputs split (o_proj, down_proj)
    KV_HEADS = "kv_heads"  # outputs split by KV head; a head is replicated once TP exceeds them
    QKV_HEADS = "qkv_heads"  # fused q/k/v: query heads split, KV heads as KV_HEADS
    REPLICATED = "replicated"  # whole on every rank (routers, MLA's down-projections)
    VOCAB = "vocab"  # vocabulary rows split, padded (lm_head, embeddings)


class Reads(StrEnum):
    """The activation a projection reads; projections reading the same one share its copy."""

    ATTN_INPUT = "attn_input"  # the attention block's normed input
    MLP_INPUT = "mlp_input"  # the MLP block's normed input (experts and routers too)
    ATTN_OUTPUT = "attn_output"  # the attention output (o_proj)
    MLP_ACT = "mlp_act"  # the gated product / activation of the dense MLP (down_proj)
    EXPERT_ACT = "expert_act"  # a routed expert's product (experts' down)
    SHARED_ACT = "shared_act"  # the shared expert's product (its down)
    Q_LATENT = "q_latent"  # MLA: the normed query latent (q_b_proj)
    KV_LATENT = "kv_latent"  # MLA: the normed KV latent (kv_b_proj)
    FINAL = "final"  # the final norm's output (lm_head)
    VISION = "vision"  # inside a vision tower


#: Inputs that are a norm's output: one tensor per block, however many projections read it.
NORM_OUTPUTS = frozenset({Reads.ATTN_INPUT, Reads.MLP_INPUT})


@dataclass(frozen=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank query and key/value paths."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_width(self) -> int:
        """What one token caches per layer: the KV latent and the shared rope key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class GlobalAttentionSpec:
    """The geometry of the full-attention layers when it differs from the sliding ones'
    (Gemma 4: ``global_head_dim`` heads, and with ``attention_k_eq_v`` their own KV head count
    and no ``v_proj``: the keys serve as values)."""

    head_dim: int
    kv_heads: int
    k_eq_v: bool = False


@dataclass(frozen=True)
class AttentionKind:
    """Attention layers that share one geometry: their head size, KV heads, whether they
    project (and cache) keys and values of their own (``own_kv``; Gemma 4's last
    ``num_kv_shared_layers`` read an earlier layer's cache) and whether the keys serve as
    values (``k_eq_v``: no ``v_proj``, though vLLM still caches a V copy)."""

    layers: tuple[int, ...]
    layer_type: str
    head_dim: int
    kv_heads: int
    own_kv: bool = True
    k_eq_v: bool = False
    cross: bool = False  # Llama 3.2 Vision's cross-attention layers (module cross_attn)


@dataclass(frozen=True)
class IndexerSpec:
    """DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2, GLM-5): per layer that runs
    it, a query projection from the q latent (``wq_b``, ``n_heads × head_dim``), one key head
    (``wk`` and a LayerNorm), per-head weights (``weights_proj``), and a cache of one
    ``head_dim`` key per token; attention then reads the ``topk`` best tokens."""

    n_heads: int
    head_dim: int
    topk: int
    layers: tuple[int, ...]


@dataclass(frozen=True)
class LinearAttentionSpec:
    """A Gated DeltaNet token mixer (Qwen3-Next's ``linear_attention`` layers).

    ``in_proj_qkvz`` projects to queries and keys (``num_key_heads × key_head_dim`` each) and
    values and the output gate (``num_value_heads × value_head_dim`` each); ``in_proj_ba`` to
    two scalars per value head; a depthwise causal Conv1d of ``conv_kernel`` taps runs over
    the q/k/v channels (``conv_dim``). What a sequence carries from step to step is a conv
    state (the last taps of those channels) and a recurrent state of ``key_head_dim ×
    value_head_dim`` per value head, whatever its length.
    """

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    # The dtype vLLM keeps the recurrent state in when not the model's: Kimi Delta Attention's
    # is float32 (mamba_utils.kda_state_dtype), Qwen3.5's what its config's mamba_ssm_dtype
    # says (models/config.py: Qwen3_5ForConditionalGenerationConfig).
    recurrent_dtype: str | None = None

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def conv_state_elements(self, tp: int, taps: int) -> int:
        """Conv state of one sequence on one TP rank: ``taps`` columns of its channel share."""
        return self.conv_dim // tp * taps

    def recurrent_state_elements(self, tp: int) -> int:
        """Recurrent state of one sequence on one TP rank (value heads split by TP)."""
        return max(1, self.num_value_heads // tp) * self.key_head_dim * self.value_head_dim


@dataclass(frozen=True)
class MoeSpec:
    """Mixture of experts: routed experts, optional shared experts, which layers are sparse.

    ``shared_expert_intermediate_size`` is the width of the whole shared-expert MLP (for
    DeepSeek that is ``n_shared_experts × moe_intermediate_size``, one fused MLP in
    transformers). ``layers`` lists the decoder layers that hold routed experts.
    """

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    layers: tuple[int, ...]
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    shared_expert_gate: bool = False
    router_bias: bool = False
    e_score_correction_bias: bool = False
    expert_bias: bool = False
    router_dtype: str | None = None
    beside_dense: bool = False  # the dense MLP runs beside the experts on every layer


class VisionTower(StrEnum):
    """The vision towers this package can lay out (:mod:`.vision` holds each one's tensors)."""

    SIGLIP = "siglip"  # SigLIP + Gemma 3's projector
    LLAMA4 = "llama4"  # Llama 4's unfold-conv ViT + pixel-shuffle adapter + projector
    PIXTRAL = "pixtral"  # Pixtral + Mistral 3's norm, patch merger and two-layer projector
    GEMMA4 = "gemma4"  # Gemma 4's vision encoder + embed_vision (.gemma4_towers)
    QWEN3_5 = "qwen3_5"  # Qwen3.5's ViT with its patch merger (.qwen3_5_vision)
    MLLAMA = "mllama"  # Llama 3.2 Vision's tiled ViT, local and global encoders (.mllama_vision)
    QWEN2_VL = "qwen2_vl"  # Qwen2-VL's ViT with its patch merger (.qwen2_vl_vision)
    QWEN2_5_VL = "qwen2_5_vl"  # Qwen2.5-VL's window-attention ViT and merger (.qwen2_vl_vision)


@dataclass(frozen=True)
class VisionSpec:
    """A multimodal wrapper's vision tower and projector.

    ``kind`` says which modeling code builds it (:class:`VisionTower`). The shared fields are
    the tower's own: ``hidden_size``, ``intermediate_size``, ``num_layers``, ``num_heads``,
    ``image_size``, ``patch_size``, ``num_channels``; ``projector_out`` is the language
    model's hidden size. SigLIP (Gemma 3): a patch-embedding Conv2d with bias, a learned
    position embedding with one row per patch, encoder layers of LayerNorms, q/k/v/out and
    fc1/fc2 all with bias, a post LayerNorm; the projector is ``mm_input_projection_weight``
    and an RMSNorm ``mm_soft_emb_norm``. Llama 4 adds ``adapter_in`` / ``adapter_out``
    (the pixel-shuffle MLP's ``projector_input_dim`` / ``projector_output_dim``) and
    ``output_dim`` (``vision_output_dim``, the projector's input). Pixtral (Mistral 3) adds
    ``merge_size`` (``spatial_merge_size``), ``feature_layers`` (how many encoder layers the
    projector reads) and ``projector_bias``.
    """

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    image_size: int
    patch_size: int
    num_channels: int
    projector_out: int
    tokens_per_image: int
    kind: VisionTower = VisionTower.SIGLIP
    adapter_in: int = 0
    adapter_out: int = 0
    output_dim: int = 0
    merge_size: int = 1
    feature_layers: int = 1
    projector_bias: bool = False
    head_dim: int = 0  # Gemma 4: the encoder's head size
    num_kv_heads: int = 0  # Gemma 4: the encoder's KV heads
    position_table: int = 0  # Gemma 4: rows per axis of the 2-D position table
    clipped: bool = False  # Gemma 4: clip bounds stored for each clippable linear
    standardize: bool = False  # Gemma 4: std_bias / std_scale buffers
    temporal_patch: int = 1  # Qwen3.5, Qwen2(.5)-VL: frames one Conv3d patch spans
    global_layers: int = 0  # Llama 3.2 Vision: the gated global encoder's layers
    aspect_ratios: int = 0  # Llama 3.2 Vision: supported aspect ratios (max_aspect_ratio_id)
    max_tiles: int = 0  # Llama 3.2 Vision: max_num_tiles

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def pixel_values_per_image(self) -> int:
        """Values the image processor returns for one image of ``image_size``: every pixel of
        every channel, repeated over the ``temporal_patch`` frames one Conv3d patch spans
        (Qwen2-VL's processor copies a still image that many times before it flattens the
        patches: transformers ``models/qwen2_vl/image_processing_qwen2_vl.py``, the
        ``expand`` over ``temporal_patch_size``)."""
        return self.num_channels * self.temporal_patch * self.image_size**2


@dataclass(frozen=True)
class AudioSpec:
    """Gemma 4's audio conformer (E2B/E4B) and its embedder (:mod:`.gemma4_towers`):
    ``hidden_size`` and ``num_layers`` of the conformer, ``num_heads``, the subsampler's
    ``conv_channels``, the light-conv ``conv_kernel``, ``output_dim`` (``output_proj_dims``),
    ``projector_out`` the language model's width, ``clipped`` (``use_clipped_linears``)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    conv_channels: tuple[int, int]
    conv_kernel: int
    output_dim: int
    projector_out: int
    clipped: bool = True


@dataclass(frozen=True)
class LinearModule:
    """One kind of linear projection, aggregated over the layers that hold it.

    ``name`` is the name PEFT and the quantizers see (``q_proj``, ``experts.gate_up_proj``,
    ``lm_head``); ``path`` the full module path with ``{i}`` for the layer index. Routed
    experts are stored by transformers as one 3-D parameter per layer (``is_nn_linear``
    False); ``per_layer`` is then the number of experts and ``active_per_layer`` the number
    one token passes through. A tied lm_head (``tied``) shares the embedding's weight and
    adds no parameters of its own. ``shard`` and ``reads`` are its roles (module docstring).
    """

    name: str
    path: str
    component: str
    in_features: int
    out_features: int
    bias: bool
    layers: tuple[int, ...]
    shard: Shard = Shard.REPLICATED
    reads: Reads = Reads.ATTN_INPUT
    per_layer: int = 1
    active_per_layer: int = 1
    is_nn_linear: bool = True
    tied: bool = False
    dtype: str | None = None

    @property
    def routed(self) -> bool:
        """A routed expert: a token passes through fewer instances than the layer holds (what
        expert parallelism divides among ranks)."""
        return self.active_per_layer < self.per_layer

    @property
    def count(self) -> int:
        """Instances in the whole model."""
        return self.per_layer * (len(self.layers) if self.layers else 1)

    @property
    def active_count(self) -> int:
        """Instances one token passes through."""
        return self.active_per_layer * (len(self.layers) if self.layers else 1)

    @property
    def weight_numel(self) -> int:
        return self.in_features * self.out_features

    @property
    def bias_numel(self) -> int:
        return self.out_features if self.bias else 0

    @property
    def params_per_instance(self) -> int:
        return self.weight_numel + self.bias_numel

    @property
    def parameters(self) -> int:
        """Parameters this entry stores (0 for a tied lm_head)."""
        return 0 if self.tied else self.params_per_instance * self.count

    @property
    def active_parameters(self) -> int:
        return 0 if self.tied else self.params_per_instance * self.active_count

    @property
    def reads_norm_output(self) -> bool:
        return self.reads in NORM_OUTPUTS

    def paths(self) -> tuple[str, ...]:
        """Concrete module paths, one per holding layer."""
        if not self.layers:
            return (self.path,)
        return tuple(self.path.format(i=i) for i in self.layers)


@dataclass(frozen=True)
class ParameterGroup:
    """Non-linear tensors of one kind (an embedding, a norm, sinks), with their count.

    ``is_buffer`` marks a persistent buffer stored in the checkpoint but not a parameter
    (DeepSeek-V3's ``e_score_correction_bias``); ``dtype`` is set when transformers keeps
    the tensor in a fixed dtype instead of the model's; ``vocab_rows`` marks a table whose
    rows tensor parallelism splits like a vocabulary (padded).
    """

    name: str
    path: str
    component: str
    numel: int
    layers: tuple[int, ...] = ()
    per_layer: int = 1
    is_buffer: bool = False
    dtype: str | None = None
    vocab_rows: int = 0

    @property
    def count(self) -> int:
        return self.per_layer * (len(self.layers) if self.layers else 1)

    @property
    def parameters(self) -> int:
        return 0 if self.is_buffer else self.numel * self.count
