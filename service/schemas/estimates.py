"""Request and response schemas of the estimate endpoints (names fixed by API.md).

Closed sets come from the estimator's own constants, so the schema and the math never disagree.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from typing_extensions import TypedDict

from service.estimator import speculative, training
from service.estimator.engines import ENGINES, REGISTRY, all_options
from service.estimator.formats import KV_CACHE_DTYPES, WEIGHT_FORMATS, canonical_format_name
from service.estimator.inference.setup import ATTENTION
from service.estimator.parallel import MAX_GPU_COUNT
from service.estimator.parallel import MAX_PARALLEL as _MAX_PARALLEL
from service.estimator.result import REASON_TEXT, FitReason
from service.schemas.common import (
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_KEYS,
    STRICT_REQUEST,
    RequestModel,
    ResponseModel,
    json_depth_and_size,
)


def _weight_format_name(value: Any) -> Any:
    """A weight format as users write it (any case, aliases, llama.cpp's Q4_K_M) in the
    service's own name; anything else is left for the enum to refuse."""
    if isinstance(value, str):
        return canonical_format_name(value) or value
    return value


WeightFormat = Annotated[
    Literal[WEIGHT_FORMATS],  # type: ignore[valid-type]
    BeforeValidator(_weight_format_name),
]
KvCacheDtype = Literal[KV_CACHE_DTYPES]  # type: ignore[valid-type]
Engine = Literal[ENGINES]  # type: ignore[valid-type]
Method = Literal[training.METHODS]  # type: ignore[valid-type]
Precision = Literal[training.PRECISIONS]  # type: ignore[valid-type]
Optimizer = Literal[training.OPTIMIZERS]  # type: ignore[valid-type]
Checkpointing = Literal[training.GRADIENT_CHECKPOINTING]  # type: ignore[valid-type]
Attention = Literal[ATTENTION]  # type: ignore[valid-type]
LossImplementation = Literal[training.LOSS_IMPLEMENTATIONS]  # type: ignore[valid-type]
ShardingImplementation = Literal[training.SHARDING_IMPLEMENTATIONS]  # type: ignore[valid-type]
KbitPreparation = Literal[training.KBIT_PREPARATIONS]  # type: ignore[valid-type]
EstimatorName = Literal["detailed", "simple"]
SpeculativeMethod = Literal[tuple(speculative.METHODS)]  # type: ignore[valid-type]

# Bounds: generous for any real deployment, tight enough that no request is unbounded work.
MAX_TOKENS = 10**9  # batch × sequence (× concurrency) tokens in one request
MAX_SEQUENCE = 16 * 1024 * 1024
MAX_BATCH = 1 << 20
MAX_CONCURRENCY = 1 << 20
MAX_PARALLEL = _MAX_PARALLEL
MAX_GPUS = MAX_GPU_COUNT
MIN_PARAMETERS = 1_000
MAX_PARAMETERS = 100 * 10**12

PositiveCount = Annotated[float | int, Field(ge=MIN_PARAMETERS, le=MAX_PARAMETERS)]
MIN_GPU_MEMORY = 2**20
MAX_GPU_MEMORY = 2**50

GPU_DESCRIPTION = (
    "The GPU to check the fit on: a catalog id or alias, `id/mig-profile`, or the GPU Feature "
    "Discovery value of `nvidia.com/gpu.product` (with its `-MIG-<profile>` form under the "
    "single strategy, or `-SHARED` for time-slicing)."
)
GPU_MEMORY_DESCRIPTION = (
    "A GPU that is not in the catalog, by the total its driver reports, in bytes (e.g. GFD's "
    "`nvidia.com/gpu.memory` MiB × 2^20); instead of `gpu`. Its capabilities are unknown and "
    "not checked."
)


# JSON Schema for "exactly one of the three names the model".
EXACTLY_ONE_MODEL: dict[str, Any] = {
    "oneOf": [
        {"required": ["model"]},
        {"required": ["hf_config"]},
        {"required": ["parameter_count"]},
    ],
    "dependentRequired": {"active_parameter_count": ["parameter_count"]},
}


# Bounds on each arm of the union, not on the union: pydantic writes `ge`/`le` set on an
# `int | float` field beside its `anyOf`, where JSON Schema ignores them, and then the
# published schema would leave the field unbounded.
ParameterCount = (
    Annotated[int, Field(ge=MIN_PARAMETERS, le=MAX_PARAMETERS)]
    | Annotated[float, Field(ge=MIN_PARAMETERS, le=MAX_PARAMETERS)]
)


def _one_gpu(gpu: str | None, memory: int | None) -> None:
    if gpu is not None and memory is not None:
        raise ValueError("name the GPU with one of `gpu` or `gpu_memory_bytes`, not both")


class ModelSelector(RequestModel):
    """Exactly one of `model`, `hf_config` or `parameter_count` names the model."""

    model_config = ConfigDict(**RequestModel.model_config, json_schema_extra=EXACTLY_ONE_MODEL)

    # Optional but never null: "exactly one of" is then expressible in JSON Schema (oneOf).
    model: str = Field(  # type: ignore[assignment]
        None,
        min_length=1,
        max_length=200,
        description="A catalog model id (Hugging Face repo id), matched case-insensitively.",
        examples=["meta-llama/Llama-3.1-8B-Instruct"],
    )
    hf_config: dict[str, Any] = Field(
        None,  # type: ignore[arg-type]
        description="A Hugging Face `config.json`, posted as is (a `text_config` inside is read "
        "for the language model).",
    )
    parameter_count: ParameterCount = Field(  # type: ignore[assignment]
        None,
        description="A bare parameter count (e.g. 7e9). Only the simple rules can work from it.",
        examples=[7e9],
    )
    active_parameter_count: ParameterCount = Field(  # type: ignore[assignment]
        None,
        description="Parameters active per token (MoE), with `parameter_count`.",
    )
    estimator: EstimatorName = Field(
        "detailed",
        description="`detailed` counts every tensor; `simple` applies the PAI guide's rules.",
    )

    @field_validator("hf_config")
    @classmethod
    def _bounded_config(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value is not None:
            depth, size = json_depth_and_size(value)
            if depth > MAX_CONFIG_DEPTH or size > MAX_CONFIG_KEYS:
                raise ValueError(
                    f"config too deep or too large (at most {MAX_CONFIG_DEPTH} levels and "
                    f"{MAX_CONFIG_KEYS} keys); post the model's config.json as is"
                )
        return value

    @model_validator(mode="after")
    def _exactly_one_model(self) -> ModelSelector:
        given = [
            n for n in ("model", "hf_config", "parameter_count") if getattr(self, n) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "name the model with exactly one of `model`, `hf_config` or `parameter_count`"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.active_parameter_count is not None:
            if self.parameter_count is None:
                raise ValueError("`active_parameter_count` goes with `parameter_count`")
            if self.active_parameter_count > self.parameter_count:
                raise ValueError("`active_parameter_count` cannot exceed `parameter_count`")
        for name in ("parameter_count", "active_parameter_count"):
            value = getattr(self, name)
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(f"`{name}` must be a whole number")
        return self


def _engine_option_field(name: str) -> tuple[Any, Any]:
    """One field of ``EngineOptions``, from the engines' own option tables."""
    option, engines = all_options()[name]
    kind: Any = option.kind
    if option.choices:
        kind = Literal[option.choices]
    bounds: dict[str, Any] = {}
    if option.low is not None:
        bounds["gt" if option.low_open else "ge"] = option.low
    if option.high is not None:
        bounds["le"] = option.high
    accepted_by = ", ".join(engines)
    # Engines sharing a name may describe it differently (their own defaults): say each.
    texts = dict.fromkeys(REGISTRY[e].option_table()[name].description for e in engines)
    description = f"{' '.join(texts)} Accepted by: {accepted_by}."
    if option.name != name:
        description = f"Another name of `{option.name}`. {description}"
    return kind | None, Field(None, description=description, **bounds)


#: Serving-engine knobs; unset ones take the engine's own defaults. Built from the engines'
#: option tables (service/estimator/engines/), so the schema and the engines never disagree;
#: an option an engine does not have is refused by that engine with a 422 naming it.
EngineOptions: type[RequestModel] = create_model(  # type: ignore[call-overload]
    "EngineOptions",
    __base__=RequestModel,
    __doc__="Serving-engine knobs; unset ones take the engine's own defaults.",
    **{name: _engine_option_field(name) for name in sorted(all_options())},
)


class SpeculativeOptions(RequestModel):
    """Speculative decoding: the drafter the engine loads beside the target."""

    method: SpeculativeMethod = Field(  # type: ignore[valid-type]
        description="`draft_model` (a separate small model), `eagle`, `eagle3`, `mtp` (the "
        "checkpoint's multi-token-prediction layer), `ngram`, `suffix` (no weights)."
    )
    model: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="The drafter: a catalog or store model id (a draft model, or an EAGLE "
        "head whose config the service holds). EAGLE and MTP heads not given are derived "
        "from the target.",
        examples=["meta-llama/Llama-3.2-1B-Instruct"],
    )
    hf_config: dict[str, Any] | None = Field(
        None, description="The drafter's `config.json`, posted as is (instead of `model`)."
    )
    num_speculative_tokens: int = Field(
        1, ge=1, le=64, description="Tokens proposed per step (changes batches, not memory)."
    )
    draft_tensor_parallel_size: int | None = Field(
        None, ge=1, le=MAX_PARALLEL, description="The drafter's TP: the target's (default) or 1."
    )

    @field_validator("hf_config")
    @classmethod
    def _bounded_config(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            depth, size = json_depth_and_size(value)
            if depth > MAX_CONFIG_DEPTH or size > MAX_CONFIG_KEYS:
                raise ValueError(
                    f"config too deep or too large (at most {MAX_CONFIG_DEPTH} levels and "
                    f"{MAX_CONFIG_KEYS} keys)"
                )
        return value

    @model_validator(mode="after")
    def _one_drafter(self) -> SpeculativeOptions:
        if self.model is not None and self.hf_config is not None:
            raise ValueError("name the drafter with one of `model` or `hf_config`, not both")
        return self


class TrafficBody(RequestModel):
    """A closed loop of clients, each keeping one request of these lengths in flight (what
    `vllm bench serve --max-concurrency` measures)."""

    input_tokens: int = Field(
        ge=1, le=MAX_SEQUENCE, description="Prompt tokens of one request.", examples=[1024]
    )
    output_tokens: int = Field(
        ge=1, le=MAX_SEQUENCE, description="Tokens one request generates.", examples=[256]
    )
    concurrency: int = Field(
        1,
        ge=1,
        le=MAX_CONCURRENCY,
        description="Requests in flight at once (past the replica's `max_concurrency` they queue).",
    )

    @model_validator(mode="after")
    def _bounded_length(self) -> TrafficBody:
        if self.input_tokens + self.output_tokens > MAX_SEQUENCE:
            raise ValueError(f"input_tokens + output_tokens exceeds {MAX_SEQUENCE:,} tokens")
        return self


class SloBody(RequestModel):
    """Targets on the means of one replica's requests, and the rate the fleet must serve."""

    requests_per_s: float = Field(
        gt=0, le=1e7, description="Requests per second to serve in all.", examples=[20]
    )
    ttft_ms: float | None = Field(
        None, gt=0, le=1e7, description="Mean time to first token, ms (null: any)."
    )
    itl_ms: float | None = Field(
        None, gt=0, le=1e6, description="Mean inter-token latency, ms (null: any)."
    )


class InferenceRequestBody(ModelSelector):
    """Memory to serve a model."""

    model_config = ConfigDict(
        **STRICT_REQUEST,
        json_schema_extra={
            **EXACTLY_ONE_MODEL,
            "examples": [
                {
                    "model": "meta-llama/Llama-3.1-8B-Instruct",
                    "engine": "vllm",
                    "sequence_length": 8192,
                    "gpu": "h100-sxm-80gb",
                },
                {"parameter_count": 7e9, "estimator": "simple", "weight_format": "fp16"},
            ],
        },
    )

    weight_format: WeightFormat | None = Field(
        None, description="Storage format of the weights; default: the checkpoint's own."
    )
    kv_cache_dtype: KvCacheDtype = Field("auto", description="`auto`: the activation dtype.")
    batch_size: int = Field(1, ge=1, le=MAX_BATCH, description="Sequences per request.")
    sequence_length: int = Field(
        2048,
        ge=1,
        le=MAX_SEQUENCE,
        description="Tokens per sequence, prompt plus output. Default: 2048; with vLLM and "
        "SGLang the context the engine is configured for (max_model_len / context_length, "
        "which default to the model's derived maximum, as `vllm serve` does).",
    )
    prompt_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_SEQUENCE,
        description="Of `sequence_length`, the prompt processed in one prefill; default: all.",
    )
    concurrency: int = Field(
        1,
        ge=1,
        le=MAX_CONCURRENCY,
        validate_default=True,  # the token bound below runs even when it is not sent
        description="Concurrent requests, each of `batch_size`.",
    )
    engine: Engine = Field("generic", description="Serving engine whose allocations to model.")
    engine_options: EngineOptions = Field(
        default_factory=EngineOptions, description="Engine knobs; unset means engine default."
    )
    attention: Attention = Field(
        "flash", description="Attention kernel; `eager` materializes the score matrices."
    )
    tensor_parallel_size: int = Field(1, ge=1, le=MAX_PARALLEL)
    pipeline_parallel_size: int = Field(1, ge=1, le=MAX_PARALLEL)
    data_parallel_size: int = Field(
        1,
        ge=1,
        le=MAX_PARALLEL,
        description="Data-parallel ranks, each a TP × PP group (vLLM's --data-parallel-size). "
        "A MoE model's expert layers span all of them (vLLM flattens TP × DP for its MoE "
        "layers); a dense model's ranks are independent copies.",
    )
    speculative: SpeculativeOptions | None = Field(
        None,
        description="Speculative decoding (vLLM --speculative-config, SGLang "
        "--speculative-algorithm): the drafter's weights and its KV per token are added.",
    )
    host_memory_bytes: int | None = Field(
        None,
        ge=MIN_GPU_MEMORY,
        le=MAX_GPU_MEMORY,
        description="Host memory the engine's processes may use for all the GPUs judged (a "
        "pod's `resources.limits.memory`): what the engine holds there (offloaded weights, "
        "adapter and KV caches, swap) past it is `host_memory_exceeded`.",
    )
    expert_parallel: bool = Field(
        False,
        description="Expert parallelism (vLLM's --enable-expert-parallel): the routed experts "
        "are divided whole among the TP × DP GPUs instead of split in width.",
    )
    gpu: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description=GPU_DESCRIPTION,
        examples=["h100-sxm-80gb", "NVIDIA-H100-80GB-HBM3", "a100-sxm4-80gb/3g.40gb"],
    )
    gpu_memory_bytes: int | None = Field(
        None,
        ge=MIN_GPU_MEMORY,
        le=MAX_GPU_MEMORY,
        description=GPU_MEMORY_DESCRIPTION,
    )
    gpu_count: int | None = Field(
        None,
        ge=1,
        le=MAX_GPUS,
        description="GPUs to check the fit on; default: tensor × pipeline parallel size. "
        "Without a layout, the smallest layout the engine runs that fits, replicated over "
        "the rest.",
    )

    traffic: TrafficBody | None = Field(
        None,
        description="Answer `performance` (TTFT, ITL, throughput) at this traffic; needs a "
        "catalog `gpu`.",
    )
    slo: SloBody | None = Field(
        None,
        description="With `traffic`: answer `sizing`, the replicas of this layout that serve "
        "`requests_per_s` within the latency targets.",
    )

    @model_validator(mode="after")
    def _one_gpu_given(self) -> InferenceRequestBody:
        _one_gpu(self.gpu, self.gpu_memory_bytes)
        if self.slo is not None and self.traffic is None:
            raise ValueError("`slo` needs `traffic` (the request lengths it is sized at)")
        return self

    @field_validator("prompt_tokens")
    @classmethod
    def _prompt_within_sequence(cls, value: int | None, info: ValidationInfo) -> int | None:
        sequence = info.data.get("sequence_length")
        if value is not None and sequence is not None and value > sequence:
            raise ValueError(f"cannot exceed sequence_length ({sequence})")
        return value

    @field_validator("concurrency")
    @classmethod
    def _bounded_tokens(cls, value: int, info: ValidationInfo) -> int:
        batch, sequence = info.data.get("batch_size"), info.data.get("sequence_length")
        if batch is not None and sequence is not None and batch * sequence * value > MAX_TOKENS:
            raise ValueError(
                f"batch_size × sequence_length × concurrency exceeds {MAX_TOKENS:,} tokens"
            )
        return value


class LoraOptions(RequestModel):
    rank: int = Field(16, ge=1, le=65536, description="Adapter rank r.")
    alpha: float | int | None = Field(
        None, gt=0, le=1e6, description="Scaling (no effect on memory)."
    )
    target_modules: (
        Literal["all-linear"] | list[Annotated[str, Field(min_length=1, max_length=100)]]
    ) = Field(
        "all-linear",
        description="`all-linear` (every decoder linear but lm_head) or module names such as "
        "`q_proj`, `v_proj`.",
        max_length=64,
    )


class FinetuneRequestBody(ModelSelector):
    """Memory to fine-tune a model: the peak of one training step."""

    model_config = ConfigDict(
        **STRICT_REQUEST,
        json_schema_extra={
            **EXACTLY_ONE_MODEL,
            "examples": [
                {
                    "model": "meta-llama/Llama-3.1-8B-Instruct",
                    "method": "qlora",
                    "sequence_length": 4096,
                    "gradient_checkpointing": "full",
                    "gpu": "l4",
                },
                {"parameter_count": 7e9, "estimator": "simple", "optimizer": "adamw"},
            ],
        },
    )

    method: Method = Field("full", description="What is trained.")
    lora: LoraOptions = Field(default_factory=LoraOptions, description="LoRA/QLoRA adapters.")
    trainable_layers: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="`freeze`: how many of the last decoder layers stay trainable (default: "
        f"{training.request.DEFAULT_TRAINABLE_LAYERS}).",
    )
    weight_format: WeightFormat | None = Field(
        None, description="Storage of frozen base weights; default model dtype, `nf4` for QLoRA."
    )
    precision: Precision = Field("bf16-mixed", description="Training precision.")
    optimizer: Optimizer = Field("adamw", description="Optimizer.")
    optimizer_foreach: bool = Field(
        True,
        description="PyTorch's default multi-tensor update (allocates a temporary); false = fused.",
    )
    batch_size: int = Field(1, ge=1, le=MAX_BATCH, description="Micro-batch per GPU.")
    sequence_length: int = Field(
        2048, ge=1, le=MAX_SEQUENCE, validate_default=True, description="Tokens per sample."
    )
    gradient_checkpointing: Checkpointing = Field("none", description="Activation recomputation.")
    attention: Attention = Field("flash", description="Attention kernel.")
    loss_implementation: LossImplementation = Field(
        "transformers",
        description="The code computing the logits and the cross entropy: `transformers` "
        "(>= 4.45), `transformers-legacy` (< 4.45: fp32 logits and a shifted copy), `chunked` "
        "(torchtune's chunked cross entropy), `liger` (fused linear cross entropy), "
        "`cut-cross-entropy` (Apple's CCE).",
    )
    kbit_preparation: KbitPreparation | None = Field(
        None,
        description="QLoRA: how the quantized base is prepared. `peft` (the default for "
        "`qlora`): peft's prepare_model_for_kbit_training, as the standard Hugging Face QLoRA "
        "recipe and TRL run it: embeddings, lm_head and norms in fp32, so the residual stream "
        "is fp32; `none`: the base as loaded (LitGPT, ms-swift). Other methods: `none` only.",
    )
    gpu_count: int = Field(1, ge=1, le=MAX_GPUS, description="Data-parallel GPUs.")
    zero_stage: Literal[0, 1, 2, 3] = Field(0, description="ZeRO / FSDP sharding stage.")
    sharding_implementation: ShardingImplementation = Field(
        "deepspeed",
        description="Who shards: `deepspeed` (ZeRO stages 1-3, per-module gathers) or `fsdp2` "
        "(PyTorch fully_shard per decoder layer and at the root; zero_stage 3 only).",
    )
    offload_optimizer: bool = Field(False, description="Optimizer states in CPU memory.")
    offload_parameters: bool = Field(False, description="Parameters in CPU memory (ZeRO-3).")
    tensor_parallel_size: int = Field(1, ge=1, le=MAX_PARALLEL)
    pipeline_parallel_size: int = Field(1, ge=1, le=MAX_PARALLEL)
    sequence_parallel: bool = Field(False, description="Megatron sequence parallelism with TP.")
    gpu: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description=GPU_DESCRIPTION,
        examples=["a100-sxm4-80gb", "NVIDIA-A100-SXM4-80GB"],
    )
    gpu_memory_bytes: int | None = Field(
        None,
        ge=MIN_GPU_MEMORY,
        le=MAX_GPU_MEMORY,
        description=GPU_MEMORY_DESCRIPTION,
    )

    @model_validator(mode="after")
    def _one_gpu_given(self) -> FinetuneRequestBody:
        _one_gpu(self.gpu, self.gpu_memory_bytes)
        return self

    @field_validator("sequence_length")
    @classmethod
    def _bounded_tokens(cls, value: int, info: ValidationInfo) -> int:
        batch = info.data.get("batch_size")
        if batch is not None and batch * value > MAX_TOKENS:
            raise ValueError(f"batch_size × sequence_length exceeds {MAX_TOKENS:,} tokens")
        return value


