"""A fine-tuning request (one micro-batch step) and its checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.estimator.errors import InvalidRequest
from service.estimator.formats import QLORA_FORMATS, get_format
from service.estimator.model import Architecture
from service.estimator.training.activations import ATTENTION, GRADIENT_CHECKPOINTING
from service.estimator.training.kbit import resolve_kbit_preparation
from service.estimator.training.lora import LoraSpec, validate_lora
from service.estimator.training.loss import LOSS_IMPLEMENTATIONS
from service.estimator.training.optimizers import OPTIMIZERS
from service.estimator.training.precision import PRECISIONS
from service.estimator.training.sharding import Sharding, validate_sharding

__all__ = [
    "DEFAULT_TRAINABLE_LAYERS",
    "METHODS",
    "FinetuneRequest",
    "positive",
    "sharding_of",
    "validate",
]

METHODS: tuple[str, ...] = ("full", "freeze", "lora", "qlora")
#: Method ``freeze`` without ``trainable_layers``: the last two decoder layers train.
DEFAULT_TRAINABLE_LAYERS = 2


@dataclass(frozen=True)
class FinetuneRequest:
    """A fine-tuning job to estimate (one micro-batch step).

    ``trainable_layers`` (method ``freeze``): how many of the last decoder layers train; the
    embeddings, the rest of the layers and lm_head stay frozen. ``weight_format``: storage of
    the frozen base for LoRA/QLoRA (default the model's dtype, ``nf4`` for QLoRA); full and
    freeze fine-tuning keep the whole model in the precision's weight dtype.
    ``quantized_base_saves_inputs`` (QLoRA only): the quantized base linears keep their input
    for backward, as bitsandbytes did before 0.43.2 (July 2024); recent versions do not.
    ``loss_implementation``: the code that computes the logits and the cross entropy
    (:mod:`.loss`). ``sharding_implementation``: DeepSpeed ZeRO or PyTorch FSDP2
    (:mod:`.sharding`). ``kbit_preparation`` (QLoRA): peft's ``prepare_model_for_kbit_training``
    casts the base's non-quantized parameters to fp32 (:mod:`.kbit`); None: ``peft`` for QLoRA,
    ``none`` otherwise.
    """

    architecture: Architecture | None
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
    loss_implementation: str = "transformers"
    sharding_implementation: str = "deepspeed"
    kbit_preparation: str | None = None

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
    def is_lora(self) -> bool:
        return self.method in ("lora", "qlora")

    @property
    def kbit_prepared(self) -> bool:
        """peft's ``prepare_model_for_kbit_training`` ran on the quantized base."""
        return resolve_kbit_preparation(self.method, self.kbit_preparation) == "peft"

    @property
    def trainable_layer_count(self) -> int:
        """Method ``freeze``: the decoder layers that train, counted from the last."""
        if self.trainable_layers is not None:
            return self.trainable_layers
        return min(DEFAULT_TRAINABLE_LAYERS, self.arch.num_layers)

    @property
    def model_parallel_size(self) -> int:
        """GPUs one model copy spans (TP × PP)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


def _choice(value: object, allowed: tuple[str, ...], name: str) -> None:
    if value not in allowed:
        raise InvalidRequest(
            f"{name} must be one of {', '.join(allowed)}; got {str(value)[:40]!r}", field=name
        )


def positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequest(f"{name} must be a positive integer; got {value!r}", field=name)
    return value


def sharding_of(req: FinetuneRequest) -> Sharding:
    dp = req.gpu_count // req.model_parallel_size
    return Sharding(
        dp,
        req.zero_stage,
        req.offload_optimizer,
        req.offload_parameters,
        req.sharding_implementation,
    )


def validate(req: FinetuneRequest) -> None:
    """Every static field of ``req`` (batch and sequence are checked per evaluation)."""
    arch = req.arch
    _choice(req.method, METHODS, "method")
    _choice(req.precision, PRECISIONS, "precision")
    _choice(req.optimizer, OPTIMIZERS, "optimizer")
    _choice(req.gradient_checkpointing, GRADIENT_CHECKPOINTING, "gradient_checkpointing")
    _choice(req.attention, ATTENTION, "attention")
    _choice(req.loss_implementation, LOSS_IMPLEMENTATIONS, "loss_implementation")
    resolve_kbit_preparation(req.method, req.kbit_preparation)
    positive(req.batch_size, "batch_size")
    positive(req.sequence_length, "sequence_length")
    gpus = positive(req.gpu_count, "gpu_count")
    tp = positive(req.tensor_parallel_size, "tensor_parallel_size")
    pp = positive(req.pipeline_parallel_size, "pipeline_parallel_size")
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
    if req.is_lora:
        validate_lora(arch, req.lora)
    if req.method == "freeze":
        k = req.trainable_layer_count
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
                f"{', '.join(QLORA_FORMATS)}; got {fmt[:40]!r}",
                field="weight_format",
            )
    elif (
        req.weight_format is not None
        and get_format(req.weight_format).quantized
        and req.method in ("full", "freeze")
    ):
        raise InvalidRequest(
            "quantized weights cannot be trained; use method 'qlora' for a quantized "
            "base, or a plain weight_format (fp32, bf16, fp16)",
            field="weight_format",
        )
    validate_sharding(gpus, sharding_of(req))
