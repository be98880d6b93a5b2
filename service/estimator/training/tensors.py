"""The tensors one pipeline stage holds in training, per GPU, before any activation.

:class:`TrainingDtypes`: bytes per element of each kind of training tensor and the frozen
base's format. :class:`StagePlacement`: which tensors lie on a stage and which of them train.
:func:`stage_tensors`: their weight bytes, trainable elements and optimizer tensor groups.
:func:`weight_copies`: the weight-sized tensors activations hold (autocast's 16-bit copies,
peft's effective expert weights, a dequantized base weight). :func:`gathered_numel` and
:func:`trainable_split`: what FSDP2 gathers as one unit and the trainable elements per layer.
:mod:`.state` turns these into a stage's static state.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from service.estimator.formats import WeightFormat, get_format, linear_weight_bytes
from service.estimator.model import Architecture, LinearModule
from service.estimator.parallel import stage_layer_ranges
from service.estimator.training.activations import ActivationCoefficients
from service.estimator.training.lora import module_rank
from service.estimator.training.optimizers import TensorGroup
from service.estimator.training.precision import ADAPTER_DTYPE, Precision
from service.estimator.training.request import FinetuneRequest
from service.estimator.units import bytes_per_element

__all__ = [
    "StagePlacement",
    "StageTensors",
    "TrainingDtypes",
    "gathered_numel",
    "stage_tensors",
    "trainable_split",
    "training_dtypes",
    "weight_copies",
]


@dataclass(frozen=True)
class TrainingDtypes:
    """Bytes per element of each kind of training tensor, and the frozen base's format.

    Under ZeRO/FSDP with mixed precision the 16-bit copy is the model's weight and the fp32
    master copy lives with the optimizer states (the DeepSpeed layout).
    """

    compute: int
    trainable_weight: int
    gradient: int
    master: int
    master_copy: int  # the fp32 master copy held with the states (DeepSpeed layout), or 0
    adapter: int
    frozen: int  # a frozen, unquantized tensor
    base_format: WeightFormat
    deepspeed_mixed: bool


def training_dtypes(req: FinetuneRequest, prec: Precision) -> TrainingDtypes:
    c = prec.compute_bytes
    master = prec.master_bytes
    deepspeed_mixed = req.zero_stage > 0 and prec.autocast
    if req.is_lora:
        name = req.weight_format or ("nf4" if req.method == "qlora" else req.arch.dtype)
        base_fmt = get_format(name)
    elif deepspeed_mixed:
        base_fmt = get_format(prec.compute if c == 2 else "fp32")
    else:
        base_fmt = get_format("fp32" if master == 4 else "bf16")
    frozen = int(bytes_per_element("bf16" if base_fmt.quantized else base_fmt.name))
    if req.kbit_prepared:
        frozen = 4  # peft's prepare_model_for_kbit_training: every non-quantized tensor in fp32
    return TrainingDtypes(
        compute=c,
        trainable_weight=c if deepspeed_mixed else master,
        gradient=c if deepspeed_mixed else prec.grad_bytes,
        master=master,
        master_copy=master if deepspeed_mixed else 0,
        adapter=int(bytes_per_element(ADAPTER_DTYPE)),
        frozen=frozen,
        base_format=base_fmt,
        deepspeed_mixed=deepspeed_mixed,
    )


@dataclass
class StageTensors:
    weights: int = 0
    trainable_numel: int = 0
    largest_layer: int = 0
    groups: list[TensorGroup] = dataclasses.field(default_factory=list)


class StagePlacement:
    """Which tensors lie on a stage and which of them train."""

    def __init__(self, req: FinetuneRequest, stage: int) -> None:
        arch = req.arch
        self.req = req
        self.stage = stage
        self.pp = req.pipeline_parallel_size
        self.range = stage_layer_ranges(arch.num_layers, self.pp)[stage]
        self.trainable_from = 0
        if req.method == "freeze":
            self.trainable_from = arch.num_layers - req.trainable_layer_count
        elif req.is_lora:
            self.trainable_from = arch.num_layers  # the base is frozen

    def count(self, layers: tuple[int, ...], component: str) -> int:
        """How many of `layers` lie on the stage (non-layer tensors: by component)."""
        if not layers:
            first, last = self.stage == 0, self.stage == self.pp - 1
            return int(first if component == "embeddings" else last)
        return sum(1 for i in layers if i in self.range)

    def training(self, layers: tuple[int, ...]) -> int:
        """How many of `layers` on the stage train (their base weights, not adapters)."""
        if self.req.method == "full":
            return self.count(layers, "")
        if self.req.is_lora:
            return 0
        return sum(1 for i in layers if i in self.range and i >= self.trainable_from)


def _linear_tensors(
    m: LinearModule,
    where: StagePlacement,
    dt: TrainingDtypes,
    lora_names: frozenset[str],
    out: StageTensors,
) -> None:
    req = where.req
    tp = req.tensor_parallel_size
    n_here = where.count(m.layers, m.component)
    if not n_here:
        return
    split = tp if m.component != "router" else 1
    # A layer's modules train as its layer does; lm_head trains only in full fine-tuning.
    trains = where.training(m.layers) if m.layers else (n_here if req.method == "full" else 0)
    frozen = n_here - trains
    if trains:
        k = m.per_layer * trains
        out.weights += m.params_per_instance * k // split * dt.trainable_weight
        # optimizer states follow the fp32 master copy under mixed precision
        out.groups.append(TensorGroup(m.out_features // split, m.in_features, k, dt.master))
        out.trainable_numel += m.params_per_instance * k // split
    if frozen:
        k = m.per_layer * frozen
        fmt = dt.base_format
        if fmt.quantized and m.component not in ("lm_head", "router"):
            out.weights += (
                linear_weight_bytes(fmt, m.in_features, m.out_features // split) * k
                + (m.bias_numel // split) * k * dt.frozen
            )
        else:
            out.weights += m.params_per_instance * k // split * dt.frozen
    if m.layers:
        out.largest_layer = max(out.largest_layer, m.params_per_instance * m.per_layer)
    if m.name in lora_names and m.layers:
        k = m.per_layer * n_here
        r = module_rank(m, req.lora.rank)
        a = TensorGroup(r, m.in_features, k, dt.adapter)
        b = TensorGroup(m.out_features // split, r, k, dt.adapter)
        out.groups += [a, b]
        n_adapter = (a.numel + b.numel) * k
        out.trainable_numel += n_adapter
        out.weights += n_adapter * dt.adapter


def stage_tensors(
    where: StagePlacement, dt: TrainingDtypes, lora_names: frozenset[str]
) -> StageTensors:
    req = where.req
    arch = req.arch
    tp = req.tensor_parallel_size
    out = StageTensors()
    for m in arch.linear_modules:
        if not m.tied:
            _linear_tensors(m, where, dt, lora_names, out)
    for g in arch.parameter_groups:
        if g.is_buffer:
            continue
        n_here = where.count(g.layers, g.component)
        last = where.stage == where.pp - 1
        if g.component == "embeddings" and where.pp > 1 and arch.tie_word_embeddings and last:
            n_here = 1  # the last stage holds its own copy of a tied lm_head
        if not n_here:
            continue
        split = tp if g.component == "embeddings" else 1
        numel = g.numel * g.per_layer * n_here // split
        if g.layers:
            trains = g.numel * g.per_layer * where.training(g.layers) // split
        else:
            trains = numel if req.method == "full" else 0
        out.weights += trains * dt.trainable_weight + (numel - trains) * dt.frozen
        if trains:
            cols = arch.hidden_size if g.component == "embeddings" else 0
            rows = trains // cols if cols else trains
            out.groups.append(TensorGroup(rows, cols, 1, dt.master))
            out.trainable_numel += trains
    return out


def weight_copies(
    req: FinetuneRequest,
    prec: Precision,
    dt: TrainingDtypes,
    coef: ActivationCoefficients,
    where: StagePlacement,
    lora_mods: tuple[LinearModule, ...],
    in_flight: int,
) -> int:
    """Weight-sized tensors activations hold: autocast's 16-bit copies of this stage's fp32
    linear weights, peft's effective expert weights, a dequantized base weight."""
    arch = req.arch
    tp = req.tensor_parallel_size
    share = len(where.range) / arch.num_layers
    copies = 0
    if (prec.autocast and not req.is_lora and not dt.deepspeed_mixed) or (
        prec.autocast and req.is_lora and dt.frozen > dt.compute and not dt.base_format.quantized
    ):
        copies = int(coef.weight_copies * share)
    elif prec.autocast and dt.base_format.quantized and dt.frozen > dt.compute:
        # a prepared base's fp32 lm_head and routers (not quantized): autocast's 16-bit copy
        # of each, saved by its matmul for the input's gradient
        for m in arch.linear_modules:
            if m.component == "lm_head" and where.stage == where.pp - 1:
                copies += m.weight_numel // tp * dt.compute
            elif m.component == "router":
                copies += m.weight_numel * m.per_layer * where.count(m.layers, "") * dt.compute
    fused = [m for m in lora_mods if not m.is_nn_linear and m.layers]
    if fused:
        # peft adapts a 3-D expert stack through a parametrization: each forward
        # materializes W + B·A for every expert (`baddbmm`, in W's dtype) and the expert
        # matmul keeps that effective weight for backward. Under full checkpointing only
        # the layer being recomputed holds one.
        per_layer: dict[int, int] = {}
        for m in fused:
            for i in m.layers:
                if i in where.range:
                    per_layer[i] = per_layer.get(i, 0) + (
                        m.params_per_instance * m.per_layer // tp * dt.frozen
                    )
        if per_layer:
            copies += (
                max(per_layer.values())
                if req.gradient_checkpointing == "full"
                else sum(per_layer.values()) * in_flight
            )
    if req.is_lora and dt.base_format.quantized:
        # A quantized base linear is dequantized to the compute dtype for each matmul, in
        # forward and again in backward (bitsandbytes `dequantize_4bit`): one such weight,
        # the largest, exists at a time on top of everything kept.
        copies += (
            max(
                (m.out_features // (tp if m.component != "router" else 1)) * m.in_features
                for m in arch.linear_modules
                if m.layers and m.is_nn_linear and m.component != "router"
            )
            * dt.compute
        )
    return copies


def gathered_numel(arch: Architecture, where: StagePlacement) -> tuple[int, int]:
    """(parameters of the stage's largest decoder layer, of the root module's own tensors:
    embeddings, an untied lm_head, the final norm): what FSDP2 gathers as one unit."""
    per_layer: dict[int, int] = {}
    root = 0
    for m in arch.linear_modules:
        if m.tied:
            continue
        if not m.layers:
            root += m.params_per_instance * where.count(m.layers, m.component)
        for i in m.layers:
            if i in where.range:
                per_layer[i] = per_layer.get(i, 0) + m.params_per_instance * m.per_layer
    for g in arch.parameter_groups:
        if g.is_buffer:
            continue
        if not g.layers:
            root += g.numel * g.per_layer * where.count(g.layers, g.component)
        for i in g.layers:
            if i in where.range:
                per_layer[i] = per_layer.get(i, 0) + g.numel * g.per_layer
    return max(per_layer.values(), default=0), root


def trainable_split(
    req: FinetuneRequest, where: StagePlacement, lora_names: frozenset[str]
) -> tuple[dict[int, int], int]:
    """Trainable elements per decoder layer of the stage (per GPU under TP), and the root's
    trainable elements whose gradient exists before the embedding's backward: lm_head (or
    the tied embedding lm_head shares) and the final norm."""
    arch = req.arch
    tp = req.tensor_parallel_size
    per_layer: dict[int, int] = dict.fromkeys(where.range, 0)
    root = 0
    for m in arch.linear_modules:
        if m.tied:
            continue
        split = tp if m.component != "router" else 1
        if not m.layers:
            if req.method == "full" and where.count(m.layers, m.component):
                root += m.params_per_instance * m.per_layer // split
            continue
        for i in m.layers:
            if i not in per_layer:
                continue
            if where.training((i,)):
                per_layer[i] += m.params_per_instance * m.per_layer // split
            if m.name in lora_names:
                r = module_rank(m, req.lora.rank)
                per_layer[i] += (r * m.in_features + m.out_features // split * r) * m.per_layer
    for g in arch.parameter_groups:
        if g.is_buffer:
            continue
        if not g.layers:
            embeds = g.component == "embeddings"
            if (
                req.method == "full"
                and where.count(g.layers, g.component)
                and (not embeds or arch.tie_word_embeddings)
            ):
                root += g.numel * g.per_layer // (tp if embeds else 1)
            continue
        for i in g.layers:
            if i in per_layer and where.training((i,)):
                per_layer[i] += g.numel * g.per_layer
    return per_layer, root