# ---------------------------------------------------------------------------------------------
# Responses


class ModelResolutionOut(ResponseModel):
    """How the name in `model` became the model estimated."""

    requested: str = Field(description="The name as the request gave it.")
    resolved_to: str = Field(
        description="The model whose configuration was used: a model-store id, a catalog id, "
        "or `<catalog id>:<tag>` for a file of a catalog GGUF repository."
    )
    route: Literal["store", "catalog", "catalog-gguf", "rules"] = Field(
        description="`store`: the model store's own files (exact); `catalog`: a catalog id or "
        "alias; `catalog-gguf`: a file of a catalog GGUF repository; `rules`: the alias rules "
        "read the name as a mirror, a quantized copy or a GGUF file of a catalog model (a "
        "guess from the name, each rule and its reason in `reasons`)."
    )
    exact: bool = Field(description="False when the answer rests on a rule's reading of the name.")
    format: str | None = Field(
        None,
        description="The weight format the name says (`gptq-int4`, `awq-int4`, `nf4`, "
        "`fp8-block`, `gguf-Q4_K_M`, ...), when it says one.",
    )
    reasons: list[str] = Field(
        default_factory=list, description="Each rule the resolution used, with why it holds."
    )


class ResolvedModel(ResponseModel):
    """The model the request named, as the estimator resolved it."""

    id: str | None = Field(None, description="Catalog id, when the model came from the catalog.")
    model_type: str | None = Field(None, description="The config's `model_type` (the family).")
    parameter_count: int = Field(description="Total parameters, as transformers instantiates.")
    active_parameter_count: int = Field(description="Parameters one token uses (MoE); = total.")
    architecture: dict[str, Any] | None = Field(
        None, description="The normalized architecture fields the estimator used."
    )
    resolution: ModelResolutionOut | None = Field(
        None, description="For a model named by `model`: what the name resolved to, and how."
    )


