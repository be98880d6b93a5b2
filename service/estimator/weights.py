"""Weight memory: the bytes of a model's tensors in a storage format, placed on GPUs.

Walks the inventories of the :class:`~service.estimator.model.Architecture` and prices each
tensor with :mod:`service.estimator.formats`. Which tensors a format quantizes: every linear
projection of the decoder layers; embeddings, lm_head, norms, biases and MoE routers stay in
the checkpoint dtype unless the format says otherwise (GGUF quantizes embeddings and the output
matrix; mxfp4 only the experts of a MoE model, as gpt-oss ships; a config's
``quantization_config`` lists its own exclusions).

Placement follows each module's :class:`~service.estimator.model.Shard` role, Megatron-style
tensor parallelism as vLLM implements it: column-parallel projections split their outputs,
row-parallel ones their inputs, KV heads are replicated when TP exceeds their number,
replicated modules are whole on every rank, embeddings and lm_head split the vocabulary (padded
as the engine pads it). Pipeline stages take contiguous layer ranges
(:func:`service.estimator.parallel.pp_layer_partition`); the first stage holds the embedding,
the last the final norm and lm_head. What an engine adds or changes (vocabulary padding, a tied
lm_head's own copy on the last stage, buffers built with the model, where a vision tower lives)
is its :class:`Placement`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from service.estimator.formats import (
    WeightFormat,
    format_from_quantization,
    get_format,
    linear_weight_bytes,
)
from service.estimator.memo import memoized
from service.estimator.model import Architecture, LinearModule, Shard
from service.estimator.parallel import ExpertLayout, pp_layer_partition
from service.estimator.units import GIB, bytes_per_element, cdiv, normalize_dtype

__all__ = ["Placement", "WeightLayout", "resolve_format", "shard_shape", "weight_layout"]

# Checkpoint projections vLLM and SGLang load into one parameter (their models'
# ``packed_modules_mapping``: qkv_proj from q/k/v, gate_up_proj from gate/up): per-parameter
# offloading moves such a parameter whole.
_PACKED = {
    "q_proj": "qkv_proj",
    "k_proj": "qkv_proj",
    "v_proj": "qkv_proj",
    "gate_proj": "gate_up_proj",
    "up_proj": "gate_up_proj",
}


@dataclass(frozen=True, slots=True)
class Placement:
    """How an engine places a model's weights beyond the shard roles.

    `vocab_padding` rounds embedding rows up (vLLM pads to 64); `tied_copy_on_last_stage`
    gives the last stage its own lm_head when embeddings are tied (vLLM with PP > 1);
    `extra_per_gpu` is what every GPU holds next to the weights (buffers an engine builds with
    the model) and `extra_per_layer` what each decoder layer adds to it, `extra_notes` says
    what; `include_vision` adds a multimodal wrapper's vision
    tower and projector (component ``vision``, in the dense dtype) on the first stage, or on
    every stage with `vision_on_every_stage` (vLLM builds the tower on every pipeline rank).
    """

    vocab_padding: int = 1
    tied_copy_on_last_stage: bool = False
    extra_per_gpu: int = 0
    extra_per_layer: int = 0
    extra_notes: tuple[str, ...] = ()
    include_vision: bool = True
    vision_on_every_stage: bool = False


@dataclass(frozen=True, slots=True)
class WeightLayout:
    """Weight bytes of one model in one format, split over TP ranks and pipeline stages.

    `model_bytes` is one copy of the model; `per_stage` the bytes on one TP rank of each
    pipeline stage (all ranks of a stage hold the same amount); `total_bytes` the sum over all
    GPUs (more than `model_bytes` when layers are replicated across TP ranks).
    """

    format: str
    model_bytes: int
    per_stage: tuple[int, ...]
    tensor_parallel_size: int
    by_component: Mapping[str, int]
    quantized_params: int
    dense_dtype: str
    assumptions: tuple[str, ...] = ()
    # Bytes of each parameter of each decoder layer on one TP rank, in module order.
    layer_tensors: tuple[tuple[int, ...], ...] = ()

    @property
    def per_gpu_max(self) -> int:
        return max(self.per_stage)

    @property
    def total_bytes(self) -> int:
        return sum(self.per_stage) * self.tensor_parallel_size


def resolve_format(arch: Architecture, weight_format: str | None) -> tuple[WeightFormat, bool]:
    """The format to price, and whether it came from the checkpoint's quantization_config."""
    if weight_format is None:
        if arch.quantization is not None:
            return format_from_quantization(arch.quantization), True
        return get_format(normalize_dtype(arch.dtype)), False
    return get_format(weight_format), False


def _vocab_rows(vocab: int, tp: int, pad: int) -> int:
    padded = cdiv(vocab, pad) * pad if pad > 1 else vocab
    return cdiv(padded, tp)


