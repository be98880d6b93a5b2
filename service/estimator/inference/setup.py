"""A serving setup: what one model, format, engine and parallel layout hold before any request.

Everything that depends only on (architecture, weight format, KV dtype, engine settings, TP,
PP, attention, GPU memory) is built once into a :class:`ServingSetup` and cached
(:mod:`service.estimator.memo`): per pipeline stage its weight bytes, KV layout, the activation
the engine reserves whatever the workload, and the engine's own per-stage state. What depends
on the workload (sequences, sequence length, prompt length) is then a few multiplications
(:mod:`.evaluate`), which the fit searches call.
"""

from __future__ import annotations

import dataclasses

from service.estimator.checkpoint import CheckpointWeights, scale_to_checkpoint
from service.estimator.engines import get_engine
from service.estimator.engines.base import Engine, EngineSettings, StageArgs
from service.estimator.engines.overhead import driver_reservation_note
from service.estimator.engines.serving import ServingSetup, Stage
from service.estimator.formats import get_format, kv_dtype_bytes
from service.estimator.forward import forward_coefficients
from service.estimator.gpu import GpuSpec
from service.estimator.kv_cache import stage_kv_layouts
from service.estimator.memo import memoized
from service.estimator.model import Architecture
from service.estimator.parallel import pp_layer_partition
from service.estimator.speculative import Speculative, draft_cost
from service.estimator.units import bytes_per_element
from service.estimator.weights import Placement, WeightLayout, resolve_format, weight_layout

__all__ = ["ATTENTION", "serving_setup"]

ATTENTION: tuple[str, ...] = ("flash", "sdpa", "eager")