class PerGpu(ResponseModel):
    """The most loaded GPU."""

    gpu_count: int = Field(description="GPUs the estimate spans (TP × PP).")
    breakdown: dict[str, int] = Field(description="Bytes by component on the most loaded GPU.")
    total_bytes: int = Field(description="Sum of `breakdown`.")


class LayoutOut(ResponseModel):
    """A parallel layout: GPUs = tensor × pipeline × data parallel sizes."""

    tensor_parallel_size: int = Field(description="GPUs one layer is split over.")
    pipeline_parallel_size: int = Field(description="Stages the layers are split into.")
    data_parallel_size: int = Field(description="Replicas of the model.")
    expert_parallel_size: int = Field(
        1, description="GPUs the routed experts are divided among (1: no expert parallelism)."
    )


class FitOut(ResponseModel):
    """Whether the estimate fits the GPU type and count, and the inverse answers."""

    gpu: str = Field(description="The GPU judged: catalog id, with `/profile` for a MIG slice.")
    gpu_count: int = Field(description="GPUs judged (TP × PP × data-parallel replicas).")
    reason: FitReason = Field(
        description="Why it fits or not: the first check that fails, in this order: "
        + ", ".join(f"`{r.value}` ({REASON_TEXT[r]})" for r in FitReason)
        + "."
    )
    reason_detail: str = Field(description="The figures behind `reason` (empty when it fits).")
    layout: LayoutOut | None = Field(description="The parallel layout judged.")
    usable_bytes: int = Field(description="Per GPU: what the driver reports, less engine reserve.")
    required_bytes: int = Field(description="Per GPU, on the most loaded one.")
    fits: bool = Field(description="Whether the request fits as asked.")
    headroom_bytes: int = Field(description="usable − required; negative when it does not fit.")
    min_gpu_count: int | None = Field(
        description="Fewest GPUs on which it fits, in a layout operators run (see "
        "`min_gpu_layout_reason`); null if none."
    )
    min_gpu_layout: LayoutOut | None = Field(
        description="The layout of `min_gpu_count`: posted back as tensor_parallel_size and "
        "pipeline_parallel_size, it fits."
    )
    engine_args: list[str] | None = Field(
        description="vLLM / SGLang: the engine's flags for a setup that fits (the judged one, "
        "else the minimal layout, else a shorter context), as the exact strings it accepts; "
        "null for engines without a command line or when nothing fits."
    )
    max_batch_size: int | None = Field(description="Largest batch that fits; null if none.")
    max_sequence_length: int | None = Field(description="Longest sequence that fits.")
    min_gpu_layout_reason: str | None = Field(
        None,
        description="Why `min_gpu_layout` is that layout: the form operators run (TP inside "
        "one node, in a power-of-two size the engine accepts for the model; pipeline stages "
        "only once TP fills a node or the model splits no further) and why the smaller "
        "layouts of that form do not fit; null when `min_gpu_count` is null.",
    )