def shard_shape(module: LinearModule, arch: Architecture, tp: int) -> tuple[int, int]:
    """(in_features, out_features) of one TP rank's piece of `module`, by its shard role."""
    fan_in, fan_out = module.in_features, module.out_features
    if tp == 1:
        return fan_in, fan_out
    role = module.shard
    if role is Shard.KV_HEADS:
        return fan_in, max(1, arch.num_kv_heads // tp) * (fan_out // arch.num_kv_heads)
    if role is Shard.QKV_HEADS:
        kv = max(1, arch.num_kv_heads // tp) * arch.head_dim
        return fan_in, arch.q_proj_size // tp + 2 * kv
    if role is Shard.COLUMN:
        return fan_in, cdiv(fan_out, tp)
    if role is Shard.ROW:
        return cdiv(fan_in, tp), fan_out
    return fan_in, fan_out


def _vision_bytes(arch: Architecture, tp: int, dtype: str, vocab_padding: int) -> int:
    """One TP rank's vision tower + projector, by the tower modules' shard roles; the
    position embedding splits its rows like a vocabulary, the rest is replicated."""
    size = bytes_per_element(dtype)
    total = 0
    for m in arch.vision_modules:
        fan_in, fan_out = shard_shape(m, arch, tp)
        total += int((fan_in * fan_out + (fan_out if m.bias else 0)) * size) * m.count
    for g in arch.vision_parameter_groups:
        if g.vocab_rows:
            rows = _vocab_rows(g.vocab_rows, tp, vocab_padding)
            total += int(rows * (g.numel // g.vocab_rows) * size)
        else:
            total += int(g.numel * g.count * size)
    return total


def _module_quantized(
    module: LinearModule, fmt: WeightFormat, arch: Architecture, from_config: bool
) -> bool:
    if not fmt.quantized or module.component == "router":
        return False
    q = arch.quantization if from_config else None
    if module.component == "lm_head":
        return fmt.quantize_embeddings or (q is not None and q.quantize_lm_head)
    if fmt.experts_only and arch.moe is not None and module.component != "experts":
        return False
    if q is not None and q.modules_not_converted:
        # Exclusions are per module path; a layer-uniform exclusion is the common case.
        return q.is_quantized(module.paths()[0])
    return True


# In the byte-bounded memo, not an lru_cache: a posted config's layout (a 1024-layer config's is
# megabytes) must count against the cache budget; 1024 of them held by an lru_cache took a
# 256 MiB worker to its OOM kill in a minute of distinct configs (`make soak`, heavy phase).
@memoized
def weight_layout(
    arch: Architecture,
    weight_format: str | None = None,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    placement: Placement = Placement(),
    experts: ExpertLayout | None = None,
) -> WeightLayout:
    """Weight bytes of `arch` stored in `weight_format`, placed over TP x PP GPUs; routed
    experts by `experts` when the engine spreads them differently from the dense layers
    (None: split like them, by TP)."""
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    fmt, from_config = resolve_format(arch, weight_format)
    dense_dtype = (
        fmt.name if not fmt.quantized else (fmt.dense_dtype or normalize_dtype(arch.dtype))
    )
    dense = bytes_per_element(dense_dtype)
    per_layer = [0] * arch.num_layers  # bytes on one TP rank
    # The parameters of each decoder layer on one TP rank, in module order (what per-parameter
    # offloading walks).
    layer_tensors: list[list[int]] = [[] for _ in range(arch.num_layers)]
    packed_last: list[str | None] = [None] * arch.num_layers
    packed_at = [0] * arch.num_layers
    by_component: dict[str, int] = {}
    quantized_params = 0
    emb_rows = _vocab_rows(arch.vocab_size, tp, placement.vocab_padding)
    head_bytes = 0
    outside = {True: 0, False: 0}  # linear modules outside the layers: {embedding side: bytes}
    for m in arch.linear_modules:
        fan_in, fan_out = shard_shape(m, arch, tp)
        quant = _module_quantized(m, fmt, arch, from_config)
        if m.shard is Shard.VOCAB:
            if m.tied and not (placement.tied_copy_on_last_stage and pp > 1):
                continue
            w = (
                linear_weight_bytes(fmt, fan_in, emb_rows)
                if quant
                else int(emb_rows * fan_in * bytes_per_element(m.dtype or dense_dtype))
            )
            if m.bias:
                w += int(emb_rows * dense)
            head_bytes = w
            if not m.tied:
                by_component["lm_head"] = by_component.get("lm_head", 0) + w
                quantized_params += m.weight_numel if quant else 0
            continue
        instances = m.per_layer
        if experts is not None and m.routed:
            fan_in, fan_out = shard_shape(m, arch, experts.tensor)
            instances = experts.local_experts(m.per_layer)
        if quant:
            w = linear_weight_bytes(fmt, fan_in, fan_out)
            quantized_params += m.weight_numel * m.count
        else:
            w = int(fan_in * fan_out * bytes_per_element(m.dtype or dense_dtype))
        bias = int(fan_out * dense) if m.bias else 0
        weight_t, bias_t = w * instances, bias * instances
        w = weight_t + bias_t
        if not m.layers:
            # Outside the layers (OPT-350m's project_in / project_out): with the embedding
            # on the first stage, else with the final norm on the last.
            outside[m.component == "embeddings"] += w
        packed = _PACKED.get(m.name)
        for i in m.layers:
            per_layer[i] += w
            tensors = layer_tensors[i]
            if packed is not None and packed_last[i] == packed:
                # Another part of the same engine parameter (q/k/v, gate/up): one tensor,
                # and its bias one more.
                tensors[packed_at[i]] += weight_t
                if bias_t:
                    tensors[packed_at[i] + 1] += bias_t
                continue
            packed_last[i], packed_at[i] = packed, len(tensors)
            tensors.append(weight_t)
            if bias_t:
                tensors.append(bias_t)
        by_component[m.component] = by_component.get(m.component, 0) + w * max(1, len(m.layers))
    emb_bytes = outside[True]
    final_norm = outside[False]
    for g in arch.parameter_groups:
        b = int(g.numel * bytes_per_element(g.dtype or dense_dtype))
        if g.component == "embeddings":
            if g.vocab_rows != arch.vocab_size or g.numel != arch.vocab_size * arch.hidden_size:
                # Another table (a learned position table, Gemma 4's per-layer embeddings):
                # split like a vocabulary when it has vocabulary rows, else whole.
                rows = _vocab_rows(g.vocab_rows, tp, placement.vocab_padding)
                b = int(rows * (g.numel // g.vocab_rows) * dense) if g.vocab_rows else b
            elif fmt.quantize_embeddings:
                b = linear_weight_bytes(fmt, arch.hidden_size, emb_rows)
            else:
                b = int(emb_rows * arch.hidden_size * bytes_per_element(dense_dtype))
            emb_bytes += b
            by_component["embeddings"] = by_component.get("embeddings", 0) + b
            continue
        if not g.layers:
            final_norm += b
            by_component[g.component] = by_component.get(g.component, 0) + b
            continue
        b *= g.per_layer
        for i in g.layers:
            per_layer[i] += b
            layer_tensors[i].append(b)
        by_component[g.component] = by_component.get(g.component, 0) + b * len(g.layers)
    vision_bytes = 0
    if placement.include_vision and arch.vision is not None:
        vision_bytes = _vision_bytes(arch, tp, dense_dtype, placement.vocab_padding)
        by_component["vision"] = _vision_bytes(arch, 1, dense_dtype, 1)
    extra = placement.extra_per_gpu
    stages: list[int] = []
    start = 0
    for s, n in enumerate(pp_layer_partition(arch.num_layers, pp)):
        b = sum(per_layer[start : start + n]) + extra + placement.extra_per_layer * n
        start += n
        if s == 0 or placement.vision_on_every_stage:
            b += vision_bytes
        if s == 0:
            b += emb_bytes
        if s == pp - 1:
            b += final_norm + head_bytes
        stages.append(b)
    if tp == 1 and pp == 1 and experts is None:
        model_bytes = stages[0] - extra - placement.extra_per_layer * arch.num_layers
        components = by_component
    else:
        one = weight_layout(
            arch, weight_format, 1, 1, Placement(include_vision=placement.include_vision)
        )
        model_bytes, components = one.model_bytes, dict(one.by_component)
    assumptions: list[str] = []
    if fmt.quantized:
        assumptions.append(
            f"weights in {fmt.name}: quantized linear layers incl. scales/zeros; "
            f"embeddings, norms and routers in {dense_dtype}"
        )
    if vision_bytes:
        assumptions.append(
            f"vision tower and projector loaded ({by_component['vision'] / GIB:.2f} GiB "
            f"in {dense_dtype}, not quantized)"
        )
    assumptions.extend(placement.extra_notes)
    if experts is not None and arch.moe is not None:
        local = experts.local_experts(arch.moe.num_experts)
        if experts.expert > 1:
            text = (
                f"routed experts spread over {experts.expert} expert-parallel ranks: "
                f"{local} of {arch.moe.num_experts + experts.redundant} per GPU"
            )
            if experts.redundant:
                text += f" ({experts.redundant} redundant copies for load balancing)"
        else:
            text = f"routed experts' width split {experts.tensor} ways (all experts on each GPU)"
        assumptions.append(text)
    if tp > 1 and arch.num_kv_heads < tp:
        assumptions.append(
            f"TP {tp} exceeds the {arch.num_kv_heads} KV heads: K/V projections replicated"
        )
    return WeightLayout(
        format=fmt.name,
        model_bytes=model_bytes,
        per_stage=tuple(stages),
        tensor_parallel_size=tp,
        by_component=MappingProxyType(components),
        layer_tensors=tuple(tuple(t) for t in layer_tensors),
        quantized_params=quantized_params,
        dense_dtype=dense_dtype,
        assumptions=tuple(assumptions),
    )
