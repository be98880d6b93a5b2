"""An inference request: one workload on one model, engine and parallel layout, and its checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from service.estimator.checkpoint import CheckpointWeights
from service.estimator.engines import EngineContext, EngineSettings, get_engine
from service.estimator.engines.serving import ServingSetup
from service.estimator.errors import InvalidRequest
from service.estimator.gpu import GpuSpec
from service.estimator.inference.setup import ATTENTION, serving_setup
from service.estimator.memo import cached
from service.estimator.model import Architecture
from service.estimator.parallel import MAX_PARALLEL
from service.estimator.speculative import Speculative

__all__ = ["MAX_TOKENS", "InferenceRequest", "resolved", "setup_for", "validate_workload"]

MAX_TOKENS = 10**9  # batch × concurrency × sequence_length bound
_MAX_GPU_MEMORY = 1 << 50


@dataclass(frozen=True)
class InferenceRequest:
    """One inference workload on one model, engine and parallel layout.

    ``engine_options`` holds the options the caller set (the engine fills in the rest);
    ``gpu_memory_bytes`` is the GPU's total as the CUDA runtime reports it, when a GPU was
    named, and ``gpu`` the GPU itself (its capabilities); ``sequence_length`` None means the
    engine's default (vLLM and SGLang: the context they are configured for).
    """

    architecture: Architecture | None
    weight_format: str | None = None
    kv_cache_dtype: str = "auto"
    batch_size: int = 1
    sequence_length: int | None = 2048
    prompt_tokens: int | None = None
    concurrency: int = 1
    engine: str = "generic"
    engine_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    # Data-parallel ranks, each a TP × PP group (vLLM's --data-parallel-size); with
    # ``expert_parallel`` a MoE model's routed experts are divided among all of them.
    data_parallel_size: int = 1
    expert_parallel: bool = False
    # Speculative decoding: the method and the drafter (None: none).
    speculative: Speculative | None = None
    # Host memory the engine's processes may use (a pod's limits.memory; None: not limited).
    host_memory_bytes: int | None = None
    attention: str = "flash"
    gpu_memory_bytes: int | None = None
    gpu: GpuSpec | None = None
    # What the checkpoint's files say about its weights (a model-store model), if known.
    checkpoint: CheckpointWeights | None = None

    @property
    def arch(self) -> Architecture:
        """The architecture; the detailed estimator needs one (a bare parameter count is only
        enough for the simple rules)."""
        if self.architecture is None:
            raise InvalidRequest(
                "the detailed estimator needs the model's architecture: name a catalog `model` "
                "or post its `hf_config`",
                field="model",
            )
        return self.architecture

    @property
    def sequences(self) -> int:
        return self.batch_size * self.concurrency

    @property
    def seq_len(self) -> int:
        """The sequence length (the engine's default resolved: see :func:`resolved`)."""
        if self.sequence_length is None:
            raise ValueError("resolve the request's engine defaults first")
        return self.sequence_length

    @property
    def prompt(self) -> int:
        return self.prompt_tokens if self.prompt_tokens is not None else self.seq_len

    def settings(self, tp: int | None = None, pp: int | None = None) -> EngineSettings:
        """The engine's options, checked and completed with its defaults (at the request's
        layout, or at ``tp`` × ``pp``: some defaults depend on it)."""
        engine = get_engine(self.engine)
        ctx = EngineContext(
            self.arch,
            self.gpu_memory_bytes,
            self.gpu,
            tp or self.tensor_parallel_size,
            pp or self.pipeline_parallel_size,
        )
        key = self.options_key()
        if key is None:
            return engine.resolve(self.engine_options, ctx)
        return cached(
            "engine_settings",
            (self.engine, key, ctx),
            lambda: engine.resolve(self.engine_options, ctx),
        )

    def options_key(self) -> tuple[tuple[str, type, Any], ...] | None:
        """``engine_options`` as a cache key (None when a value is not hashable: the engine
        refuses it). Each value is keyed with its type (1, 1.0 and True are equal keys but
        not equal answers: an int option refuses True), in the caller's order (of an option
        and its alias, the later one wins)."""
        key = tuple((k, type(v), v) for k, v in self.engine_options.items())
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def setups_key(self) -> tuple[Any, ...] | None:
        """What every serving setup of this request depends on besides its layout (None: not
        hashable, see :meth:`options_key`)."""
        options = self.options_key()
        if options is None:
            return None
        return (
            self.architecture,
            self.weight_format,
            self.kv_cache_dtype,
            self.engine,
            options,
            self.attention,
            self.gpu_memory_bytes,
            self.gpu,
            self.checkpoint,
            self.data_parallel_size,
            self.expert_parallel,
            self.speculative,
        )


def resolved(req: InferenceRequest) -> InferenceRequest:
    """``req`` with the engine's defaults for what it left open (its sequence length)."""
    if req.sequence_length is not None:
        return req
    length = get_engine(req.engine).default_sequence_length(req.settings())
    return dataclasses.replace(req, sequence_length=length)


def positive_int(value: object, name: str, high: int = MAX_TOKENS) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > high:
        raise InvalidRequest(f"{name} must be an integer between 1 and {high}", field=name)
    return value


def validate_workload(req: InferenceRequest) -> None:
    """Scalar checks of the workload (the layout is checked once per setup)."""
    b = positive_int(req.batch_size, "batch_size")
    s = positive_int(req.seq_len, "sequence_length")
    c = positive_int(req.concurrency, "concurrency")
    if req.prompt_tokens is not None:
        p = positive_int(req.prompt_tokens, "prompt_tokens")
        if p > s:
            raise InvalidRequest(
                f"prompt_tokens ({p}) must not exceed sequence_length ({s})", field="prompt_tokens"
            )
    if b * c * s > MAX_TOKENS:
        raise InvalidRequest(
            f"batch_size × concurrency × sequence_length = {b * c * s} exceeds {MAX_TOKENS} tokens",
            field="sequence_length",
        )
    if req.gpu_memory_bytes is not None:
        positive_int(req.gpu_memory_bytes, "gpu_memory_bytes", _MAX_GPU_MEMORY)


def validate_layout(arch: Architecture, tp: int, pp: int, attention: str, dp: int = 1) -> None:
    positive_int(tp, "tensor_parallel_size", MAX_PARALLEL)
    positive_int(dp, "data_parallel_size", MAX_PARALLEL)
    positive_int(pp, "pipeline_parallel_size", MAX_PARALLEL)
    valid = arch.valid_tensor_parallel_sizes
    if tp not in valid:
        raise InvalidRequest(
            f"tensor_parallel_size {tp} does not divide the {arch.num_attention_heads} attention "
            f"heads ({arch.num_kv_heads} KV heads); valid sizes: {', '.join(map(str, valid))}",
            field="tensor_parallel_size",
        )
    if pp > arch.num_layers:
        raise InvalidRequest(
            f"pipeline_parallel_size {pp} exceeds the {arch.num_layers} layers; valid sizes: "
            f"1 to {arch.num_layers}",
            field="pipeline_parallel_size",
        )
    if attention not in ATTENTION:
        raise InvalidRequest(f"attention must be one of {', '.join(ATTENTION)}", field="attention")


def setup_for(req: InferenceRequest, tp: int | None = None, pp: int | None = None) -> ServingSetup:
    """The (cached) serving setup of ``req``, at its own layout or at ``tp`` × ``pp``."""
    tp = tp or req.tensor_parallel_size
    pp = pp or req.pipeline_parallel_size
    validate_layout(req.arch, tp, pp, req.attention, req.data_parallel_size)
    return serving_setup(
        req.arch,
        req.weight_format,
        req.kv_cache_dtype,
        req.settings(tp, pp),
        tp,
        pp,
        req.attention,
        req.gpu_memory_bytes,
        req.gpu,
        req.checkpoint,
        req.data_parallel_size,
        req.expert_parallel,
        req.speculative,
    )