class CapacityOut(ResponseModel):
    """What a serving engine reports at start-up, per GPU."""

    kv_cache_bytes_per_token: int = Field(description="KV cache one token costs on one GPU.")
    kv_cache_pool_bytes: int = Field(description="The engine's KV-cache pool per GPU.")
    kv_cache_tokens: int = Field(description="Tokens the pool holds.")
    max_concurrency: float = Field(description="Sequences of the given length served at once.")
    sequence_length: int = Field(description="The length `max_concurrency` is reported at.")
    budget_bytes: int = Field(description="What the engine may use per GPU.")
    subtracted: dict[str, int] = Field(description="What the engine subtracts before the pool.")


class InferenceDetails(TypedDict, total=False):
    """Facts behind an inference estimate."""

    weight_format: Annotated[str, Field(description="The weight format priced.")]
    activation_dtype: Annotated[str, Field(description="The dtype activations run in.")]
    kv_cache_bytes_per_token_per_gpu: Annotated[
        int, Field(description="KV bytes one token costs on one GPU of the last stage.")
    ]
    engine: Annotated[str, Field(description="The engine modelled.")]
    outside_budget_bytes: Annotated[
        int, Field(description="Per GPU: held in the margin the engine's budget leaves.")
    ]
    unpriced: Annotated[
        str,
        Field(
            description="Features read but not priced ('; '-separated): each only adds "
            "memory, so a fit may be optimistic."
        ),
    ]


