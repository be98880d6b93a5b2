"""Weight memory: the bytes of a model's tensors in a storage format, placed on GPUs.

Walks the two inventories of :class:`~service.estimator.architecture.Architecture` (linear
projections and the other tensors) and prices each tensor with :mod:`service.estimator.formats`.
Which tensors a format quantizes: every linear projection of the decoder layers; embeddings,
lm_head, norms, biases and MoE routers stay in the checkpoint dtype unless the format says
otherwise (GGUF quantizes embeddings and the output matrix; mxfp4 only the experts of a MoE model,
as gpt-oss ships; a config's ``quantization_config`` lists its own exclusions).

Placement follows Megatron-style tensor parallelism as vLLM implements it: column-parallel
projections (q/k/v, gate/up, experts' gate_up, MLA's q_b/kv_b) split their outputs, row-parallel
ones (o_proj, down_proj) their inputs, KV heads are replicated when TP exceeds their number,
replicated layers (MLA's q_a/kv_a, routers, norms) are whole on every rank, embeddings and lm_head
split the vocabulary (padded to a multiple of 64 by vLLM). Pipeline stages take contiguous layer
ranges as vLLM's ``get_pp_indices`` does (remainder layers to the stages before the last); the
first stage holds the embedding, the last the final norm and lm_head (a tied lm_head gets its own
copy on the last stage when PP > 1 under vLLM, as its ParallelLMHead does).

vLLM also holds, next to the weights of an MLA model (DeepSeek-V2/V3, Kimi), a 128 MiB FlashInfer
MLA workspace on every GPU: its ``get_valid_backends`` imports each MLA attention backend of the
platform's priority list to validate it while the first ``MLAAttention`` layer is built, and
``vllm/v1/attention/backends/mla/flashinfer_mla.py`` allocates ``g_fi_workspace``
(``FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE``, 128 MiB) on the GPU at import, inside the load that
"Model loading took" measures (vLLM v0.19; FlashInfer is a dependency of its CUDA wheel).

The fine-tuning estimator reuses :func:`weight_layout` for frozen (QLoRA) bases.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from service.estimator.architecture import Architecture, LinearModule, QuantizationSpec
from service.estimator.errors import InvalidRequest
from service.estimator.formats import (
    WeightFormat,
    bytes_per_element,
    get_format,
    linear_weight_bytes,
    normalize_dtype,
)

__all__ = [
    "VLLM_MLA_WORKSPACE_BYTES",
    "WeightLayout",
    "format_from_quantization",
    "pp_layer_partition",
    "resolve_format",
    "weight_layout",
]

# Output-split (column-parallel) and input-split (row-parallel) projections, by module name.
_COLUMN = frozenset(
    {
        "q_proj",
        "k_proj",
        "v_proj",
        "qkv_proj",
        "c_attn",
        "q_b_proj",
        "kv_b_proj",
        "gate_proj",
        "up_proj",
        "gate_up_proj",
        "c_fc",
        "w1",
        "w2",
        "experts.gate_up_proj",
    }
)
_ROW = frozenset({"o_proj", "down_proj", "c_proj", "experts.down_proj"})
_KV_PROJ = frozenset({"k_proj", "v_proj"})

# vLLM's FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE, allocated when flashinfer_mla.py is imported.
VLLM_MLA_WORKSPACE_BYTES = 128 * 2**20


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
    assumptions: tuple[str, ...] = ()

    @property
    def per_gpu_max(self) -> int:
        return max(self.per_stage)

    @property
    def total_bytes(self) -> int:
        return sum(self.per_stage) * self.tensor_parallel_size


def format_from_quantization(q: QuantizationSpec) -> WeightFormat:
    """The storage format a checkpoint's ``quantization_config`` describes."""
    method = q.method
    if method == "gptq" or (method == "awq"):
        base = get_format(f"{method}-int{q.bits}" if method == "gptq" else "awq-int4")
        if method == "gptq" and q.bits not in (2, 3, 4, 8):
            raise InvalidRequest(f"GPTQ with {q.bits} bits is not supported", field="weight_format")
        return dataclasses.replace(base, bits=q.bits, group_size=q.group_size or 0)
    if method == "bitsandbytes":
        if q.bits == 8:
            return get_format("int8")
        name = q.quant_type or "nf4"
        fmt = get_format(name)
        if not q.double_quant:
            fmt = dataclasses.replace(fmt, name=f"{name}-single", kind="bnb4")
        return fmt
    if method == "fp8":
        if q.weight_block_size:
            return dataclasses.replace(get_format("fp8-block"), group_size=q.weight_block_size[0])
        return get_format("fp8")
    if method == "mxfp4":
        return get_format("mxfp4")
    if method == "compressed-tensors":
        if (q.quant_type or "int").startswith("float") and q.bits == 8:
            if q.weight_block_size:
                return dataclasses.replace(
                    get_format("fp8-block"), group_size=q.weight_block_size[0]
                )
            return get_format("fp8-channel")
        if q.bits == 8:
            return get_format("int8")
        if q.bits == 4:
            return dataclasses.replace(get_format("int4"), group_size=q.group_size or 0)
    raise InvalidRequest(
        f"quantization {method} with {q.bits} bits is not supported", field="weight_format"
    )


