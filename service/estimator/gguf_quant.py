"""A GGUF file made from a Hugging Face checkpoint: its tensors, and the ggml type of each.

Two steps of llama.cpp make the files users pull (``bartowski/...-GGUF:Q4_K_M``):

1. ``convert_hf_to_gguf.py`` writes one GGUF tensor per weight (``conversion/base.py``,
   ``prepare_tensors``): matrices in the 16-bit type of the checkpoint, 1-D tensors (norms,
   biases) and the MoE routers (``ffn_gate_inp``) in F32. A routed-expert weight is one 3-D
   tensor per layer (``ffn_gate_exps`` / ``ffn_up_exps`` / ``ffn_down_exps``); fused q/k/v
   stays one ``attn_qkv``.
2. ``llama-quantize <ftype>`` gives every 2-D and 3-D weight a type from the preset
   (``src/llama-quant.cpp``: ``llama_ftype_get_default_type``, ``llama_tensor_get_type_impl``,
   ``tensor_type_fallback``). The preset's default type is only the bulk: the output matrix,
   the value projections and the FFN down projections of chosen layers get more bits, and a
   row length that is not a whole number of blocks falls back to a 32-element block type.

:func:`preset_types` is that rule, written from llama.cpp's source (ggml-org/llama.cpp,
``src/llama-quant.cpp``, read in the copies vendored by llama-cpp-python 0.2.90 (Aug 2024,
then in ``src/llama.cpp``) to 0.3.36 (Oct 2026)). For the presets of :data:`PRESETS` on
models without fused q/k/v, the rule is the same in every copy; what changed:

- Fused q/k/v (``attn_qkv``: Phi-3, Falcon): copies up to Aug 2025 (0.3.16) give it its own
  rule (Q4_K_M → Q5_K, Q5_K_M → Q6_K, Q3_K_M/L → Q4_K); from the Apr 2026 copy (0.3.20) it
  follows the ``attn_v`` rule. This module follows the 2026 rule.
- The fall-back of Q2_K / Q3_K rows is IQ4_NL up to 2025 and Q4_0 in 2026 (both 18 bytes per
  32 weights: the bytes do not change).
- The layer counters: from the 2025 copies on, tensors are visited sorted by layer
  (``llama_model_loader::weight_name_comparer``), so the i-th ``attn_v`` / ``ffn_down`` is the
  one of layer i. The Aug 2024 copy visited them in file order; its totals are the same (the
  rule picks a fixed number of layers) but which layers got the extra bits may differ.

Not modelled: the IQ1/IQ2/IQ3 presets (their rules depend on an importance matrix and on
tensor types this module does not list), TQ1_0/TQ2_0, MXFP4_MOE, ``--pure``,
``--tensor-type`` / ``--output-tensor-type`` / ``--token-embedding-type`` overrides (the
"dynamic" quants of unsloth are such overrides: only a real file prices those), models with
multi-head latent attention (newer conversions split ``attn_kv_b``) or linear attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from service.estimator.checkpoint import GgufWeights
from service.estimator.errors import InvalidRequest
from service.estimator.ggml import cuda_alloc_bytes
from service.estimator.model import Architecture
from service.estimator.model.llamacpp_names import LlamaCppType
from service.estimator.units import cdiv

__all__ = [
    "PRESETS",
    "GgufTensor",
    "Preset",
    "QuantModel",
    "Role",
    "converted_tensors",
    "fallback_type",
    "get_preset",
    "gguf_weights_of",
    "preset_types",
    "quant_model",
]

T = GGMLQuantizationType


class Role(StrEnum):
    """The categories llama-quantize tells tensors apart by (``tensor_get_category``: a
    substring of the GGUF tensor name)."""

    OUTPUT = "output"  # output.weight
    TOKEN_EMBD = "token_embd"
    ATTN_V = "attn_v"  # attn_v, and (2026 copies) attn_qkv and attn_kv_b
    ATTN_K = "attn_k"
    ATTN_Q = "attn_q"
    ATTN_OUTPUT = "attn_output"
    FFN_UP = "ffn_up"
    FFN_GATE = "ffn_gate"
    FFN_DOWN = "ffn_down"  # ffn_down, ffn_down_exps, ffn_down_shexp
    OTHER = "other"  # a weight no rule names: the preset's default type
    KEPT = "kept"  # never quantized: 1-D tensors, norms, MoE routers (F32 from the converter)


@dataclass(frozen=True, slots=True)
class GgufTensor:
    """One tensor of a converted GGUF file (``count`` equal ones, e.g. a module's biases)."""

    role: Role
    layer: int | None  # blk.<layer>, None outside the repeating layers
    ne0: int  # row length: the input features of a weight
    n_elements: int
    count: int = 1


@dataclass(frozen=True, slots=True)
class QuantModel:
    """What the rule reads of the model (llama.cpp's hparams and arch)."""

    n_layer: int
    n_expert: int  # 0 for a dense model
    n_gqa: int  # n_head / n_head_kv, integer division
    tied: bool  # no output.weight: token_embd takes the output's type
    falcon: bool
    type_70b: bool  # llama.cpp's LLM_TYPE_70B (80 layers of a llama with GQA, qwen2, olmo)


@dataclass(frozen=True, slots=True)
class Preset:
    """A llama-quantize file type: its name and the type of the bulk of the weights."""

    name: str
    default: GGMLQuantizationType
    description: str


_PRESET_ROWS: tuple[Preset, ...] = (
    Preset("Q2_K", T.Q2_K, "Q2_K bulk; attn_v Q3_K (Q4_K with GQA ≥ 4), ffn_down/attn_output Q3_K"),
    Preset("Q2_K_S", T.Q2_K, "Q2_K bulk; first eighth of ffn_down Q4_K"),
    Preset("Q3_K_S", T.Q3_K, "Q3_K everywhere but the output"),
    Preset("Q3_K_M", T.Q3_K, "Q3_K bulk; attn_v Q5_K/Q4_K, ffn_down Q5_K/Q4_K, attn_output Q4_K"),
    Preset("Q3_K_L", T.Q3_K, "Q3_K bulk; attn_v, ffn_down, attn_output Q5_K"),
    Preset("Q4_0", T.Q4_0, "Q4_0 bulk, output Q6_K"),
    Preset("Q4_1", T.Q4_1, "Q4_1 bulk, output Q6_K"),
    Preset("Q5_0", T.Q5_0, "Q5_0 bulk, output Q6_K"),
    Preset("Q5_1", T.Q5_1, "Q5_1 bulk, output Q6_K"),
    Preset("Q4_K_S", T.Q4_K, "Q4_K bulk; first 4 attn_v and first eighth of ffn_down Q5_K"),
    Preset("Q4_K_M", T.Q4_K, "Q4_K bulk; attn_v and ffn_down Q6_K on half the layers"),
    Preset("Q5_K_S", T.Q5_K, "Q5_K everywhere but the output"),
    Preset("Q5_K_M", T.Q5_K, "Q5_K bulk; attn_v and ffn_down Q6_K on half the layers"),
    Preset("Q6_K", T.Q6_K, "Q6_K everywhere"),
    Preset("Q8_0", T.Q8_0, "Q8_0 everywhere"),
    Preset("IQ4_NL", T.IQ4_NL, "IQ4_NL bulk; attn_v Q5_K with GQA ≥ 4"),
    Preset("IQ4_XS", T.IQ4_XS, "IQ4_XS bulk; attn_v Q5_K with GQA ≥ 4"),
    Preset("F16", T.F16, "every weight F16 (llama-quantize F16, or the converter's f16)"),
    Preset("BF16", T.BF16, "every weight BF16 (the converter's bf16)"),
)

PRESETS: dict[str, Preset] = {p.name: p for p in _PRESET_ROWS}


def get_preset(name: str, field: str = "model") -> Preset:
    """The preset called ``name`` (any case)."""
    preset = PRESETS.get(name.strip().upper())
    if preset is None:
        raise InvalidRequest(
            f"GGUF preset {name[:20]!r} is not modelled; known: {', '.join(PRESETS)}",
            field=field,
        )
    return preset


def _block(t: GGMLQuantizationType) -> int:
    return GGML_QUANT_SIZES[t][0]


def _quantized(t: GGMLQuantizationType) -> bool:
    return _block(t) > 1


def _more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp's ``use_more_bits``: the first and last eighth and every third layer
    between them (C integer division; i ≥ n/8 wherever the modulo is taken)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


# Fall-backs when a row is not a whole number of blocks (tensor_type_fallback).
_FALLBACK: dict[GGMLQuantizationType, GGMLQuantizationType] = {
    T.Q2_K: T.Q4_0,
    T.Q3_K: T.Q4_0,
    T.Q4_K: T.Q5_0,
    T.Q5_K: T.Q5_1,
    T.Q6_K: T.Q8_0,
    T.IQ4_XS: T.IQ4_NL,
}


def fallback_type(t: GGMLQuantizationType, ne0: int) -> GGMLQuantizationType:
    """``t``, or llama-quantize's fall-back type for a row of ``ne0`` elements that is not a
    whole number of its blocks (``tensor_type_fallback``; F16 when neither fits)."""
    if ne0 % _block(t) == 0:
        return t
    t = _FALLBACK.get(t, t)
    return t if ne0 % _block(t) == 0 else T.F16


# The presets whose attn_output becomes Q5_K in an 8-expert model (Mixtral).
_ATTN_OUT_8_EXPERTS = frozenset(
    {"Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ4_XS"}
)
# attn_output of other models (not Falcon).
_ATTN_OUT = {"Q2_K": T.Q3_K, "Q3_K_M": T.Q4_K, "Q3_K_L": T.Q5_K}


def _output_type(p: Preset, m: QuantModel, ne0: int) -> GGMLQuantizationType:
    if m.falcon or ne0 % _block(p.default) != 0:
        return T.Q8_0
    return p.default if p.default == T.Q8_0 else T.Q6_K


def _attn_v_type(p: Preset, m: QuantModel, i: int, n: int) -> GGMLQuantizationType:
    name, t = p.name, p.default
    if name == "Q2_K":
        t = T.Q4_K if m.n_gqa >= 4 else T.Q3_K
    elif name == "Q2_K_S" and m.n_gqa >= 4:
        t = T.Q4_K
    elif name == "Q3_K_M":
        t = T.Q5_K if i < 2 else T.Q4_K
    elif name == "Q3_K_L" or (name in ("IQ4_NL", "IQ4_XS") and m.n_gqa >= 4):
        t = T.Q5_K
    elif name in ("Q4_K_M", "Q5_K_M") and _more_bits(i, n):
        t = T.Q6_K
    elif name == "Q4_K_S" and i < 4:
        t = T.Q5_K
    if m.type_70b and t in (T.Q3_K, T.Q4_K):
        t = T.Q5_K
    if m.n_expert == 8:
        t = T.Q8_0
    return t


def _ffn_down_type(p: Preset, m: QuantModel, i: int, n: int, imatrix: bool) -> GGMLQuantizationType:
    name, t = p.name, p.default
    if name == "Q2_K":
        t = T.Q3_K
    elif name == "Q2_K_S":
        if i < n // 8:
            t = T.Q4_K
    elif name == "Q3_K_M":
        more = not m.falcon or _more_bits(i, n)
        t = T.Q5_K if i < n // 16 else T.Q4_K if more else T.Q3_K
    elif name == "Q3_K_L":
        t = T.Q4_K if m.falcon else T.Q5_K
    elif name == "Q4_K_M":
        if m.falcon:
            t = T.Q6_K if i < n // 16 else T.Q5_K if _more_bits(i, n) else T.Q4_K
        elif _more_bits(i, n):
            t = T.Q6_K
    elif i < n // 8 and name in ("IQ4_NL", "IQ4_XS") and not imatrix:
        t = T.Q5_K
    elif name == "Q5_K_M" and _more_bits(i, n):
        t = T.Q6_K
    elif name == "Q4_K_S" and not m.falcon and i < n // 8:
        t = T.Q5_K
    elif name in ("Q4_0", "Q5_0") and imatrix and i < n // 8:
        t = T.Q4_1 if name == "Q4_0" else T.Q5_1
    return t


def _attn_output_type(p: Preset, m: QuantModel) -> GGMLQuantizationType:
    if m.falcon:
        return T.Q4_K if p.name == "Q3_K_L" else p.default
    if m.n_expert == 8:
        return T.Q5_K if p.name in _ATTN_OUT_8_EXPERTS else p.default
    return _ATTN_OUT.get(p.name, p.default)


def _layer_key(t: GgufTensor) -> int:
    return -1 if t.layer is None else t.layer


def preset_types(
    preset: Preset, model: QuantModel, tensors: Sequence[GgufTensor], *, imatrix: bool
) -> tuple[GGMLQuantizationType, ...]:
    """The ggml type llama-quantize gives each of ``tensors`` (a converted file's), in order.

    ``imatrix``: the file was made with an importance matrix (``--imatrix``), which changes
    the first eighth of ffn_down for Q4_0, Q5_0, IQ4_NL and IQ4_XS.
    """
    # The counters run over the tensors sorted by layer (weight_name_comparer); outside the
    # layers (-1) first.
    order = sorted(range(len(tensors)), key=lambda k: _layer_key(tensors[k]))
    n_attn_v = sum(t.count for t in tensors if t.role is Role.ATTN_V)
    i_attn_v = i_ffn_down = 0
    out: list[GGMLQuantizationType] = [T.F32] * len(tensors)
    for k in order:
        t = tensors[k]
        if t.role is Role.KEPT:
            out[k] = T.F32
            continue
        if not _quantized(preset.default):
            out[k] = preset.default
            continue
        chosen = preset.default
        if t.role is Role.OUTPUT or (t.role is Role.TOKEN_EMBD and model.tied):
            chosen = _output_type(preset, model, t.ne0)
        elif t.role is Role.ATTN_V:
            chosen = _attn_v_type(preset, model, i_attn_v, n_attn_v)
            i_attn_v += t.count
        elif t.role is Role.ATTN_K and model.n_expert == 8:
            chosen = T.Q8_0
        elif t.role is Role.FFN_DOWN:
            # Dense models count ffn_down tensors; MoE models read the layer from the name.
            i = t.layer if model.n_expert > 1 and t.layer is not None else i_ffn_down
            chosen = _ffn_down_type(preset, model, i, model.n_layer, imatrix)
            i_ffn_down += t.count
        elif t.role is Role.ATTN_OUTPUT:
            chosen = _attn_output_type(preset, model)
        out[k] = fallback_type(chosen, t.ne0)
    return tuple(out)


# ---- the converted file -------------------------------------------------------------------

# GGUF role of each Hugging Face projection, by (component, module name): the tensor names
# convert_hf_to_gguf.py maps them to (gguf-py's tensor_mapping.py), and how many GGUF tensors
# one module becomes (the experts' fused gate_up is written as ffn_gate_exps + ffn_up_exps).
_ROLES: dict[tuple[str, str], tuple[Role, int]] = {
    ("attention", "q_proj"): (Role.ATTN_Q, 1),
    ("attention", "k_proj"): (Role.ATTN_K, 1),
    ("attention", "v_proj"): (Role.ATTN_V, 1),
    ("attention", "o_proj"): (Role.ATTN_OUTPUT, 1),
    ("attention", "qkv_proj"): (Role.ATTN_V, 1),
    ("attention", "query_key_value"): (Role.ATTN_V, 1),
    ("attention", "c_attn"): (Role.ATTN_V, 1),
    ("attention", "c_proj"): (Role.ATTN_OUTPUT, 1),
    ("attention", "dense"): (Role.ATTN_OUTPUT, 1),
    ("mlp", "gate_proj"): (Role.FFN_GATE, 1),
    ("mlp", "up_proj"): (Role.FFN_UP, 1),
    ("mlp", "down_proj"): (Role.FFN_DOWN, 1),
    ("mlp", "gate_up_proj"): (Role.FFN_UP, 1),
    ("mlp", "fc1"): (Role.FFN_UP, 1),
    ("mlp", "fc2"): (Role.FFN_DOWN, 1),
    ("mlp", "dense_h_to_4h"): (Role.FFN_UP, 1),
    ("mlp", "dense_4h_to_h"): (Role.FFN_DOWN, 1),
    ("mlp", "c_fc"): (Role.FFN_UP, 1),
    ("mlp", "c_proj"): (Role.FFN_DOWN, 1),
    ("mlp", "w1"): (Role.FFN_UP, 1),
    ("mlp", "w2"): (Role.FFN_GATE, 1),
    ("experts", "experts.gate_up_proj"): (Role.FFN_UP, 2),
    ("experts", "experts.down_proj"): (Role.FFN_DOWN, 1),
    ("shared_experts", "gate_proj"): (Role.FFN_GATE, 1),
    ("shared_experts", "up_proj"): (Role.FFN_UP, 1),
    ("shared_experts", "down_proj"): (Role.FFN_DOWN, 1),
    ("lm_head", "lm_head"): (Role.OUTPUT, 1),
}

# The layer count at which llama.cpp's loader types a model LLM_TYPE_70B (the family says
# whether it does: LlamaCppType).
_TYPE_70B_LAYERS = 80


def quant_model(arch: Architecture, *, own_output: bool = False) -> QuantModel:
    """The hparams the rule reads, from the model's shape; ``own_output``: the file has an
    ``output.weight`` although the config ties it (:func:`converted_tensors`)."""
    if arch.mla is not None or arch.linear_attention is not None:
        raise InvalidRequest(
            "a llama-quantize preset is priced only for models without latent or linear "
            "attention (their converted tensors differ by llama.cpp version): use a GGUF file "
            "from the model store",
            field="model",
        )
    if arch.quantization is not None:
        raise InvalidRequest(
            f"a llama-quantize preset is priced from a 16-bit checkpoint; this one is "
            f"{arch.quantization.method}-quantized (its conversion keeps or re-packs those "
            "tensors by llama.cpp version): use a GGUF file from the model store",
            field="model",
        )
    gqa = arch.num_attention_heads > arch.num_kv_heads
    kind = arch.family.llamacpp.type
    type_70b = arch.num_layers == _TYPE_70B_LAYERS and (
        kind == LlamaCppType.TYPE_70B or (kind == LlamaCppType.TYPE_70B_WITH_GQA and gqa)
    )
    return QuantModel(
        n_layer=arch.num_layers,
        n_expert=arch.moe.num_experts if arch.moe is not None else 0,
        n_gqa=arch.num_attention_heads // arch.num_kv_heads if arch.num_kv_heads else 0,
        tied=arch.tie_word_embeddings and not own_output,
        falcon=kind == LlamaCppType.FALCON,
        type_70b=type_70b,
    )


def converted_tensors(arch: Architecture, *, own_output: bool = False) -> tuple[GgufTensor, ...]:
    """The language model's tensors as ``convert_hf_to_gguf.py`` writes them (one entry per
    tensor and layer; a vision tower goes to a separate ``mmproj`` file and is left out).

    A tied model's file has no ``output.weight`` unless its checkpoint stores ``lm_head``
    anyway (``own_output``: Qwen3-0.6B's does; convert writes every tensor it finds)."""
    out: list[GgufTensor] = []
    for m in arch.linear_modules:
        if m.tied and not own_output:
            continue
        role, parts = _ROLES.get((m.component, m.name), (Role.OTHER, 1))
        if m.component == "router":
            role = Role.KEPT  # ffn_gate_inp(_shexp): F32 (convert) and never quantized
        n = m.in_features * (m.out_features // parts) * m.per_layer
        for layer in m.layers or (None,):
            out.extend(GgufTensor(role, layer, m.in_features, n) for _ in range(parts))
            if m.bias:
                out.append(
                    GgufTensor(Role.KEPT, layer, m.out_features, m.out_features * m.per_layer)
                )
    for g in arch.parameter_groups:
        if g.component == "embeddings":
            n = arch.vocab_size * arch.hidden_size
            out.append(GgufTensor(Role.TOKEN_EMBD, None, arch.hidden_size, n))
            continue
        for layer in g.layers or (None,):
            out.append(GgufTensor(Role.KEPT, layer, g.numel, g.numel, g.per_layer))
    return tuple(out)


def gguf_weights_of(
    n_layer: int,
    tensors: tuple[GgufTensor, ...],
    types: tuple[GGMLQuantizationType, ...],
    file_type: str,
) -> GgufWeights:
    """Bytes of ``tensors`` in ``types``, by where llama.cpp places them: per repeating
    layer, the token embedding, the output matrix and the rest (norms outside the layers)."""
    layers = [0] * n_layer
    layers_cuda = [0] * n_layer
    embd = embd_cuda = output = output_cuda = rest = rest_cuda = 0
    per_type: dict[str, int] = {}
    for t, ty in zip(tensors, types, strict=True):
        raw = _bytes(ty, t.n_elements) * t.count
        cuda = cuda_alloc_bytes(ty, t.n_elements, t.ne0) * t.count
        per_type[ty.name] = per_type.get(ty.name, 0) + t.count
        if t.role is Role.TOKEN_EMBD:
            embd, embd_cuda = embd + raw, embd_cuda + cuda
        elif t.role is Role.OUTPUT:
            output, output_cuda = output + raw, output_cuda + cuda
        elif t.layer is None:
            rest, rest_cuda = rest + raw, rest_cuda + cuda
        else:
            layers[t.layer] += raw
            layers_cuda[t.layer] += cuda
    return GgufWeights(
        file_type=file_type,
        layers=tuple(layers),
        layers_cuda=tuple(layers_cuda),
        token_embd=embd,
        token_embd_cuda=embd_cuda,
        output=output,
        output_cuda=output_cuda,
        output_norm=rest,
        output_norm_cuda=rest_cuda,
        types=tuple(sorted(per_type.items())),
    )


def _bytes(t: GGMLQuantizationType, n: int) -> int:
    """Bytes of ``n`` elements of ``t``, a partial block counted whole."""
    block, size = GGML_QUANT_SIZES[t]
    return cdiv(n, block) * size