class FinetuneDetails(TypedDict, total=False):
    """Facts behind a fine-tuning estimate."""

    trainable_parameters: Annotated[int, Field(description="Parameters that train.")]
    total_parameters: Annotated[int, Field(description="Parameters of the model.")]
    weights_dtype: Annotated[str, Field(description="How the weights are held on the GPU.")]
    trainable_dtype: Annotated[str, Field(description="The dtype of trainable parameters.")]
    compute_dtype: Annotated[str, Field(description="The dtype activations run in.")]
    gradient_dtype: Annotated[str, Field(description="The dtype of gradients.")]
    optimizer_state_layout: Annotated[str, Field(description="The optimizer's state layout.")]
    data_parallel_size: Annotated[int, Field(description="Data-parallel replicas.")]
    peak_phase: Annotated[
        str, Field(description="Where the peak is: forward, backward, backward_end, step.")
    ]
    allocated_peak_bytes: Annotated[int, Field(description="The allocator's peak, per GPU.")]
    fragmentation_fraction: Annotated[
        float, Field(description="Reserved beyond the allocated peak, as a fraction of it.")
    ]


EngineValue = bool | int | float | str | None


class UnusedFieldOut(ResponseModel):
    """A request field the chosen engine (or the simple rules) sizes nothing by."""

    field: str = Field(description="The request field, e.g. `sequence_length`.")
    decided_by: list[str] = Field(
        description="The engine options that decide in its place (`engine_options.n_ctx`); "
        "empty when the engine itself does (its fused kernels) or no engine is used."
    )
    engine_values: dict[str, EngineValue] = Field(
        description="Those options' values as the estimate used them (given or defaulted)."
    )
    reason: str = Field(description="Why the field changes nothing, in words.")
    given: bool = Field(
        description="Whether the request gave the field a value other than its default "
        "(then an assumption line says the value was not used)."
    )


