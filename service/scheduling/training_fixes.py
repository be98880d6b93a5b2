"""What a training user changes to fit: each change priced on the judged GPU, in the trainer's
own words.

The changes, each a variant of the plan's fine-tune body answered by ``fit_finetune``: the
largest per-device batch that fits as configured; activation (gradient) checkpointing; ZeRO
stage 3 over the job's GPUs (with CPU offload on a single GPU); LoRA instead of a full or
freeze fine-tune; a 4-bit (NF4) base; more GPUs at the same sharding (``min_gpu_count``). The
words are each trainer's spelling of the setting (its flag or recipe key, as the readers in
``service.workloads.training`` read them back).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.application.convert import finetune_request
from service.application.estimate_service import Catalogs
from service.application.resolve import resolve_model
from service.estimator.errors import EstimatorError
from service.estimator.gpu import GpuSpec
from service.estimator.training import FinetuneRequest, fit_finetune
from service.scheduling.training_plan import TrainingPlan
from service.schemas.estimates import FinetuneRequestBody

__all__ = ["WORDS", "Suggestion", "suggestions"]


@dataclass(frozen=True)
class Suggestion:
    """One change that lowers what a GPU holds, in the trainer's own words, with its result."""

    change: str
    how: str
    request: Mapping[str, Any]
    per_gpu_bytes: int
    fits: bool | None


# trainer -> change -> how it is written.
WORDS: Mapping[str, Mapping[str, str]] = {
    "trl": {
        "batch": "--per_device_train_batch_size {n} (raise --gradient_accumulation_steps to "
        "keep the global batch)",
        "checkpointing": "--gradient_checkpointing",
        "zero3": "--accelerate_config zero3 (or --deepspeed with ZeRO stage 3)",
        "zero3_offload": "--deepspeed with zero_optimization.stage 3 and offload_optimizer / "
        "offload_param device cpu",
        "lora": "--use_peft --lora_r 16 --lora_target_modules all-linear",
        "qlora": "--use_peft --load_in_4bit",
        "gpus": "--num_processes {n}",
    },
    "transformers": {
        "batch": "--per_device_train_batch_size {n} (raise --gradient_accumulation_steps to "
        "keep the global batch)",
        "checkpointing": "--gradient_checkpointing",
        "zero3": "--deepspeed <a config with zero_optimization.stage 3>",
        "zero3_offload": "--deepspeed with zero_optimization.stage 3 and offload_optimizer / "
        "offload_param device cpu",
        "lora": "LoRA adapters (peft) in the script",
        "qlora": "a 4-bit bitsandbytes base with LoRA in the script",
        "gpus": "--nproc_per_node / --num_processes {n}",
    },
    "llamafactory": {
        "batch": "per_device_train_batch_size: {n} (raise gradient_accumulation_steps)",
        "checkpointing": "disable_gradient_checkpointing: false",
        "zero3": "deepspeed: examples/deepspeed/ds_z3_config.json",
        "zero3_offload": "deepspeed: examples/deepspeed/ds_z3_offload_config.json",
        "lora": "finetuning_type: lora",
        "qlora": "finetuning_type: lora with quantization_bit: 4",
        "gpus": "NPROC_PER_NODE={n}",
    },
    "axolotl": {
        "batch": "micro_batch_size: {n} (raise gradient_accumulation_steps)",
        "checkpointing": "gradient_checkpointing: true",
        "zero3": "deepspeed: deepspeed_configs/zero3_bf16.json",
        "zero3_offload": "deepspeed: deepspeed_configs/zero3_bf16_cpuoffload_all.json",
        "lora": "adapter: lora with lora_target_linear: true",
        "qlora": "adapter: qlora with load_in_4bit: true",
        "gpus": "{n} GPUs (accelerate --num_processes)",
    },
    "torchtune": {
        "batch": "batch_size={n} (raise gradient_accumulation_steps)",
        "checkpointing": "enable_activation_checkpointing=True",
        "zero3": "a *_distributed recipe (FSDP2) over the GPUs",
        "zero3_offload": "a *_distributed recipe with fsdp_cpu_offload=True",
        "lora": "a lora_finetune_* recipe with a lora_* model builder",
        "qlora": "a qlora_* model builder",
        "gpus": "tune run --nproc_per_node {n}",
    },
}


