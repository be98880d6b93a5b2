"""The static state of a training step: what each GPU holds whatever the batch and sequence.

For the first and last pipeline stage (the most loaded ones), per GPU: weights (trainable and
frozen, a quantized base priced in its format), gradients, optimizer states (resident during
forward/backward and during the step, paged ones only then), the update's transient, the
sharding buffers, and the activation coefficients in b·s and b·s² that :mod:`.phases` turns
into bytes at a (batch, sequence) point. Computed once per request's static fields and cached.

Components: :mod:`.tensors` (the stage's tensors, their dtypes and bytes), :mod:`.precision`
(dtypes), :mod:`.optimizers` (states and update transient), :mod:`.lora` (adapters),
:mod:`.activations` (what layers keep), :mod:`.sharding` (ZeRO/FSDP, offload),
:mod:`service.estimator.formats` (bytes of a stored or quantized weight).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from service.estimator.engines.overhead import framework_overhead
from service.estimator.memo import memoized
from service.estimator.model import Architecture, LinearModule
from service.estimator.training.activations import ActivationSetup, activation_coefficients
from service.estimator.training.lora import adapter_parameters, lora_targets
from service.estimator.training.loss import get_loss_path
from service.estimator.training.optimizers import get_optimizer, optimizer_footprint
from service.estimator.training.precision import ADAPTER_DTYPE, Precision, get_precision
from service.estimator.training.request import FinetuneRequest, sharding_of
from service.estimator.training.sharding import LateBackward, fsdp2_late_backward, shard_state
from service.estimator.training.tensors import (
    StagePlacement,
    TrainingDtypes,
    gathered_numel,
    stage_tensors,
    trainable_split,
    training_dtypes,
    weight_copies,
)

__all__ = ["StageState", "StaticState", "static_state"]


@dataclass(frozen=True)
class StageState:
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
    loss_fw_fixed: int  # the loss path's token-independent bytes at the forward's end
    loss_bw_fixed: int  # ... and at the start of backward
    recompute_lin: float
    recompute_quad: float
    overhead_fixed: int
    # FSDP2, late in backward (:func:`.sharding.fsdp2_late_backward`); None otherwise
    late_backward: LateBackward | None = None
    late_lin: float = 0.0
    late_quad: float = 0.0

    @property
    def late_fixed(self) -> int:
        """Bytes of the late-backward phase independent of the tokens."""
        late = self.late_backward
        if late is None:
            return 0
        return self.weights + self.states + late.gathered + late.gradients


@dataclass(frozen=True)
class StaticState:
    stages: tuple[StageState, ...]  # first and last (one if pp == 1)
    cpu_bytes: int
    trainable: int
    total_params: int
    assumptions: tuple[str, ...]
    details: tuple[tuple[str, int | float | str | bool | None], ...]

    @cached_property
    def phase_lines(self) -> tuple[tuple[float, float, float], ...]:
        """Every phase's allocated bytes as K + L·(b·s) + Q·(b·s²), over all stages."""
        out = []
        for g in self.stages:
            k = g.weights + g.buffers + g.states + g.weight_copies
            out.append((float(k + g.loss_fw_fixed), g.lin + g.head + g.fw_transient, g.quad))
            out.append((float(k + g.loss_bw_fixed), g.lin + g.head + g.bw_transient, g.quad))
            out.append((float(k), g.lin + g.recompute_lin, g.quad + g.recompute_quad))
            out.append(
                (float(g.weights + g.buffers + g.states + g.gradients + g.tied_transient), 0.0, 0.0)
            )
            out.append(
                (
                    float(g.weights + g.buffers + g.states_step + g.gradients + g.update_temp),
                    0.0,
                    0.0,
                )
            )
            if g.late_backward is not None:
                out.append((float(g.late_fixed), g.late_lin, g.late_quad))
        return tuple(out)


