"""Serving engines: their options, defaults and how each budgets GPU memory.

- ``generic``: a plain PyTorch serving loop (prefill then decode with a growing KV cache, flash
  attention, logits of the last position only); charged against the driver total.
- ``transformers``: ``model.generate`` with DynamicCache, as ``torch.cuda.max_memory_allocated``
  sees it. Options for older releases and plain forwards: ``logits_all_positions`` (the prefill
  logits of every position, as transformers < 4.45 ``generate`` or a plain forward computes
  them), ``logits_fp32_upcast`` (transformers < 4.45 upcasts them to fp32 inside the forward),
  ``rope_cache_per_layer``
  (transformers < 4.40 keeps cos/sin caches of ``max_position_embeddings`` rows in every layer).
- ``vllm`` (v1 engine, v0.19 defaults): budget = driver total x ``gpu_memory_utilization``; the
  profiling run's weights, activation peak and non-torch increase are subtracted and the rest is
  the KV-cache pool. Defaults as vLLM's EngineArgs picks them for the OpenAI server: on GPUs of at
  least 70 GiB ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024, else 2048 and 256;
  ``block_size`` 16; ``max_model_len`` the model's ``max_position_embeddings``.
- ``sglang``: ``mem_fraction_static`` of the driver total holds weights and the KV pool; the
  rest is left for activations and CUDA graphs (``chunked_prefill_size`` tokens per forward).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from service.estimator.errors import InvalidRequest

__all__ = ["ENGINES", "ENGINE_OPTIONS", "EngineSettings", "OptionSpec", "resolve_engine"]

ENGINES: tuple[str, ...] = ("generic", "transformers", "vllm", "sglang")
GIB = 2**30
LARGE_GPU_BYTES = 70 * GIB  # vLLM's threshold for its larger scheduling defaults


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One engine knob: its type and allowed range."""

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[int, ...] = ()
    description: str = ""

    def allowed(self) -> str:
        if self.kind is bool:
            return "true or false"
        if self.choices:
            return "one of " + ", ".join(str(c) for c in self.choices)
        lo = "(" if self.low_open else "["
        return f"{self.kind.__name__} in {lo}{self.low}, {self.high}]"


_VLLM = {
    "gpu_memory_utilization": OptionSpec(float, 0.0, 1.0, low_open=True),
    "max_model_len": OptionSpec(int, 1, 1 << 26),
    "max_num_batched_tokens": OptionSpec(int, 1, 1 << 24),
    "max_num_seqs": OptionSpec(int, 1, 1 << 20),
    "block_size": OptionSpec(int, choices=(1, 8, 16, 32, 64, 128)),
    "enforce_eager": OptionSpec(bool),
}
_SGLANG = {
    "mem_fraction_static": OptionSpec(float, 0.0, 1.0, low_open=True),
    "chunked_prefill_size": OptionSpec(int, 1, 1 << 24),
    "max_running_requests": OptionSpec(int, 1, 1 << 20),
    "max_model_len": OptionSpec(int, 1, 1 << 26),
}
_TRANSFORMERS = {
    "logits_all_positions": OptionSpec(bool),
    "logits_fp32_upcast": OptionSpec(bool),
    "rope_cache_per_layer": OptionSpec(bool),
}

ENGINE_OPTIONS: Mapping[str, Mapping[str, OptionSpec]] = {
    "generic": {"logits_all_positions": OptionSpec(bool)},
    "transformers": _TRANSFORMERS,
    "vllm": _VLLM,
    "sglang": _SGLANG,
}


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """An engine with every option resolved to a value (hashable, cache key)."""

    engine: str
    gpu_memory_utilization: float = 1.0
    max_model_len: int | None = None
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    block_size: int = 16
    enforce_eager: bool = False
    mem_fraction_static: float = 1.0
    logits_all_positions: bool = False
    logits_fp32_upcast: bool = False
    rope_cache_per_layer: bool = False
    explicit: tuple[str, ...] = ()

    @property
    def budget_fraction(self) -> float:
        if self.engine == "vllm":
            return self.gpu_memory_utilization
        if self.engine == "sglang":
            return self.mem_fraction_static
        return 1.0


def _check(engine: str, name: str, value: object) -> float | int | bool:
    specs = ENGINE_OPTIONS[engine]
    field = f"engine_options.{name}"
    if name not in specs:
        allowed = ", ".join(sorted(specs)) or "none"
        raise InvalidRequest(
            f"engine {engine!r} has no option {name!r}; its options: {allowed}", field=field
        )
    spec = specs[name]
    if spec.kind is bool:
        if not isinstance(value, bool):
            raise InvalidRequest(f"{name} must be {spec.allowed()}", field=field)
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{name} must be {spec.allowed()}", field=field)
    if spec.kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise InvalidRequest(f"{name} must be {spec.allowed()}", field=field)
        value = int(value)
    else:
        value = float(value)
    if spec.choices and value not in spec.choices:
        raise InvalidRequest(f"{name} must be {spec.allowed()}, got {value}", field=field)
    if spec.low is not None:
        below = value <= spec.low if spec.low_open else value < spec.low
        if below or (spec.high is not None and value > spec.high):
            raise InvalidRequest(f"{name} must be {spec.allowed()}, got {value}", field=field)
    return value


def resolve_engine(
    engine: str, options: Mapping[str, float | int | bool | None], gpu_memory_bytes: int | None
) -> EngineSettings:
    """Validate `options` for `engine` and fill in the engine's defaults."""
    if engine not in ENGINES:
        raise InvalidRequest(
            f"unknown engine {engine!r}; allowed: {', '.join(ENGINES)}", field="engine"
        )
    given = {k: _check(engine, k, v) for k, v in options.items() if v is not None}
    large = gpu_memory_bytes is None or gpu_memory_bytes >= LARGE_GPU_BYTES
    kw: dict[str, object] = {"engine": engine, "explicit": tuple(sorted(given))}
    if engine == "vllm":
        kw["gpu_memory_utilization"] = 0.9
        kw["max_num_batched_tokens"] = 8192 if large else 2048
        kw["max_num_seqs"] = 1024 if large else 256
    elif engine == "sglang":
        kw["mem_fraction_static"] = 0.88
        kw["max_num_batched_tokens"] = 8192 if large else 2048
        kw["max_num_seqs"] = 1024 if large else 256
    for k, v in given.items():
        if k == "chunked_prefill_size":
            kw["max_num_batched_tokens"] = v
        elif k == "max_running_requests":
            kw["max_num_seqs"] = v
        else:
            kw[k] = v
    return EngineSettings(**kw)  # type: ignore[arg-type]