def _plain_format_for(dtype: str) -> WeightFormat:
    return get_format(normalize_dtype(dtype))


def resolve_format(arch: Architecture, weight_format: str | None) -> tuple[WeightFormat, bool]:
    """The format to price, and whether it came from the checkpoint's quantization_config."""
    if weight_format is None:
        if arch.quantization is not None:
            return format_from_quantization(arch.quantization), True
        return _plain_format_for(arch.dtype), False
    return get_format(weight_format), False


def pp_layer_partition(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage as vLLM's get_pp_indices assigns them."""
    if pp < 1 or pp > num_layers:
        raise InvalidRequest(
            f"pipeline_parallel_size must be between 1 and the layer count {num_layers}",
            field="pipeline_parallel_size",
        )
    base = num_layers // pp
    parts = [base] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def _vocab_rows(vocab: int, tp: int, pad: int) -> int:
    padded = -(-vocab // pad) * pad if pad > 1 else vocab
    return -(-padded // tp)


def _shard(module: LinearModule, arch: Architecture, tp: int) -> tuple[int, int]:
    """(in_features, out_features) of one TP rank's piece of `module`."""
    fan_in, fan_out = module.in_features, module.out_features
    if tp == 1:
        return fan_in, fan_out
    name = module.name
    if name in _KV_PROJ:
        heads = max(1, arch.num_kv_heads // tp)
        per_head = fan_out // arch.num_kv_heads
        return fan_in, heads * per_head
    if name == "qkv_proj":
        kv = max(1, arch.num_kv_heads // tp) * arch.head_dim
        return fan_in, arch.q_proj_size // tp + 2 * kv
    if name in _COLUMN:
        return fan_in, -(-fan_out // tp)
    if name in _ROW:
        return -(-fan_in // tp), fan_out
    return fan_in, fan_out  # replicated: routers, MLA down-projections


def _vision_bytes(arch: Architecture, tp: int, dtype: str, vocab_padding: int) -> int:
    """One TP rank's vision tower + projector: q/k/v and fc1 split their outputs, out_proj and
    fc2 their inputs (vLLM's SigLIP), the position embedding its rows like a vocabulary; the
    patch convolution, LayerNorms and Gemma 3's projector are replicated."""
    size = bytes_per_element(dtype)
    total = 0
    for m in arch.vision_modules():
        fan_in, fan_out = m.in_features, m.out_features
        if m.name in ("q_proj", "k_proj", "v_proj", "fc1"):
            fan_out, bias = -(-fan_out // tp), -(-fan_out // tp)
        elif m.name in ("out_proj", "fc2"):
            fan_in, bias = -(-fan_in // tp), fan_out
        else:  # pragma: no cover - the inventory is closed
            bias = fan_out
        total += int((fan_in * fan_out + bias) * size) * m.count
    for g in arch.vision_parameter_groups():
        if g.name == "position_embedding" and arch.vision is not None:
            rows = _vocab_rows(arch.vision.num_patches, tp, vocab_padding)
            total += int(rows * arch.vision.hidden_size * size)
        else:
            total += int(g.numel * g.count * size)
    return total


def _module_quantized(
    module: LinearModule, fmt: WeightFormat, arch: Architecture, from_config: bool
) -> bool:
    if not fmt.quantized:
        return False
    if module.component == "router":
        return False
    if module.component == "lm_head":
        if fmt.quantize_embeddings:
            return True
        if from_config and arch.quantization is not None:
            return arch.quantization.quantize_lm_head
        return False
    if fmt.experts_only and arch.moe is not None and module.component != "experts":
        return False
    if from_config and arch.quantization is not None:
        q = arch.quantization
        if q.modules_not_converted:
            # Exclusions are per module path; a layer-uniform exclusion is the common case.
            return any(q.is_quantized(p) for p in module.paths()[:1])
    return True


@lru_cache(maxsize=1024)
def weight_layout(
    arch: Architecture,
    weight_format: str | None = None,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    *,
    vocab_padding: int = 1,
    tied_copy_on_last_stage: bool = False,
    extra_per_gpu: int = 0,
    include_vision: bool = False,
    vision_on_every_stage: bool = False,
    mla_backend_workspace: bool = False,
) -> WeightLayout:
    """Weight bytes of `arch` stored in `weight_format`, placed over TP x PP GPUs.

    `vocab_padding` rounds embedding rows up (vLLM pads to 64); `tied_copy_on_last_stage`
    gives the last stage its own lm_head when embeddings are tied (vLLM with PP > 1);
    `extra_per_gpu` adds buffers every GPU holds (vLLM's rotary cache). `include_vision` adds
    a multimodal wrapper's vision tower and projector (component ``vision``, in the dense dtype)
    on the first stage, or on every stage with `vision_on_every_stage` (vLLM builds the tower
    on every pipeline rank). `mla_backend_workspace` adds vLLM's FlashInfer MLA workspace to
    every GPU of an MLA model (module docstring).
    """
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    fmt, from_config = resolve_format(arch, weight_format)
    dense_dtype = (
        fmt.name if not fmt.quantized else (fmt.dense_dtype or normalize_dtype(arch.dtype))
    )
    dense = bytes_per_element(dense_dtype)
    L = arch.num_layers
    per_layer = [0] * L  # bytes on one TP rank
    by_component: dict[str, int] = {}
    quantized_params = 0
    emb_rows = _vocab_rows(arch.vocab_size, tp, vocab_padding)
    head_bytes = 0
    for m in arch.linear_modules():
        fan_in, fan_out = _shard(m, arch, tp)
        quant = _module_quantized(m, fmt, arch, from_config)
        if m.component == "lm_head":
            if m.tied and not (tied_copy_on_last_stage and pp > 1):
                continue
            rows = emb_rows
            w = (
                linear_weight_bytes(fmt, fan_in, rows)
                if quant
                else int(rows * fan_in * bytes_per_element(m.dtype or dense_dtype))
            )
            if m.bias:
                w += int(rows * dense)
            head_bytes = w
            if not m.tied:
                by_component["lm_head"] = by_component.get("lm_head", 0) + w
                quantized_params += m.weight_numel if quant else 0
            continue
        if quant:
            w = linear_weight_bytes(fmt, fan_in, fan_out)
            quantized_params += m.weight_numel * m.count
        else:
            w = int(fan_in * fan_out * bytes_per_element(m.dtype or dense_dtype))
        if m.bias:
            w += int(fan_out * dense)
        w *= m.per_layer
        for i in m.layers:
            per_layer[i] += w
        key = m.component
        by_component[key] = by_component.get(key, 0) + w * len(m.layers)
    emb_bytes = 0
    final_norm = 0
    for g in arch.parameter_groups():
        b = int(g.numel * bytes_per_element(g.dtype or dense_dtype))
        if g.component == "embeddings":
            if fmt.quantize_embeddings:
                emb_bytes = linear_weight_bytes(fmt, arch.hidden_size, emb_rows)
            else:
                emb_bytes = int(emb_rows * arch.hidden_size * bytes_per_element(dense_dtype))
            by_component["embeddings"] = by_component.get("embeddings", 0) + emb_bytes
            continue
        if not g.layers:
            final_norm += b
            by_component[g.component] = by_component.get(g.component, 0) + b
            continue
        b *= g.per_layer
        for i in g.layers:
            per_layer[i] += b
        by_component[g.component] = by_component.get(g.component, 0) + b * len(g.layers)
    vision_bytes = 0
    if include_vision and arch.vision is not None:
        vision_bytes = _vision_bytes(arch, tp, dense_dtype, vocab_padding)
        by_component["vision"] = _vision_bytes(arch, 1, dense_dtype, 1)
    workspace = VLLM_MLA_WORKSPACE_BYTES if mla_backend_workspace and arch.mla is not None else 0
    extra = extra_per_gpu + workspace
    parts = pp_layer_partition(L, pp)
    stages: list[int] = []
    start = 0
    for s, n in enumerate(parts):
        b = sum(per_layer[start : start + n]) + extra
        start += n
        if s == 0 or vision_on_every_stage:
            b += vision_bytes
        if s == 0:
            b += emb_bytes
        if s == pp - 1:
            b += final_norm + head_bytes
        stages.append(b)
    if tp == 1 and pp == 1:
        model_bytes = stages[0] - extra
        components = by_component
    else:
        one = weight_layout(arch, weight_format, 1, 1, include_vision=include_vision)
        model_bytes, components = one.model_bytes, dict(one.by_component)
    assumptions: list[str] = []
    if fmt.quantized:
        assumptions.append(
            f"weights in {fmt.name}: quantized linear layers incl. scales/zeros; "
            f"embeddings, norms and routers in {dense_dtype}"
        )
    if vision_bytes:
        assumptions.append(
            f"vision tower and projector loaded ({by_component['vision'] / 2**30:.2f} GiB "
            f"in {dense_dtype}, not quantized)"
        )
    if workspace:
        assumptions.append(
            f"vLLM FlashInfer MLA workspace {workspace / 2**30:.3f} GiB per GPU (allocated when "
            "vLLM imports that attention backend while building the model)"
        )
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
        quantized_params=quantized_params,
        assumptions=tuple(assumptions),
    )