Bound = Literal["memory", "compute", "communication"]


class RangeOut(ResponseModel):
    low: float = Field(description="The smaller figure of the two ends.")
    high: float = Field(description="The larger figure.")


class ReplicasRangeOut(ResponseModel):
    low: int = Field(description="Replicas at the fast end of the band.")
    high: int = Field(description="Replicas at the slow end.")


class BandOut(ResponseModel):
    """An uncalibrated answer's range: the figures at the assumed slow and fast constants."""

    ttft_ms: RangeOut
    itl_ms: RangeOut
    output_tokens_per_s: RangeOut
    requests_per_s: RangeOut


class PerformanceOut(ResponseModel):
    """One replica (TP × PP GPUs) under the `traffic`: means over its requests."""

    ttft_ms: float = Field(description="Time to first token, ms, queue wait included.")
    itl_ms: float = Field(description="Inter-token latency (time per output token), ms.")
    output_tokens_per_s: float = Field(description="Generated tokens per second, all GPUs.")
    requests_per_s: float = Field(description="Requests completed per second.")
    latency_ms: float = Field(description="One request, end to end, ms.")
    bound: Bound = Field(description="What limits a step: memory, compute or communication.")
    saturated: bool = Field(
        description="`concurrency` exceeds `max_concurrency`: the rest wait in the queue."
    )
    calibrated: bool = Field(
        description="Fitted to measurements of this engine and GPU class (docs/accuracy.md); "
        "false: the figures are the middle of `band`."
    )
    concurrency: int = Field(description="Requests in flight (the traffic's).")
    running: int = Field(description="Requests the engine runs at once.")
    max_concurrency: int = Field(
        description="The most it runs at once: its scheduler limit and its KV pool."
    )
    queue_wait_ms: float = Field(description="Mean wait in the engine's queue, ms.")
    calibration: str | None = Field(description="`engine/gpu-class` of the fitted constants.")
    band: BandOut | None = Field(description="Uncalibrated answers: the range.")


