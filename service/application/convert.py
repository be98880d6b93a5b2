"""Request bodies to the estimator's typed requests, field by field.

Written out on purpose (no reflection over the schema): renaming a field of a body or of a
domain request fails here, where mypy sees it, not at run time.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from service.estimator.inference import InferenceRequest
from service.estimator.performance import Slo, Traffic
from service.estimator.speculative import Speculative
from service.estimator.training import FinetuneRequest, LoraSpec
from service.schemas.estimates import FinetuneRequestBody, InferenceRequestBody

__all__ = ["finetune_request", "inference_request", "performance_request"]


def _engine_options(body: InferenceRequestBody) -> MappingProxyType[str, Any]:
    """The engine options the caller set (the engine checks them against its own table and
    refuses, naming the field, an option it does not have)."""
    return MappingProxyType(body.engine_options.model_dump(exclude_none=True))


def inference_request(
    body: InferenceRequestBody, speculative: Speculative | None = None
) -> InferenceRequest:
    """The workload of ``body``; the architecture and GPU memory are set by the answer, the
    drafter (``speculative``) by :func:`~service.application.resolve.resolve_speculative`."""
    return InferenceRequest(
        architecture=None,
        weight_format=body.weight_format,
        kv_cache_dtype=body.kv_cache_dtype,
        batch_size=body.batch_size,
        # Unset: the engine's default (vLLM / SGLang: the context it is configured for).
        sequence_length=(
            body.sequence_length if "sequence_length" in body.model_fields_set else None
        ),
        prompt_tokens=body.prompt_tokens,
        concurrency=body.concurrency,
        engine=body.engine,
        engine_options=_engine_options(body),
        tensor_parallel_size=body.tensor_parallel_size,
        pipeline_parallel_size=body.pipeline_parallel_size,
        data_parallel_size=body.data_parallel_size,
        expert_parallel=body.expert_parallel,
        speculative=speculative,
        host_memory_bytes=body.host_memory_bytes,
        attention=body.attention,
    )


def performance_request(body: InferenceRequestBody) -> tuple[Traffic | None, Slo | None]:
    """The traffic and SLO a body asks the performance model about (None: not asked)."""
    t = body.traffic
    traffic = None if t is None else Traffic(t.input_tokens, t.output_tokens, t.concurrency)
    o = body.slo
    slo = None if o is None else Slo(o.requests_per_s, o.ttft_ms, o.itl_ms)
    return traffic, slo


def finetune_request(body: FinetuneRequestBody) -> FinetuneRequest:
    targets = body.lora.target_modules
    return FinetuneRequest(
        architecture=None,
        method=body.method,
        lora=LoraSpec(
            rank=body.lora.rank,
            alpha=body.lora.alpha,
            target_modules=targets if isinstance(targets, str) else tuple(targets),
        ),
        trainable_layers=body.trainable_layers,
        weight_format=body.weight_format,
        precision=body.precision,
        optimizer=body.optimizer,
        optimizer_foreach=body.optimizer_foreach,
        batch_size=body.batch_size,
        sequence_length=body.sequence_length,
        gradient_checkpointing=body.gradient_checkpointing,
        attention=body.attention,
        loss_implementation=body.loss_implementation,
        kbit_preparation=body.kbit_preparation,
        gpu_count=body.gpu_count,
        zero_stage=body.zero_stage,
        sharding_implementation=body.sharding_implementation,
        offload_optimizer=body.offload_optimizer,
        offload_parameters=body.offload_parameters,
        tensor_parallel_size=body.tensor_parallel_size,
        pipeline_parallel_size=body.pipeline_parallel_size,
        sequence_parallel=body.sequence_parallel,
    )