def _late_backward(
    req: FinetuneRequest,
    dt: TrainingDtypes,
    where: StagePlacement,
    lora_names: frozenset[str],
    gathered_layer: int,
    gathered_root: int,
) -> LateBackward | None:
    """FSDP2's late-backward holdings (:func:`.sharding.fsdp2_late_backward`) for a
    single-stage job of two or more layers; None for any other layout."""
    if (
        req.zero_stage != 3
        or req.sharding_implementation != "fsdp2"
        or req.pipeline_parallel_size > 1
        or len(where.range) < 2
    ):
        return None
    per_layer, root = trainable_split(req, where, lora_names)
    grad = dt.adapter if req.is_lora else dt.gradient
    second = where.range[1]
    done = sum(n for i, n in per_layer.items() if i > second)
    return fsdp2_late_backward(
        sharding_of(req).dp,
        root_param_bytes=gathered_root,
        layer_param_bytes=gathered_layer,
        done_layer_grad_bytes=done * grad,
        current_layer_grad_bytes=per_layer[second] * grad,
        previous_layer_grad_bytes=per_layer.get(second + 1, 0) * grad,
        root_grad_bytes=root * grad,
    )


def _loss_fixed(req: FinetuneRequest, dt: TrainingDtypes) -> tuple[int, int]:
    """The loss path's lm_head gradient allocated before backward reaches lm_head (fused
    paths), as (forward end, start of backward) bytes on the last stage."""
    if req.method != "full":  # only full fine-tuning trains lm_head's own weight
        return 0, 0
    arch = req.arch
    numel = arch.vocab_size * arch.hidden_size // req.tensor_parallel_size
    return get_loss_path(req.loss_implementation).fixed(
        numel * dt.trainable_weight, numel * dt.compute
    )


def _activation_setup(
    req: FinetuneRequest,
    prec: Precision,
    dt: TrainingDtypes,
    where: StagePlacement,
    lora_names: frozenset[str],
) -> ActivationSetup:
    base_trains = req.method in ("full", "freeze")
    residual = (
        (dt.compute if dt.deepspeed_mixed else dt.master)
        if base_trains
        else (dt.frozen if not dt.base_format.quantized or req.kbit_prepared else dt.compute)
    )
    return ActivationSetup(
        arch=req.arch,
        compute_bytes=dt.compute,
        residual_bytes=residual,
        autocast=prec.autocast,
        base_trainable=base_trains,
        trainable_from=where.trainable_from,
        lora_names=lora_names,
        lora_rank=req.lora.rank,
        attention=req.attention,
        checkpointing=req.gradient_checkpointing,
        tp=req.tensor_parallel_size,
        sp=req.sequence_parallel,
        frozen_inputs_kept=(
            req.quantized_base_saves_inputs and dt.base_format.quantized and req.is_lora
        ),
        loss=req.loss_implementation,
        kbit_fp32=req.kbit_prepared,
    )