class SizingOut(ResponseModel):
    """Replicas of the judged layout for the SLO: ⌈rate / per-replica rate⌉."""

    replicas: int | None = Field(description="Replicas needed; null when no load meets it.")
    gpus: int | None = Field(description="GPUs: replicas × TP × PP.")
    per_replica_requests_per_s: float = Field(
        description="Requests per second one replica serves within the SLO."
    )
    concurrency: int = Field(description="Requests in flight per replica at that rate.")
    slo_met: bool = Field(description="Whether one replica meets the latency targets at all.")
    limited_by: Literal["ttft", "itl", "max_concurrency"] = Field(
        description="What caps the per-replica rate."
    )
    replicas_range: ReplicasRangeOut | None = Field(
        description="Uncalibrated answers: replicas at the fast and slow ends of the band."
    )


class EstimateResponse(ResponseModel):
    """One estimate: bytes by component, per GPU and in total, with fit and capacity."""

    kind: Literal["inference", "finetune"] = Field(description="Which estimate this is.")
    estimator: EstimatorName = Field(description="Which rules answered.")
    estimator_version: str = Field(
        description="Release and formula digest; changes whenever a formula does."
    )
    model: ResolvedModel = Field(description="The model, as resolved.")
    breakdown: dict[str, int] = Field(description="Bytes by component, summed over all GPUs.")
    total_bytes: int = Field(description="Sum of `breakdown`.")
    per_gpu: PerGpu = Field(description="The most loaded GPU.")
    fit: FitOut | None = Field(None, description="Present when a `gpu` was given.")
    capacity: CapacityOut | None = Field(
        None, description="Serving engines with a KV pool (vLLM, SGLang), with a `gpu`."
    )
    cpu_bytes: int = Field(
        0,
        description="Host memory the engine holds for all the GPUs of the estimate, in bytes: "
        "offloaded weights, adapter caches, swap space, KV offload, connector buffers "
        "(llama.cpp: its CPU buffers). The processes' own baseline is not included.",
    )
    details: InferenceDetails | FinetuneDetails = Field(
        default_factory=InferenceDetails,
        description="Facts behind the figures (which formats, dtypes and phases).",
    )
    assumptions: list[str] = Field(description="One line per assumption that changed a number.")
    summary: str = Field(description="One line for a person (GB = 10^9 bytes).")
    unused_fields: list[UnusedFieldOut] = Field(
        default_factory=list,
        description="Inference: every request field the chosen engine does not use, with the "
        "engine options that decide instead (llama.cpp sizes its KV cache by `n_ctx`, not "
        "`sequence_length`); the simple rules use no engine, KV dtype or attention kernel.",
    )
    engine_options: dict[str, EngineValue] | None = Field(
        None,
        description="Inference with the detailed estimator: every option of the engine as "
        "the estimate resolved it, the caller's values and the engine's defaults.",
    )
    engine_defaults: list[str] = Field(
        default_factory=list,
        description="Of `engine_options`, the names the engine defaulted (the caller set the "
        "rest), e.g. vLLM's `max_model_len` from the model's derived context.",
    )
    performance: PerformanceOut | None = Field(
        None, description="With `traffic`: latency and throughput (docs/performance.md)."
    )
    sizing: SizingOut | None = Field(None, description="With `slo`: the replicas it needs.")
