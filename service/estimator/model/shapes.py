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
    "COMPONENTS",
    "FULL_ATTENTION",
    "SLIDING_ATTENTION",
    "LinearModule",
    "MlaSpec",
    "MoeSpec",
    "ParameterGroup",
    "Reads",
    "Shard",
    "VisionSpec",
]

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"

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


@dataclass(frozen=True)
class VisionSpec:
    """A SigLIP vision tower (``siglip_vision_model``) and Gemma 3's multimodal projector.

    The tower, as transformers' ``SiglipVisionModel`` builds it: a patch-embedding Conv2d
    (``channels × patch² × hidden`` + bias), a learned position embedding with one row per
    patch (``(image_size / patch_size)²``), ``num_layers`` encoder layers (two LayerNorms with
    bias, q/k/v/out projections with bias, an fc1/fc2 MLP with bias) and a post LayerNorm.
    ``projector_out`` is the language model's hidden size: Gemma 3's projector holds
    ``mm_input_projection_weight`` (``hidden × projector_out``) and ``mm_soft_emb_norm``
    (an RMSNorm over the vision hidden size).
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