def _stage_state(
    req: FinetuneRequest,
    prec: Precision,
    dt: TrainingDtypes,
    stage: int,
    lora_mods: tuple[LinearModule, ...],
) -> tuple[StageState, int]:
    """(the stage's state, its host bytes per model-parallel rank)."""
    arch = req.arch
    tp, pp = req.tensor_parallel_size, req.pipeline_parallel_size
    opt = get_optimizer(req.optimizer)
    sharding = sharding_of(req)
    lora_names = frozenset(m.name for m in lora_mods)
    where = StagePlacement(req, stage)
    tensors = stage_tensors(where, dt, lora_names)
    trainable = tensors.trainable_numel
    grads = trainable * (dt.adapter if req.is_lora else dt.gradient)
    foot = optimizer_footprint(opt, tensors.groups, req.optimizer_foreach)
    sharded = req.zero_stage > 0
    layer_param_bytes = (
        tensors.largest_layer // tp * (dt.compute if sharded else dt.trainable_weight)
    )
    bucket = arch.hidden_size * arch.hidden_size * (dt.adapter if req.is_lora else dt.gradient)
    gathered = dt.compute if sharded else dt.trainable_weight
    decoder_layer, root = gathered_numel(arch, where)
    sh = shard_state(
        sharding,
        weights=tensors.weights,
        trainable_weights=trainable * dt.trainable_weight,
        gradients=grads,
        optimizer_states=foot.state_bytes + trainable * dt.master_copy,
        update_temp=foot.update_temp_bytes,
        layer_param_bytes=layer_param_bytes,
        bucket_bytes=bucket,
        decoder_layer_bytes=decoder_layer // tp * gathered,
        root_param_bytes=root // tp * gathered,
    )
    tied_transient = 0
    if arch.tie_word_embeddings and req.method == "full" and pp == 1:
        tied_transient = arch.vocab_size * arch.hidden_size // tp * dt.gradient
        if req.zero_stage >= 2:
            tied_transient //= sharding.dp
    coef = activation_coefficients(_activation_setup(req, prec, dt, where, lora_names))
    late = _late_backward(
        req, dt, where, lora_names, decoder_layer // tp * gathered, root // tp * gathered
    )
    late_layers = where.range[:2]
    last = stage == pp - 1
    loss_fw, loss_bw = _loss_fixed(req, dt) if last else (0, 0)
    in_flight = pp - stage  # 1F1B: stage i holds pp - i micro-batches
    # CUDA context, workspaces and NCCL; a data-parallel group needs a communicator of its
    # own, priced like a tensor-parallel group within one node (ring buffers are per channel,
    # not per peer beyond the node's 8 NVLink peers).
    overhead_fixed = framework_overhead(
        max(tp, min(sharding.dp, 8)), pp, uses_nccl=req.gpu_count > 1
    ).total
    state = StageState(
        weights=sh.weights,
        gradients=sh.gradients,
        states=0 if foot.paged else sh.optimizer_states,
        states_step=sh.optimizer_states,
        update_temp=sh.update_temp,
        buffers=sh.buffers,
        tied_transient=tied_transient,
        weight_copies=weight_copies(req, prec, dt, coef, where, lora_mods, in_flight),
        lin=sum(coef.layer_lin[i] for i in where.range) * in_flight
        + (coef.embed_lin if stage == 0 and in_flight > 1 else 0.0),
        quad=sum(coef.layer_quad[i] for i in where.range) * in_flight,
        head=coef.head_kept if last else 0.0,
        fw_transient=coef.fw_transient if last else 0.0,
        bw_transient=coef.bw_transient if last else 0.0,
        loss_fw_fixed=loss_fw,
        loss_bw_fixed=loss_bw,
        recompute_lin=coef.recompute_lin,
        recompute_quad=coef.recompute_quad,
        overhead_fixed=overhead_fixed,
        # layers 0 and 1 still hold what they keep; layer 1 is recomputed (checkpointing)
        # and its backward's working set is live
        late_backward=late,
        late_lin=sum(coef.layer_lin[i] for i in late_layers) + coef.recompute_lin,
        late_quad=sum(coef.layer_quad[i] for i in late_layers) + coef.recompute_quad,
    )
    return state, sh.cpu_bytes * tp


def _trainable_parameters(req: FinetuneRequest, arch: Architecture) -> int:
    if req.is_lora:
        return adapter_parameters(arch, req.lora)
    if req.method == "freeze":
        first = arch.num_layers - req.trainable_layer_count
        return sum(
            m.params_per_instance * m.per_layer * sum(1 for i in m.layers if i >= first)
            for m in arch.linear_modules
            if m.layers and not m.tied
        ) + sum(
            g.numel * g.per_layer * sum(1 for i in g.layers if i >= first)
            for g in arch.parameter_groups
            if g.layers and not g.is_buffer
        )
    return _total_parameters(arch)


def _total_parameters(arch: Architecture) -> int:
    return sum(m.parameters for m in arch.linear_modules) + sum(
        g.parameters for g in arch.parameter_groups
    )


