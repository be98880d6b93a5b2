"""An answer rendered as the response model, and serialized once.

The response is built as :class:`EstimateResponse` instances without re-validating what the
estimator produced (:func:`built`, what ``model_construct`` builds: the figures are already
checked integers), then serialized once: by :func:`response_json` for an estimate's own answer
(byte for byte what pydantic's serializer writes, in half its time), by pydantic's serializer
where a response embeds it (batch, co-location). tests/application/test_render.py checks that
rendered answers equal their validated form, and the two serializations each other.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar, cast

import orjson
from pydantic import BaseModel

from service.estimator.answer import ESTIMATOR_VERSION, Answer, ModelResolution, ModelSpec
from service.estimator.memo import memoized
from service.estimator.model import Architecture
from service.estimator.parallel import Layout
from service.estimator.performance import Band, PerformanceAnswer
from service.schemas.estimates import (
    BandOut,
    CapacityOut,
    EstimateResponse,
    FinetuneDetails,
    FitOut,
    InferenceDetails,
    LayoutOut,
    ModelResolutionOut,
    PerformanceOut,
    PerGpu,
    RangeOut,
    ReplicasRangeOut,
    ResolvedModel,
    SizingOut,
    UnusedFieldOut,
)

__all__ = ["built", "render_estimate", "response_json"]

M = TypeVar("M", bound=BaseModel)
Route = Literal["store", "catalog", "catalog-gguf", "rules"]
Kind = Literal["inference", "finetune"]
EstimatorName = Literal["detailed", "simple"]
Details = InferenceDetails | FinetuneDetails
_SET = object.__setattr__


def built(model: type[M], /, **fields: Any) -> M:
    """``model.model_construct(**fields)`` for every field given by name, in the model's
    order: the instance pydantic builds (the same four attributes), without its walk over each
    field's aliases and defaults, which made a fifth of an answer's time over the ten models
    of a response. A field left out is an error here, not a silent default; the order is what
    lets :func:`response_json` write the attribute tables as they are."""
    declared = model.model_fields
    if tuple(fields) != tuple(declared):
        raise TypeError(f"{model.__name__}: give every field, in order: {', '.join(declared)}")
    instance = model.__new__(model)
    _SET(instance, "__dict__", fields)
    _SET(instance, "__pydantic_fields_set__", set(fields))
    _SET(instance, "__pydantic_extra__", None)
    _SET(instance, "__pydantic_private__", None)
    return instance


def response_json(response: EstimateResponse) -> bytes:
    """The JSON of a rendered response, byte for byte what ``model_dump_json`` writes (field
    order, shortest float form, null), in half its time: orjson over the attribute
    tables :func:`built` fills (the response models have no aliases or custom serializers;
    tests/application/test_render.py compares the two over a spread of answers)."""
    return orjson.dumps(response, default=_attribute_table)


def _attribute_table(value: object) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return value.__dict__
    raise TypeError(f"{type(value).__name__} is not part of a rendered response")


@memoized
def _architecture_fields(arch: Architecture) -> dict[str, Any]:
    # Cached: rendering walks every field of a frozen architecture; nothing mutates the dict.
    return arch.as_dict()


def _resolution(r: ModelResolution | None) -> ModelResolutionOut | None:
    if r is None:
        return None
    return built(
        ModelResolutionOut,
        requested=r.requested,
        resolved_to=r.resolved_to,
        route=cast(Route, r.route),
        exact=r.exact,
        format=r.format,
        reasons=list(r.reasons),
    )


def _layout(layout: Layout) -> LayoutOut:
    return built(
        LayoutOut,
        tensor_parallel_size=layout.tensor,
        pipeline_parallel_size=layout.pipeline,
        data_parallel_size=layout.data,
        expert_parallel_size=layout.expert,
    )


def _figure(x: float) -> float:
    """A performance figure as the wire carries it: four significant digits are more than
    the model's accuracy."""
    return float(f"{x:.4g}")


def _range(pair: tuple[float, float]) -> RangeOut:
    return built(RangeOut, low=_figure(pair[0]), high=_figure(pair[1]))


def _band(band: Band) -> BandOut:
    return built(
        BandOut,
        ttft_ms=_range(band.ttft_ms),
        itl_ms=_range(band.itl_ms),
        output_tokens_per_s=_range(band.output_tokens_per_s),
        requests_per_s=_range(band.requests_per_s),
    )