def _fit(body: Mapping[str, Any], gpu: GpuSpec, catalogs: Catalogs) -> tuple[int, bool] | None:
    try:
        validated = FinetuneRequestBody.model_validate(dict(body))
        model = resolve_model(validated, catalogs.models, catalogs.store)
        request = dataclasses.replace(finetune_request(validated), architecture=model.architecture)
        fit = fit_finetune(request, gpu)
    except (EstimatorError, ValueError):
        return None
    return fit.required_bytes, fit.fits


def suggestions(
    plan: TrainingPlan, request: FinetuneRequest, gpu: GpuSpec, catalogs: Catalogs
) -> tuple[Suggestion, ...]:
    """Changes that lower one rank's bytes on ``gpu`` (``request``: the plan's, typed), each
    with its result."""
    words = WORDS.get(plan.command.trainer, WORDS["transformers"])
    base = dict(plan.body)
    fit = fit_finetune(request, gpu)
    variants: list[tuple[str, str, dict[str, Any]]] = []
    batch = int(base.get("batch_size", 1))
    if fit.max_batch_size and fit.max_batch_size < batch:
        n = fit.max_batch_size
        variants.append(
            (f"per-device batch {n}", words["batch"].format(n=n), {**base, "batch_size": n})
        )
    if base.get("gradient_checkpointing", "none") != "full":
        variants.append(
            (
                "gradient checkpointing",
                words["checkpointing"],
                {**base, "gradient_checkpointing": "full"},
            )
        )
    stage = int(base.get("zero_stage", 0))
    gpus = int(base.get("gpu_count", 1))
    if gpus > 1 and stage < 3:
        variants.append(
            (
                f"ZeRO stage 3 over {gpus} GPUs",
                words["zero3"],
                {**base, "zero_stage": 3, "sharding_implementation": "deepspeed"},
            )
        )
    elif gpus == 1 and not base.get("offload_optimizer"):
        variants.append(
            (
                "ZeRO stage 3 with CPU offload",
                words["zero3_offload"],
                {
                    **base,
                    "zero_stage": 3,
                    "sharding_implementation": "deepspeed",
                    "offload_optimizer": True,
                    "offload_parameters": True,
                },
            )
        )
    method = base.get("method", "full")
    if method in ("full", "freeze"):
        lora = {
            key: value
            for key, value in base.items()
            if key not in ("trainable_layers", "weight_format", "kbit_preparation")
        }
        lora.update(method="lora", lora={"rank": 16, "target_modules": "all-linear"})
        variants.append(("LoRA instead of a full fine-tune", words["lora"], lora))
    if method != "qlora":
        qlora = {key: value for key, value in base.items() if key not in ("trainable_layers",)}
        qlora.update(
            method="qlora",
            weight_format="nf4",
            kbit_preparation="none",
            lora=base.get("lora", {"rank": 16, "target_modules": "all-linear"}),
            zero_stage=0,
            offload_optimizer=False,
            offload_parameters=False,
            sharding_implementation="deepspeed",
        )
        variants.append(("a 4-bit (NF4) base with LoRA", words["qlora"], qlora))
    out: list[Suggestion] = []
    for change, how, body in variants:
        found = _fit(body, gpu, catalogs)
        if found is not None:
            out.append(Suggestion(change, how, body, found[0], found[1]))
    if fit.min_gpu_count is not None and fit.min_gpu_count > gpus:
        n = fit.min_gpu_count
        body = {**base, "gpu_count": n}
        found = _fit(body, gpu, catalogs)
        if found is not None:
            out.append(
                Suggestion(
                    f"{n} GPUs at ZeRO stage {stage}",
                    words["gpus"].format(n=n),
                    body,
                    found[0],
                    found[1],
                )
            )
    return tuple(out)