def _assumptions(req: FinetuneRequest, prec: str, dt: TrainingDtypes, paged: bool) -> list[str]:
    from service.estimator.calibration import value

    out = []
    if req.method == "freeze" and req.trainable_layers is None:
        out.append(f"freeze: the last {req.trainable_layer_count} decoder layers train (default)")
    if req.is_lora:
        targets = req.lora.target_modules
        tgt = targets if isinstance(targets, str) else ",".join(targets)
        out.append(
            f"LoRA rank {req.lora.rank} on {tgt}; adapters, their gradients and optimizer "
            f"states in fp32 (peft); frozen base stored as {dt.base_format.name}"
        )
    if req.quantized_base_saves_inputs and req.is_lora and dt.base_format.quantized:
        kept = (
            "the layer input and one copy of each tensor its quantized linears read"
            if req.gradient_checkpointing == "full"
            else "the input of every quantized linear"
        )
        out.append(
            "bitsandbytes before 0.43.2: each quantized matmul holds its input in its autograd "
            f"context, which checkpointing does not free either; every layer keeps {kept}"
        )
    if req.kbit_prepared:
        out.append(
            "QLoRA base prepared by peft's prepare_model_for_kbit_training (kbit_preparation "
            "'peft', the standard Hugging Face recipe): embeddings, lm_head, norms and biases in "
            "fp32, so the residual stream, the norm outputs and the quantized projections' "
            "outputs are fp32"
        )
    if dt.deepspeed_mixed:
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
    loss = get_loss_path(req.loss_implementation)
    out.append(f"loss_implementation {loss.name}: {loss.summary}")
    out.append(
        "gradients freed between steps (zero_grad(set_to_none=True)); no gradient accumulation "
        "buffers held across micro-batches"
    )
    fragmentation = value("training.fragmentation_fraction")
    out.append(
        f"overhead: CUDA context and cuBLAS workspace, NCCL buffers when sharded, allocator "
        f"fragmentation {fragmentation:.0%} of the allocated peak"
    )
    return out


@memoized
def static_state(req: FinetuneRequest) -> StaticState:
    """The static state of ``req`` (already validated; batch and sequence are ignored)."""
    arch = req.arch
    prec = get_precision(req.precision)
    opt = get_optimizer(req.optimizer)
    dt = training_dtypes(req, prec)
    pp = req.pipeline_parallel_size
    lora_mods = lora_targets(arch, req.lora.target_modules) if req.is_lora else ()
    stage_ids = (0, pp - 1) if pp > 1 else (0,)
    stages = []
    cpu_total = 0
    for stage in stage_ids:
        state, cpu = _stage_state(req, prec, dt, stage, lora_mods)
        stages.append(state)
        cpu_total += cpu
    sharding = sharding_of(req)
    cpu = cpu_total * (sharding.dp if req.zero_stage == 0 else 1) * (pp if pp > 1 else 1)
    cpu //= len(stage_ids)
    trainable = _trainable_parameters(req, arch)
    details = (
        ("trainable_parameters", trainable),
        ("total_parameters", _total_parameters(arch)),
        (
            "weights_dtype",
            dt.base_format.name
            if req.is_lora
            else prec.master
            if not dt.deepspeed_mixed
            else prec.compute,
        ),
        ("trainable_dtype", ADAPTER_DTYPE if req.is_lora else prec.master),
        ("compute_dtype", prec.compute),
        (
            "gradient_dtype",
            ADAPTER_DTYPE if req.is_lora else (prec.compute if dt.deepspeed_mixed else prec.grad),
        ),
        ("optimizer_state_layout", opt.description),
        ("data_parallel_size", sharding.dp),
    )
    return StaticState(
        stages=tuple(stages),
        cpu_bytes=cpu,
        trainable=trainable,
        total_params=_total_parameters(arch),
        assumptions=tuple(_assumptions(req, prec.name, dt, opt.paged)),
        details=details,
    )