def _performance(
    answer: PerformanceAnswer | None,
) -> tuple[PerformanceOut | None, SizingOut | None]:
    if answer is None:
        return None, None
    p, z = answer.performance, answer.sizing
    performance = built(
        PerformanceOut,
        ttft_ms=_figure(p.ttft_ms),
        itl_ms=_figure(p.itl_ms),
        output_tokens_per_s=_figure(p.output_tokens_per_s),
        requests_per_s=_figure(p.requests_per_s),
        latency_ms=_figure(p.latency_ms),
        bound=p.bound,
        saturated=p.saturated,
        calibrated=p.calibrated,
        concurrency=p.concurrency,
        running=p.running,
        max_concurrency=p.max_concurrency,
        queue_wait_ms=_figure(p.queue_wait_ms),
        calibration=p.calibration,
        band=None if p.band is None else _band(p.band),
    )
    sizing = None
    if z is not None:
        sizing = built(
            SizingOut,
            replicas=z.replicas,
            gpus=z.gpus,
            per_replica_requests_per_s=_figure(z.per_replica_requests_per_s),
            concurrency=z.concurrency,
            slo_met=z.slo_met,
            limited_by=z.limited_by,
            replicas_range=None
            if z.replicas_range is None
            else built(ReplicasRangeOut, low=z.replicas_range[0], high=z.replicas_range[1]),
        )
    return performance, sizing


def render_estimate(kind: str, model: ModelSpec, answer: Answer) -> EstimateResponse:
    est, fit, cap = answer.estimate, answer.fit, answer.estimate.capacity
    arch = model.architecture
    performance, sizing = _performance(answer.performance)
    return built(
        EstimateResponse,
        kind=cast(Kind, kind),
        estimator=cast(EstimatorName, est.estimator),
        estimator_version=ESTIMATOR_VERSION,
        model=built(
            ResolvedModel,
            id=model.id,
            model_type=arch.model_type if arch else None,
            parameter_count=model.parameter_count,
            active_parameter_count=model.active_parameter_count,
            architecture=_architecture_fields(arch) if arch else None,
            resolution=_resolution(model.resolution),
        ),
        breakdown=dict(est.total),
        total_bytes=est.total_bytes,
        per_gpu=built(
            PerGpu,
            gpu_count=est.gpu_count,
            breakdown=dict(est.per_gpu),
            total_bytes=est.per_gpu_bytes,
        ),
        fit=None
        if fit is None
        else built(
            FitOut,
            gpu=fit.gpu,
            gpu_count=fit.gpu_count,
            reason=fit.reason,
            reason_detail=fit.reason_detail,
            layout=_layout(fit.layout) if fit.layout else None,
            usable_bytes=fit.usable_bytes,
            required_bytes=fit.required_bytes,
            fits=fit.fits,
            headroom_bytes=fit.headroom_bytes,
            min_gpu_count=fit.min_gpu_count,
            min_gpu_layout=_layout(fit.min_gpu_layout) if fit.min_gpu_layout else None,
            engine_args=None if fit.engine_args is None else list(fit.engine_args),
            max_batch_size=fit.max_batch_size,
            max_sequence_length=fit.max_sequence_length,
            min_gpu_layout_reason=fit.min_gpu_layout_reason,
        ),
        capacity=None
        if cap is None
        else built(
            CapacityOut,
            kv_cache_bytes_per_token=cap.kv_cache_bytes_per_token,
            kv_cache_pool_bytes=cap.kv_cache_pool_bytes,
            kv_cache_tokens=cap.kv_cache_tokens,
            max_concurrency=cap.max_concurrency,
            sequence_length=cap.sequence_length,
            budget_bytes=cap.budget_bytes,
            subtracted=dict(cap.subtracted),
        ),
        cpu_bytes=est.cpu_bytes,
        details=cast(Details, dict(est.details)),
        assumptions=list(answer.assumptions),
        summary=answer.summary,
        unused_fields=[
            built(
                UnusedFieldOut,
                field=u.field,
                decided_by=list(u.decided_by),
                engine_values=dict(u.engine_values),
                reason=u.why,
                given=u.given,
            )
            for u in answer.unused_fields
        ],
        engine_options=dict(answer.engine_options) if answer.engine_options else None,
        engine_defaults=list(answer.engine_defaults),
        performance=performance,
        sizing=sizing,
    )