@memoized
def serving_setup(
    arch: Architecture,
    weight_format: str | None,
    kv_cache_dtype: str,
    settings: EngineSettings,
    tp: int,
    pp: int,
    attention: str,
    gpu_memory_bytes: int | None,
    gpu: GpuSpec | None = None,
    checkpoint: CheckpointWeights | None = None,
    dp: int = 1,
    expert_parallel: bool = False,
    speculative: Speculative | None = None,
) -> ServingSetup:
    """Build the setup (validated layout, engine settings already resolved)."""
    engine = get_engine(settings.engine)
    fmt, _ = resolve_format(arch, weight_format)
    choice = engine.resolve_dtype(arch, fmt, settings, gpu, named=weight_format is not None)
    if choice.weights is not None:
        weight_format = choice.weights
        fmt = get_format(choice.weights)
    act_dtype = choice.activation
    d = bytes_per_element(act_dtype)
    kvb = kv_dtype_bytes(kv_cache_dtype, act_dtype)
    kv_layouts = stage_kv_layouts(arch, kvb, tp, pp, engine.mla_cache(arch))
    max_model_len = engine.max_model_len(settings)
    placement = engine.placement(arch, settings, d)
    parallel = engine.data_parallel(arch, settings, tp, dp, expert_parallel, gpu)
    layout = weight_layout(arch, weight_format, tp, pp, placement, parallel.experts)
    per_stage, host_bytes, weight_notes = _placed_weights(
        arch, engine, settings, layout, placement, checkpoint, pp, own=weight_format is None
    )
    if speculative is not None:
        # The drafter runs where the target's last layers and sampler do.
        draft = draft_cost(speculative, arch, layout, kvb, tp, layout.dense_dtype, engine.mla_cache)
        per_stage = (*per_stage[:-1], per_stage[-1] + draft.weights)
        last = dataclasses.replace(kv_layouts[-1], extra_token_bytes=draft.kv_token_bytes)
        kv_layouts = (*kv_layouts[:-1], last)
        weight_notes = (*weight_notes, draft.note)
    offload = engine.offload(arch, settings, layout, pp)
    if offload is not None:
        per_stage = tuple(w - o for w, o in zip(per_stage, offload.per_stage, strict=True))
        weight_notes = (*weight_notes, offload.note)
    eager = attention == "eager" and not engine.fused_kernels
    coeffs = forward_coefficients(arch, d, tp, fused_moe=engine.fused_kernels, eager=eager)
    assumptions = [*choice.notes, *layout.assumptions, *weight_notes]
    if eager:
        assumptions.append("eager attention materializes heads × prompt² scores (+fp32 softmax)")
    inside, outside = engine.overheads(settings, tp, pp, max(k.layers for k in kv_layouts), gpu)
    if parallel.nccl or parallel.all_to_all:
        inside = dataclasses.replace(
            inside, nccl=inside.nccl + parallel.nccl, all_to_all=parallel.all_to_all
        )
    assumptions.extend(parallel.notes)
    assumptions.extend(inside.lines())
    assumptions.append(driver_reservation_note(gpu))
    stages: list[Stage] = []
    host_per_gpu: list[int] = []
    unpriced = list(parallel.unpriced)
    for i, kv in enumerate(kv_layouts):
        build = engine.stage(
            StageArgs(
                arch=arch,
                settings=settings,
                kv=kv,
                coeffs=coeffs,
                tp=tp,
                is_last=i == pp - 1,
                weight_format_kind=fmt.kind,
                weight_format_bits=fmt.bits,
                gpu=gpu,
                act_dtype=act_dtype,
                layers=kv.layers,
                index=i,
                pp=pp,
                experts=parallel.experts,
                moe_token_factor=parallel.moe_token_factor,
                offloaded_bytes=offload.per_stage[i] if offload is not None else 0,
                offloaded_layer_bytes=offload.largest_layer if offload is not None else 0,
            )
        )
        host_per_gpu.append(build.host_per_gpu + (offload.per_stage[i] if offload else 0))
        unpriced.extend(build.unpriced)
        assumptions.extend(build.notes)
        host_bytes += build.host_bytes
        weights = per_stage[i] + build.extra_weights
        held_kv = build.fixed_kv if build.kv_pool is None else build.kv_pool
        stages.append(
            Stage(
                index=i,
                weights=weights,
                kv=kv,
                is_last=i == pp - 1,
                fixed_activation=build.fixed_activation,
                engine_state=build.state,
                base=weights + build.fixed_activation + held_kv + inside.total,
                fixed_kv=build.fixed_kv,
                kv_pool=build.kv_pool,
            )
        )
    assumptions.extend(engine.setup_notes(arch, settings, stages[-1].engine_state))
    setup = ServingSetup(
        arch=arch,
        engine=engine,
        settings=settings,
        tp=tp,
        pp=pp,
        weight_format=layout.format,
        act_dtype=act_dtype,
        kv_bytes=kvb,
        stages=tuple(stages),
        coeffs=coeffs,
        overhead=inside,
        outside_budget=outside,
        gpu_memory_bytes=gpu_memory_bytes,
        max_model_len=max_model_len,
        assumptions=tuple(dict.fromkeys(assumptions)),
        unsupported=choice.unsupported,
        host_bytes=host_bytes,
        gpu=gpu,
        host_per_gpu=tuple(host_per_gpu),
        dp=dp,
        expert_parallel=expert_parallel,
        unpriced=tuple(dict.fromkeys(unpriced)),
    )
    return engine.complete(setup)


def _placed_weights(
    arch: Architecture,
    engine: Engine,
    settings: EngineSettings,
    layout: WeightLayout,
    placement: Placement,
    checkpoint: CheckpointWeights | None,
    pp: int,
    *,
    own: bool,
) -> tuple[tuple[int, ...], int, tuple[str, ...]]:
    """Per-stage GPU weight bytes, host bytes and notes: the engine's own placement if it has
    one, else the shard roles' layout scaled to the checkpoint's header bytes (only when the
    weights are served in the checkpoint's own format, ``own``)."""
    split = engine.place_weights(arch, layout, checkpoint, settings)
    if split is not None:
        return split.per_stage, split.host_bytes, split.notes
    if checkpoint is None or not own:
        return layout.per_stage, 0, ()
    extras = tuple(
        placement.extra_per_gpu + placement.extra_per_layer * n
        for n in pp_layer_partition(arch.num_layers, pp)
    )
    with_vision = placement.include_vision and arch.vision is not None
    per_stage, notes = scale_to_checkpoint(
        layout.per_stage, extras, layout.model_bytes, checkpoint, with_vision=with_vision
    )
    return per_stage, 0, notes
