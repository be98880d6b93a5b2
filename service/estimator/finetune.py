"""The detailed fine-tuning estimator: peak GPU memory of one training step, and its fit.

A training step goes through three phases, and the peak is the largest of them, not their
sum (the reference tracer shows each, ``../shared/tools/reference-tracer``):

- forward end: weights + optimizer states + everything kept for backward + the loss path's
  fp32 upcast;
- backward: at its start the loss path allocates two fp32 tensors of batch × sequence ×
  vocabulary on top of everything kept; with checkpointing one layer is recomputed; at its
  end all gradients exist (plus, for tied embeddings, the second embedding gradient before
  the two are summed);
- optimizer step: weights + gradients + states + the update's temporary (foreach).

Gradients from the previous step are gone (``zero_grad(set_to_none=True)``, the default), so
forward and the start of backward hold no gradients.

Components: `precision` (dtypes), `optimizers` (states and update transient), `lora`
(adapters), `training_activations` (what layers keep), `sharding` (ZeRO/FSDP, offload),
`formats`/`weights` (bytes of a stored or quantized weight). The per-GPU overhead (CUDA
context, cuBLAS workspace, NCCL, allocator fragmentation) is described in `_overhead`.

Everything that depends only on the architecture and the static settings is computed once
and cached (`_static`); a (batch, sequence) point is then a handful of multiplications, which
is what the fit's inverse searches evaluate.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from types import MappingProxyType

from service.estimator.architecture import Architecture
from service.estimator.errors import InvalidRequest
from service.estimator.formats import bytes_per_element, get_format, linear_weight_bytes
from service.estimator.lora import (
    LoraSpec,
    adapter_parameters,
    lora_targets,
    module_rank,
    validate_lora,
)
from service.estimator.optimizers import (
    OPTIMIZERS,
    TensorGroup,
    get_optimizer,
    optimizer_footprint,
)
from service.estimator.overhead import framework_overhead
from service.estimator.precision import ADAPTER_DTYPE, PRECISIONS, get_precision
from service.estimator.result import Estimate, Fit
from service.estimator.search import largest_true  # noqa: F401  (bounded searches)
from service.estimator.sharding import ShardPlan, shard_state, validate_plan
from service.estimator.training_activations import (
    ATTENTION,
    GRADIENT_CHECKPOINTING,
    ActivationSetup,
    activation_coefficients,
)

__all__ = [
    "ATTENTION",
    "GRADIENT_CHECKPOINTING",
    "METHODS",
    "OPTIMIZERS",
    "PRECISIONS",
    "FinetuneRequest",
    "LoraSpec",
    "estimate_finetune",
    "fit_finetune",
]

METHODS: tuple[str, ...] = ("full", "freeze", "lora", "qlora")
QLORA_FORMATS: tuple[str, ...] = ("nf4", "nf4-single", "fp4", "int8")
BREAKDOWN_KEYS = ("weights", "gradients", "optimizer_states", "activations", "overhead")

# Caching-allocator fragmentation: reserved beyond the allocated peak, as a fraction of it.
# Calibrated on the published reserved-memory figures (docs/accuracy.md, finetune section).
FRAGMENTATION = 0.05

MAX_BATCH_SEARCH = 1 << 16
MAX_SEQUENCE_SEARCH = 1 << 22


@dataclass(frozen=True)
class FinetuneRequest:
    """A fine-tuning job to estimate (one micro-batch step).

    ``trainable_layers`` (method ``freeze``): how many of the last decoder layers train; the
    embeddings, the rest of the layers and lm_head stay frozen. ``weight_format``: storage of
    the frozen base for LoRA/QLoRA (default the model's dtype, ``nf4`` for QLoRA); full and
    freeze fine-tuning keep the whole model in the precision's weight dtype.
    ``quantized_base_saves_inputs`` (QLoRA only): the quantized base linears keep their input
    for backward, as bitsandbytes did before 0.43.2 (July 2024); recent versions do not.
    """

    architecture: Architecture
    method: str = "full"
    lora: LoraSpec = field(default_factory=LoraSpec)
    trainable_layers: int | None = None
    weight_format: str | None = None
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    optimizer_foreach: bool = True
    batch_size: int = 1
    sequence_length: int = 2048
    gradient_checkpointing: str = "none"
    attention: str = "flash"
    gpu_count: int = 1
    zero_stage: int = 0
    offload_optimizer: bool = False
    offload_parameters: bool = False
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    sequence_parallel: bool = False
    quantized_base_saves_inputs: bool = False


# ------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------


def _choice(value: object, allowed: tuple[str, ...], name: str) -> None:
    if value not in allowed:
        raise InvalidRequest(
            f"{name} must be one of {', '.join(allowed)}; got {value!r}", field=name
        )


def _positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequest(f"{name} must be a positive integer; got {value!r}", field=name)
    return value


def _validate(req: FinetuneRequest) -> None:
    arch = req.architecture
    _choice(req.method, METHODS, "method")
    _choice(req.precision, PRECISIONS, "precision")
    _choice(req.optimizer, OPTIMIZERS, "optimizer")
    _choice(req.gradient_checkpointing, GRADIENT_CHECKPOINTING, "gradient_checkpointing")
    _choice(req.attention, ATTENTION, "attention")
    _positive(req.batch_size, "batch_size")
    _positive(req.sequence_length, "sequence_length")
    gpus = _positive(req.gpu_count, "gpu_count")
    tp = _positive(req.tensor_parallel_size, "tensor_parallel_size")
    pp = _positive(req.pipeline_parallel_size, "pipeline_parallel_size")
    if gpus % (tp * pp):
        raise InvalidRequest(
            f"gpu_count ({gpus}) must be a multiple of tensor_parallel_size × "
            f"pipeline_parallel_size ({tp} × {pp})",
            field="gpu_count",
        )
    if pp > arch.num_layers:
        raise InvalidRequest(
            f"pipeline_parallel_size must be at most the layer count ({arch.num_layers})",
            field="pipeline_parallel_size",
        )
    if tp > arch.num_attention_heads or arch.num_attention_heads % tp:
        raise InvalidRequest(
            f"tensor_parallel_size must divide the attention heads ({arch.num_attention_heads})",
            field="tensor_parallel_size",
        )
    if req.sequence_parallel and tp == 1:
        raise InvalidRequest(
            "sequence_parallel needs tensor_parallel_size > 1", field="sequence_parallel"
        )
    if req.method in ("lora", "qlora"):
        validate_lora(arch, req.lora)
    if req.method == "freeze":
        k = req.trainable_layers
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= arch.num_layers:
            raise InvalidRequest(
                f"method 'freeze' needs trainable_layers between 1 and {arch.num_layers}",
                field="trainable_layers",
            )
    if req.method == "qlora":
        fmt = req.weight_format or "nf4"
        if fmt not in QLORA_FORMATS:
            raise InvalidRequest(
                f"QLoRA quantizes the base to 4 or 8 bits; weight_format must be one of "
                f"{', '.join(QLORA_FORMATS)}; got {fmt!r}",
                field="weight_format",
            )
    elif req.weight_format is not None:
        get_format(req.weight_format)
        if req.method in ("full", "freeze") and get_format(req.weight_format).quantized:
            raise InvalidRequest(
                "quantized weights cannot be trained; use method 'qlora' for a quantized "
                "base, or a plain weight_format (fp32, bf16, fp16)",
                field="weight_format",
            )
    validate_plan(gpus, _plan(req))


def _plan(req: FinetuneRequest) -> ShardPlan:
    dp = req.gpu_count // (req.tensor_parallel_size * req.pipeline_parallel_size)
    return ShardPlan(dp, req.zero_stage, req.offload_optimizer, req.offload_parameters)


# ------------------------------------------------------------------------------------------
# Static part (architecture + settings): cached
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stage:
    """One pipeline stage's per-GPU constant bytes and activation coefficients."""

    weights: int
    gradients: int
    states: int  # resident during forward/backward
    states_step: int  # resident during the optimizer step (paged states page in)
    update_temp: int
    buffers: int
    tied_transient: int
    weight_copies: int
    lin: float  # kept bytes per b·s (all in-flight micro-batches)
    quad: float
    head: float  # per b·s, last stage only
    fw_transient: float
    bw_transient: float
    recompute_lin: float
    recompute_quad: float
    overhead_fixed: int


@dataclass(frozen=True)
class _Static:
    stages: tuple[_Stage, ...]  # first and last (one if pp == 1)
    cpu_bytes: int
    trainable: int
    total_params: int
    assumptions: tuple[str, ...]
    details: tuple[tuple[str, int | float | str | bool | None], ...]


def _stage_layers(num_layers: int, pp: int) -> tuple[range, ...]:
    base, rem = divmod(num_layers, pp)
    sizes = [base] * pp
    for i in range(rem):
        sizes[-2 - i if pp > 1 else 0] += 1
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return tuple(out)


@functools.lru_cache(maxsize=512)
def _static(req: FinetuneRequest) -> _Static:
    arch = req.architecture
    prec = get_precision(req.precision)
    opt = get_optimizer(req.optimizer)
    tp, pp = req.tensor_parallel_size, req.pipeline_parallel_size
    plan = _plan(req)
    method = req.method
    is_lora = method in ("lora", "qlora")
    sharded = req.zero_stage > 0
    c = prec.compute_bytes
    assumptions: list[str] = []

    # Weight dtypes. Under ZeRO/FSDP with mixed precision the 16-bit copy is the model's
    # weight and the fp32 master copy lives with the optimizer states (DeepSpeed layout).
    master = prec.master_bytes
    deepspeed_mixed = sharded and prec.autocast
    train_w = c if deepspeed_mixed else master
    grad_b = c if deepspeed_mixed else prec.grad_bytes
    master_copy = master if deepspeed_mixed else 0
    adapter_b = int(bytes_per_element(ADAPTER_DTYPE))

    if is_lora:
        base_fmt_name = req.weight_format or ("nf4" if method == "qlora" else arch.dtype)
        base_fmt = get_format(base_fmt_name)
    else:
        base_fmt = get_format(
            {4: "fp32", 2: "bf16"}[master]
            if not deepspeed_mixed
            else {2: prec.compute}.get(c, "fp32")
        )
    dense_base = "bf16" if base_fmt.quantized else base_fmt.name
    dense_b = int(bytes_per_element(dense_base))

    trainable_from = 0
    if method == "freeze":
        assert req.trainable_layers is not None
        trainable_from = arch.num_layers - req.trainable_layers
    elif is_lora:
        trainable_from = arch.num_layers  # base frozen
    lora_mods = lora_targets(arch, req.lora.target_modules) if is_lora else ()
    lora_names = frozenset(m.name for m in lora_mods)

    stage_ranges = _stage_layers(arch.num_layers, pp)
    stage_ids = (0, pp - 1) if pp > 1 else (0,)

    def on_stage(layers: tuple[int, ...], stage: int, component: str) -> int:
        """How many of `layers` lie on `stage` (non-layer tensors: by component)."""
        if not layers:
            if component == "embeddings":
                return 1 if stage == 0 else 0
            return 1 if stage == pp - 1 else 0
        r = stage_ranges[stage]
        return sum(1 for i in layers if r.start <= i < r.stop)

    stages: list[_Stage] = []
    cpu_total = 0
    trainable_total = 0
    total_params = 0
    for st in stage_ids:
        w_bytes = 0
        trainable_groups: list[TensorGroup] = []
        train_numel = 0
        largest_layer = 0
        for m in arch.linear_modules():
            if m.tied:
                continue
            n_here = on_stage(m.layers, st, m.component)
            if not n_here:
                continue
            per_layer_inst = m.per_layer
            inst = per_layer_inst * n_here
            split = tp if m.component != "router" else 1
            numel = m.params_per_instance * inst // split
            if st == 0:
                total_params += m.params_per_instance * m.count if st == stage_ids[0] else 0
            if m.layers:
                trains_layers = (
                    sum(1 for i in m.layers if i in stage_ranges[st] and i >= trainable_from)
                    if not is_lora
                    else 0
                )
            else:
                trains_layers = 1 if (method == "full" and n_here) else 0
            if method == "full":
                trains_layers = n_here
            frozen_layers = n_here - trains_layers
            if trains_layers:
                k = per_layer_inst * trains_layers
                w_bytes += m.params_per_instance * k // split * train_w
                # optimizer states follow the fp32 master copy under mixed precision
                trainable_groups.append(
                    TensorGroup(m.out_features // split, m.in_features, k, master)
                )
                train_numel += m.params_per_instance * k // split
            if frozen_layers:
                k = per_layer_inst * frozen_layers
                quantized = base_fmt.quantized and m.component not in ("lm_head", "router")
                if quantized:
                    w_bytes += (
                        linear_weight_bytes(base_fmt, m.in_features, m.out_features // split) * k
                        + (m.bias_numel // split) * k * dense_b
                    )
                else:
                    w_bytes += m.params_per_instance * k // split * dense_b
            if m.layers:
                largest_layer = max(largest_layer, m.params_per_instance * per_layer_inst)
            if m.name in lora_names and m.layers:
                k = per_layer_inst * n_here
                r = module_rank(m, req.lora.rank)
                a = TensorGroup(r, m.in_features, k, adapter_b)
                b = TensorGroup(m.out_features // split, r, k, adapter_b)
                trainable_groups += [a, b]
                n_ad = (a.numel + b.numel) * k
                train_numel += n_ad
                w_bytes += n_ad * adapter_b
        for g in arch.parameter_groups():
            if g.is_buffer:
                continue
            n_here = on_stage(g.layers, st, g.component)
            if g.component == "embeddings" and pp > 1 and arch.tie_word_embeddings and st == pp - 1:
                n_here = 1  # the last stage holds its own copy of a tied lm_head
            if not n_here:
                continue
            split = tp if g.component == "embeddings" else 1
            numel = g.numel * g.per_layer * n_here // split
            if g.layers:
                trains = method == "full" or (
                    method == "freeze"
                    and any(i >= trainable_from for i in g.layers if i in stage_ranges[st])
                )
                trains_n = (
                    g.numel
                    * g.per_layer
                    * sum(
                        1
                        for i in g.layers
                        if i in stage_ranges[st]
                        and (method == "full" or (method == "freeze" and i >= trainable_from))
                    )
                    // split
                    if trains
                    else 0
                )
            else:
                trains_n = numel if method == "full" else 0
            w_bytes += trains_n * train_w + (numel - trains_n) * dense_b
            if trains_n:
                cols = arch.hidden_size if g.component == "embeddings" else 0
                rows = trains_n // cols if cols else trains_n
                trainable_groups.append(TensorGroup(rows, cols, 1, master))
                train_numel += trains_n
        trainable_total = max(trainable_total, 0) + (train_numel if st == 0 or pp > 1 else 0)

        grads = train_numel * (adapter_b if is_lora else grad_b)
        foot = optimizer_footprint(opt, trainable_groups, req.optimizer_foreach)
        states = foot.state_bytes + train_numel * master_copy
        layer_param_bytes = largest_layer // tp * (c if sharded else train_w)
        bucket = arch.hidden_size * arch.hidden_size * (grad_b if not is_lora else adapter_b)
        sh = shard_state(
            plan,
            weights=w_bytes,
            trainable_weights=train_numel * train_w,
            gradients=grads,
            optimizer_states=states,
            update_temp=foot.update_temp_bytes,
            layer_param_bytes=layer_param_bytes,
            bucket_bytes=bucket,
        )
        cpu_total += sh.cpu_bytes * tp
        states_fb = 0 if foot.paged else sh.optimizer_states
        tied_transient = 0
        if arch.tie_word_embeddings and method == "full" and pp == 1:
            tied_transient = arch.vocab_size * arch.hidden_size // tp * grad_b
            if req.zero_stage >= 2:
                tied_transient //= plan.dp

        # Activations.
        residual_b = (
            train_w
            if method == "full" or (method == "freeze" and trainable_from == 0)
            else (dense_b if not base_fmt.quantized else c)
        )
        if method in ("full", "freeze"):
            residual_b = master if not deepspeed_mixed else c
        setup = ActivationSetup(
            arch=arch,
            compute_bytes=c,
            residual_bytes=residual_b,
            autocast=prec.autocast,
            base_trainable=method in ("full", "freeze"),
            trainable_from=trainable_from,
            lora_names=lora_names,
            lora_rank=req.lora.rank,
            attention=req.attention,
            checkpointing=req.gradient_checkpointing,
            tp=tp,
            sp=req.sequence_parallel,
            frozen_inputs_kept=req.quantized_base_saves_inputs and base_fmt.quantized and is_lora,
        )
        coef = activation_coefficients(setup)
        layer_range = stage_ranges[st]
        in_flight = pp - st  # 1F1B: stage i holds pp - i micro-batches
        lin = sum(coef.layer_lin[i] for i in layer_range) * in_flight
        quad = sum(coef.layer_quad[i] for i in layer_range) * in_flight
        last = st == pp - 1
        copies = 0
        if prec.autocast and (not is_lora and not deepspeed_mixed):
            # autocast's 16-bit copies of this stage's fp32 linear weights
            frac = len(layer_range) / arch.num_layers
            copies = int(coef.weight_copies * frac)
        elif prec.autocast and is_lora and dense_b > c:
            copies = int(coef.weight_copies * len(layer_range) / arch.num_layers)
        fused = [m for m in lora_mods if not m.is_nn_linear and m.layers]
        if fused:
            # peft adapts a 3-D expert stack through a parametrization: each forward
            # materializes W + B·A for every expert (`baddbmm`, in W's dtype) and the expert
            # matmul keeps that effective weight for backward. Under full checkpointing only
            # the layer being recomputed holds one.
            per_layer: dict[int, int] = {}
            for m in fused:
                for i in m.layers:
                    if i in layer_range:
                        per_layer[i] = per_layer.get(i, 0) + (
                            m.params_per_instance * m.per_layer // tp * dense_b
                        )
            if per_layer:
                copies += (
                    max(per_layer.values())
                    if req.gradient_checkpointing == "full"
                    else sum(per_layer.values()) * in_flight
                )
        if is_lora and base_fmt.quantized:
            # A quantized base linear is dequantized to the compute dtype for each matmul, in
            # forward and again in backward (bitsandbytes `dequantize_4bit`): one such weight,
            # the largest, exists at a time on top of everything kept.
            copies += (
                max(
                    (m.out_features // (tp if m.component != "router" else 1)) * m.in_features
                    for m in arch.linear_modules()
                    if m.layers and m.is_nn_linear and m.component != "router"
                )
                * c
            )
        # CUDA context, workspaces and NCCL (`overhead`); a data-parallel group needs a
        # communicator of its own, priced like a tensor-parallel group within one node (ring
        # buffers are per channel, not per peer beyond the node's 8 NVLink peers).
        overhead_fixed = framework_overhead(
            max(tp, min(plan.dp, 8)), pp, uses_nccl=req.gpu_count > 1
        ).total
        stages.append(
            _Stage(
                weights=sh.weights,
                gradients=sh.gradients,
                states=states_fb,
                states_step=sh.optimizer_states,
                update_temp=sh.update_temp,
                buffers=sh.buffers,
                tied_transient=tied_transient,
                weight_copies=copies,
                lin=lin + (coef.embed_lin if st == 0 and in_flight > 1 else 0.0),
                quad=quad,
                head=coef.head_kept if last else 0.0,
                fw_transient=coef.fw_transient if last else 0.0,
                bw_transient=coef.bw_transient if last else 0.0,
                recompute_lin=coef.recompute_lin,
                recompute_quad=coef.recompute_quad,
                overhead_fixed=overhead_fixed,
            )
        )
    if is_lora:
        trainable = adapter_parameters(arch, req.lora)
    elif method == "freeze":
        trainable = sum(
            m.params_per_instance * m.per_layer * sum(1 for i in m.layers if i >= trainable_from)
            for m in arch.linear_modules()
            if m.layers and not m.tied
        ) + sum(
            g.numel * g.per_layer * sum(1 for i in g.layers if i >= trainable_from)
            for g in arch.parameter_groups()
            if g.layers and not g.is_buffer
        )
    else:
        trainable = sum(m.parameters for m in arch.linear_modules()) + sum(
            g.parameters for g in arch.parameter_groups()
        )
    total = sum(m.parameters for m in arch.linear_modules()) + sum(
        g.parameters for g in arch.parameter_groups()
    )
    dp = plan.dp
    cpu = (
        cpu_total
        * (dp if req.zero_stage == 0 else 1)
        * (pp if pp > 1 else 1)
        // max(len(stage_ids), 1)
    )
    assumptions += _assumptions(req, prec.name, base_fmt.name, deepspeed_mixed, opt.paged)
    details = (
        ("trainable_parameters", trainable),
        ("total_parameters", total),
        (
            "weights_dtype",
            base_fmt.name if is_lora else prec.master if not deepspeed_mixed else prec.compute,
        ),
        ("trainable_dtype", ADAPTER_DTYPE if is_lora else prec.master),
        ("compute_dtype", prec.compute),
        (
            "gradient_dtype",
            ADAPTER_DTYPE if is_lora else (prec.compute if deepspeed_mixed else prec.grad),
        ),
        ("optimizer_state_layout", opt.description),
        ("data_parallel_size", dp),
    )
    return _Static(tuple(stages), cpu, trainable, total, tuple(assumptions), details)


def _assumptions(
    req: FinetuneRequest, prec: str, base_fmt: str, deepspeed_mixed: bool, paged: bool
) -> list[str]:
    out = []
    if req.method in ("lora", "qlora"):
        targets = req.lora.target_modules
        tgt = targets if isinstance(targets, str) else ",".join(targets)
        out.append(
            f"LoRA rank {req.lora.rank} on {tgt}; adapters, their gradients and optimizer "
            f"states in fp32 (peft); frozen base stored as {base_fmt}"
        )
    if (
        req.quantized_base_saves_inputs
        and req.method in ("lora", "qlora")
        and get_format(base_fmt).quantized
    ):
        kept = (
            "the layer input and one copy of each tensor its quantized linears read"
            if req.gradient_checkpointing == "full"
            else "the input of every quantized linear"
        )
        out.append(
            "bitsandbytes before 0.43.2: each quantized matmul holds its input in its autograd "
            f"context, which checkpointing does not free either; every layer keeps {kept}"
        )
    if deepspeed_mixed:
        out.append(
            "ZeRO/FSDP mixed precision: 16-bit weights and gradients on the GPU, fp32 master "
            "copy counted with the optimizer states"
        )
    elif prec.endswith("-mixed") and req.method in ("full", "freeze"):
        out.append(
            "mixed precision: fp32 weights, gradients and optimizer states; autocast's 16-bit "
            "weight copies counted as activations"
        )
    if paged:
        out.append("paged optimizer states resident on the GPU during the optimizer step only")
    if req.optimizer_foreach and req.optimizer in ("adam", "adamw", "rmsprop"):
        out.append("foreach optimizer: a parameter-sized temporary during step()")
    out.append(
        "gradients freed between steps (zero_grad(set_to_none=True)); no gradient accumulation "
        "buffers held across micro-batches"
    )
    out.append(
        f"overhead: CUDA context and cuBLAS workspace, NCCL buffers when sharded, allocator "
        f"fragmentation {FRAGMENTATION:.0%} of the allocated peak"
    )
    return out


# ------------------------------------------------------------------------------------------
# Per-(batch, sequence) evaluation: arithmetic only
# ------------------------------------------------------------------------------------------


def _stage_phases(stg: _Stage, b: int, s: int) -> tuple[str, int, dict[str, int]]:
    """(phase, allocated peak, breakdown without overhead) for one stage."""
    bs = b * s
    bss = bs * s
    kept = stg.lin * bs + stg.quad * bss + stg.head * bs + stg.weight_copies
    base = stg.weights + stg.buffers
    fw = kept + stg.fw_transient * bs
    bw = kept + stg.bw_transient * bs
    recompute = kept - stg.head * bs + stg.recompute_lin * bs + stg.recompute_quad * bss
    act_fb = max(fw, bw, recompute)
    fb_total = base + stg.states + act_fb
    bw_end = base + stg.states + stg.gradients + stg.tied_transient
    step = base + stg.states_step + stg.gradients + stg.update_temp
    if fb_total >= bw_end and fb_total >= step:
        phase = "forward" if fw >= bw and fw >= recompute else "backward"
        parts = {
            "weights": stg.weights + stg.buffers,
            "gradients": 0,
            "optimizer_states": stg.states,
            "activations": int(act_fb),
        }
        return phase, int(fb_total), parts
    if bw_end >= step:
        return (
            "backward_end",
            int(bw_end),
            {
                "weights": stg.weights + stg.buffers,
                "gradients": stg.gradients + stg.tied_transient,
                "optimizer_states": stg.states,
                "activations": 0,
            },
        )
    return (
        "optimizer_step",
        int(step),
        {
            "weights": stg.weights + stg.buffers,
            "gradients": stg.gradients,
            "optimizer_states": stg.states_step + stg.update_temp,
            "activations": 0,
        },
    )


def _evaluate(st: _Static, b: int, s: int) -> tuple[str, int, dict[str, int]]:
    """Most loaded GPU: (phase, allocated peak, breakdown with overhead)."""
    best: tuple[str, int, dict[str, int]] | None = None
    for stg in st.stages:
        phase, alloc, parts = _stage_phases(stg, b, s)
        if best is None or alloc > best[1]:
            best = (phase, alloc, parts)
    assert best is not None
    phase, _, parts = best
    alloc = _allocated(st, b, s)
    parts = dict(parts)
    # integer rounding of the phase sum is absorbed by the activations
    parts["activations"] += alloc - sum(parts.values())
    parts["overhead"] = st.stages[0].overhead_fixed + int(alloc * FRAGMENTATION)
    return phase, alloc, parts


def _allocated(st: _Static, b: int, s: int) -> int:
    """Allocated peak of the most loaded GPU: the largest phase line at (b, s)."""
    bs = b * s
    bss = bs * s
    return int(max(k + lin * bs + quad * bss for k, lin, quad in _phase_lines(st)))


def _per_gpu_bytes(st: _Static, b: int, s: int) -> int:
    alloc = _allocated(st, b, s)
    return alloc + st.stages[0].overhead_fixed + int(alloc * FRAGMENTATION)


@functools.lru_cache(maxsize=512)
def _phase_lines(st: _Static) -> tuple[tuple[float, float, float], ...]:
    """Every phase's allocated bytes as K + L·(b·s) + Q·(b·s²), over all stages."""
    out = []
    for g in st.stages:
        k = g.weights + g.buffers + g.states + g.weight_copies
        out.append((float(k), g.lin + g.head + g.fw_transient, g.quad))
        out.append((float(k), g.lin + g.head + g.bw_transient, g.quad))
        out.append((float(k), g.lin + g.recompute_lin, g.quad + g.recompute_quad))
        out.append(
            (float(g.weights + g.buffers + g.states + g.gradients + g.tied_transient), 0.0, 0.0)
        )
        out.append(
            (float(g.weights + g.buffers + g.states_step + g.gradients + g.update_temp), 0.0, 0.0)
        )
    return tuple(out)


def _alloc_budget(st: _Static, usable: int) -> float:
    """The allocated peak that still fits ``usable`` once overhead is added."""
    return (usable - st.stages[0].overhead_fixed) / (1 + FRAGMENTATION)


def _solve_max(st: _Static, usable: int, b: int | None, s: int | None, cap: int) -> int | None:
    """Largest batch (s given) or sequence (b given) that fits: solved per phase line, then
    checked against the exact evaluation (integer rounding) and stepped down if needed."""
    budget = _alloc_budget(st, usable)
    best = float(cap)
    for k, lin, quad in _phase_lines(st):
        room = budget - k
        if room < 0:
            return None
        if s is not None:  # unknowns: batch
            slope = lin * s + quad * s * s
            if slope > 0:
                best = min(best, room / slope)
        else:
            assert b is not None
            a2, a1 = quad * b, lin * b
            if a2 > 0:
                x = (-a1 + (a1 * a1 + 4 * a2 * room) ** 0.5) / (2 * a2)
            elif a1 > 0:
                x = room / a1
            else:
                continue
            best = min(best, x)
    n = min(int(best), cap)

    def fits(x: int) -> bool:
        return (
            _per_gpu_bytes(st, x, s) if s is not None else _per_gpu_bytes(st, b or 1, x)
        ) <= usable

    while n >= 1 and not fits(n):
        n -= 1 if n < 64 else max(1, n // 1000)
    if n < 1:
        return None
    while n < cap and fits(n + 1):
        n += 1
    return n


def _static_key(req: FinetuneRequest) -> FinetuneRequest:
    if req.batch_size == 1 and req.sequence_length == 1:
        return req
    return dataclasses.replace(req, batch_size=1, sequence_length=1)


_STATIC_FIELDS: tuple[str, ...] = tuple(
    f.name
    for f in dataclasses.fields(FinetuneRequest)
    if f.name not in ("batch_size", "sequence_length")
)
_PREPARED: dict[tuple[object, ...], _Static] = {}
_PREPARED_MAX = 2048


def _prepare(req: FinetuneRequest) -> _Static:
    """The validated, cached static part of ``req`` (a dict lookup on its static fields);
    batch and sequence are checked on every call."""
    _positive(req.batch_size, "batch_size")
    _positive(req.sequence_length, "sequence_length")
    if not isinstance(req.lora.target_modules, str):
        req = _normalized(req)
    key = tuple(getattr(req, n) for n in _STATIC_FIELDS)
    hit = _PREPARED.get(key)
    if hit is None:
        _validate(req)
        hit = _static(_static_key(req))
        if len(_PREPARED) >= _PREPARED_MAX:
            _PREPARED.clear()
        _PREPARED[key] = hit
    return hit


def _normalized(req: FinetuneRequest) -> FinetuneRequest:
    targets = req.lora.target_modules
    if not isinstance(targets, str):
        targets = tuple(targets)
    return dataclasses.replace(req, lora=dataclasses.replace(req.lora, target_modules=targets))


# ------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------


def estimate_finetune(req: FinetuneRequest) -> Estimate:
    """Peak GPU memory of one training step of ``req``: per GPU (most loaded) and in total."""
    st = _prepare(req)
    phase, alloc, parts = _evaluate(st, req.batch_size, req.sequence_length)
    per_gpu = {k: int(parts[k]) for k in BREAKDOWN_KEYS}
    total = {k: v * req.gpu_count for k, v in per_gpu.items()}
    details = dict(st.details)
    details["peak_phase"] = phase
    details["allocated_peak_bytes"] = alloc
    details["fragmentation_fraction"] = FRAGMENTATION
    return Estimate(
        kind="finetune",
        estimator="detailed",
        total=MappingProxyType(total),
        per_gpu=MappingProxyType(per_gpu),
        gpu_count=req.gpu_count,
        assumptions=st.assumptions,
        cpu_bytes=st.cpu_bytes,
        details=MappingProxyType(details),
    )


def _fits(req: FinetuneRequest, usable: int, b: int, s: int, gpus: int | None = None) -> bool:
    r = req if gpus is None else dataclasses.replace(req, gpu_count=gpus)
    return _per_gpu_bytes(_prepare(r), b, s) <= usable


def fit_finetune(req: FinetuneRequest, gpu_memory_bytes: int, gpu_label: str) -> Fit:
    """Whether ``req`` fits GPUs of ``gpu_memory_bytes`` each, and the inverse answers:
    fewest GPUs at the requested ZeRO stage, largest micro-batch, longest sequence."""
    if not isinstance(req.lora.target_modules, str):
        req = _normalized(req)
    st = _prepare(req)
    b, s = req.batch_size, req.sequence_length
    usable = int(gpu_memory_bytes)
    required = _per_gpu_bytes(st, b, s)
    fits = required <= usable

    # Memory is a maximum of phase lines in b·s and b·s² (see `_phase_lines`): the largest
    # batch and sequence are solved per line, then checked exactly.
    max_batch = _solve_max(st, usable, None, s, MAX_BATCH_SEARCH)
    max_seq = _solve_max(st, usable, b, None, MAX_SEQUENCE_SEARCH)
    min_gpus = _min_gpu_count_cached(req, b, s, usable)
    return Fit(
        gpu=gpu_label,
        gpu_count=req.gpu_count,
        usable_bytes=usable,
        required_bytes=required,
        fits=fits,
        headroom_bytes=usable - required,
        min_gpu_count=min_gpus,
        max_batch_size=max_batch,
        max_sequence_length=max_seq,
        assumptions=(
            f"min_gpu_count keeps zero_stage {req.zero_stage}, tensor_parallel_size "
            f"{req.tensor_parallel_size} and pipeline_parallel_size "
            f"{req.pipeline_parallel_size}; data-parallel replicas are added",
        ),
    )


_MAX_DP = 4096


_MIN_GPUS: dict[tuple[object, ...], int | None] = {}


def _min_gpu_count_cached(req: FinetuneRequest, b: int, s: int, usable: int) -> int | None:
    key = (*(getattr(req, n) for n in _STATIC_FIELDS if n != "gpu_count"), b, s, usable)
    if key not in _MIN_GPUS:
        if len(_MIN_GPUS) >= _PREPARED_MAX:
            _MIN_GPUS.clear()
        _MIN_GPUS[key] = _min_gpu_count(_static_key(req), b, s, usable)
    return _MIN_GPUS[key]


def _min_gpu_count(req: FinetuneRequest, b: int, s: int, usable: int) -> int | None:
    """Fewest GPUs (a multiple of TP × PP) at the requested ZeRO stage that fit."""
    mp = req.tensor_parallel_size * req.pipeline_parallel_size

    def ok(dp: int) -> bool:
        r = dataclasses.replace(req, gpu_count=dp * mp)
        try:
            validate_plan(dp * mp, _plan(r))
        except InvalidRequest:
            return False
        return _per_gpu_bytes(_static(r), b, s) <= usable

    if req.zero_stage == 0 and not (req.offload_optimizer or req.offload_parameters):
        # Data parallelism without sharding replicates everything: more GPUs never help.
        return mp if ok(1) else None
    if not ok(_MAX_DP):
        return None
    # Per-GPU bytes fall monotonically with dp: bisect on dp.
    lo, hi = 1, _MAX_DP
    if ok(lo):
        return lo * mp
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi * mp
