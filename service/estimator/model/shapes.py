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


class VisionTower(StrEnum):
    """The vision towers this package can lay out (:mod:`.vision` holds each one's tensors)."""

    SIGLIP = "siglip"  # SigLIP + Gemma 3's projector
    LLAMA4 = "llama4"  # Llama 4's unfold-conv ViT + pixel-shuffle adapter + projector
    PIXTRAL = "pixtral"  # Pixtral + Mistral 3's norm, patch merger and two-layer projector


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

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


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
