"""LLaMA-Factory's YAML recipe read into the fine-tune fields.

LLaMA-Factory (hiyouga/LLaMA-Factory ``src/llamafactory/hparams/``: ``model_args.py``,
``finetuning_args.py``, ``data_args.py``; the model's load dtype and the fp32 upcast of
trainable parameters in ``model/adapter.py`` ``init_adapter``; bitsandbytes settings in
``model/model_utils/quantization.py``; checkpointing in ``model_utils/checkpointing.py``
``prepare_model_for_training``). ``finetuning_type`` defaults to ``lora``, ``lora_rank`` 8,
``lora_target`` ``all`` (every linear but the output layer), ``cutoff_len`` 2048, gradient
checkpointing on unless ``disable_gradient_checkpointing``; the model loads in the compute
dtype (bf16 with ``bf16``) and trainable parameters are upcast to fp32 unless ``pure_bf16``
(or ZeRO-3 without quantization, which keeps fp32 masters itself); QLoRA is
``quantization_bit`` 4 or 8 with ``quantization_method`` ``bnb``, double quantization on, and
no peft k-bit preparation. The rest are transformers ``TrainingArguments``.
"""

from __future__ import annotations

from service.workloads.models import ModelRef, model_ref
from service.workloads.sources import ReadProblem, Sourced
from service.workloads.training.distributed import deepspeed_settings, truthy
from service.workloads.training.files import ConfigFiles
from service.workloads.training.recipes import Recipe, positive_int, read_host, read_keys
from service.workloads.training.rules import (
    attention_setting,
    optimizer_settings,
    precision_setting,
)
from service.workloads.training.settings import Collected, Setting

__all__ = ["read_llamafactory"]

_LF = "LLaMA-Factory"
_LF_KEYS = {
    "finetuning_type": "method",
    "lora_rank": "lora.rank",
    "lora_target": "lora.target_modules",
    "freeze_trainable_layers": "trainable_layers",
    "quantization_bit": "weight_format",
    "quantization_method": "weight_format",
    "quantization_type": "weight_format",
    "double_quantization": "weight_format",
    "bf16": "precision",
    "fp16": "precision",
    "pure_bf16": "precision",
    "cutoff_len": "sequence_length",
    "per_device_train_batch_size": "batch_size",
    "disable_gradient_checkpointing": "gradient_checkpointing",
    "flash_attn": "attention",
    "enable_liger_kernel": "loss_implementation",
    "optim": "optimizer",
    "deepspeed": "zero_stage",
    "gradient_accumulation_steps": "",
    "packing": "",
    "stage": "",
}
_LF_UNPRICED = {
    "use_galore": "GaLore's projected optimizer states are not modelled",
    "use_apollo": "APOLLO's optimizer states are not modelled",
    "use_badam": "BAdam's block-wise updates are not modelled",
    "use_unsloth": "Unsloth's kernels are not modelled",
    "use_unsloth_gc": "Unsloth's offloaded checkpointing is not modelled",
}
_LF_ATTENTION = {"auto": None, "fa2": "flash_attention_2", "fa3": "flash_attention_3"}


def read_llamafactory(
    recipe: Recipe,
    out: Collected,
    files: ConfigFiles,
    working_dir: str | None,
    problems: list[ReadProblem],
) -> ModelRef | None:
    """Fill ``out`` from a LLaMA-Factory YAML (with ``key=value`` overrides)."""
    read_keys(recipe, _LF_KEYS, out)
    for key, note in _LF_UNPRICED.items():
        found = recipe.get(key)
        if found is not None and truthy(found.value):
            out.read(key, True, found.source, priced=False, note=note)
    stage = recipe.value("stage", "sft", _LF)
    if stage.value not in ("sft", "pt"):
        out.read(
            "stage",
            str(stage.value),
            stage.source,
            priced=False,
            note="the reference, reward or value models of this stage are not modelled",
            lowers=False,
        )
    deepspeed = recipe.get("deepspeed")
    if deepspeed is not None and deepspeed.value:
        deepspeed_settings(
            str(deepspeed.value), deepspeed.source, files, working_dir, out, problems
        )
    kind = recipe.value("finetuning_type", "lora", _LF)
    bits = recipe.get("quantization_bit")
    quantized = bits is not None and bits.value is not None
    if kind.value not in ("lora", "freeze", "full"):
        out.set(
            "method", Setting.unpriced("lora", kind.source, f"{kind.value} is not modelled", "lora")
        )
    else:
        method = "qlora" if (kind.value == "lora" and quantized) else str(kind.value)
        out.set("method", Setting(method, kind.source))
    method_value = out.settings["method"].value
    if method_value in ("lora", "qlora"):
        rank = recipe.value("lora_rank", 8, _LF)
        out.set("lora.rank", Setting(rank.value, rank.source))  # type: ignore[arg-type]
        target = recipe.value("lora_target", "all", _LF)
        names = [t.strip() for t in str(target.value).split(",") if t.strip()]
        out.set(
            "lora.target_modules",
            Setting("all-linear" if names == ["all"] else tuple(names), target.source),
        )
    if method_value == "freeze":
        layers = recipe.value("freeze_trainable_layers", 2, _LF)
        count = layers.value if isinstance(layers.value, int) else 2
        if count > 0:
            out.set("trainable_layers", Setting(count, layers.source))
        else:
            out.set(
                "trainable_layers",
                Setting.unpriced(
                    -count, layers.source, "the first layers training is not modelled", 1
                ),
            )
    bf16, fp16 = recipe.value("bf16", False, _LF), recipe.value("fp16", False, _LF)
    pure = recipe.value("pure_bf16", False, _LF)
    load = (
        "bf16"
        if (truthy(bf16.value) or truthy(pure.value))
        else "fp16"
        if truthy(fp16.value)
        else "auto"
    )
    if quantized and bits is not None:
        _lf_quantization(recipe, bits, load, out)
    elif method_value == "lora":
        out.set("weight_format", Setting(load if load != "auto" else None, bf16.source))
    stage_setting = out.settings.get("zero_stage")
    zero3 = stage_setting is not None and stage_setting.value == 3
    if truthy(pure.value):
        precision = Setting("bf16", pure.source, note="pure_bf16: trainable parameters stay bf16")
    elif method_value in ("lora", "qlora"):
        mixed = "bf16" if truthy(bf16.value) else "fp16" if truthy(fp16.value) else "no"
        precision = precision_setting(mixed, load, zero3, bf16.source, adapters=True)
    elif truthy(bf16.value) or truthy(fp16.value):
        word = "bf16" if truthy(bf16.value) else "fp16"
        precision = Setting(
            f"{word}-mixed",
            (bf16 if word == "bf16" else fp16).source,
            note="trainable parameters upcast to fp32 (or ZeRO-3's fp32 masters)",
        )
    else:
        precision = Setting("fp32", bf16.source, note="trainable parameters upcast to fp32")
    out.set("precision", precision)
    cutoff = recipe.value("cutoff_len", 2048, _LF)
    length = positive_int(cutoff, problems)
    if length is not None:
        out.set("sequence_length", Setting(length, cutoff.source))
    batch = recipe.value("per_device_train_batch_size", 8, "transformers TrainingArguments")
    size = positive_int(batch, problems)
    if size is not None:
        out.set("batch_size", Setting(size, batch.source))
    off = recipe.value("disable_gradient_checkpointing", False, _LF)
    out.set("gradient_checkpointing", Setting("none" if truthy(off.value) else "full", off.source))
    attention = recipe.value("flash_attn", "auto", _LF)
    word = str(attention.value).lower()
    name = _LF_ATTENTION.get(word, "eager" if word == "disabled" else word)
    out.set("attention", attention_setting(name, attention.source))
    liger = recipe.value("enable_liger_kernel", False, _LF)
    out.set(
        "loss_implementation",
        Setting("liger" if truthy(liger.value) else "transformers", liger.source),
    )
    optim = recipe.value("optim", "adamw_torch_fused", "transformers TrainingArguments")
    for key, setting in optimizer_settings(str(optim.value), optim.source).items():
        out.set(key, setting)
    read_host(recipe, out)
    model = recipe.get("model_name_or_path")
    return None if model is None or not model.value else model_ref(str(model.value), model.source)


def _lf_quantization(recipe: Recipe, bits: Sourced[object], load: str, out: Collected) -> None:
    method = recipe.value("quantization_method", "bnb", _LF)
    if str(method.value).lower() != "bnb" or bits.value not in (4, 8):
        out.set(
            "weight_format",
            Setting.unpriced(
                "nf4", method.source, f"{method.value} {bits.value}-bit is not modelled", "nf4"
            ),
        )
    elif bits.value == 8:
        out.set("weight_format", Setting("int8", bits.source))
    else:
        kind = recipe.value("quantization_type", "nf4", _LF)
        double = recipe.value("double_quantization", True, _LF)
        source = f"{bits.source}; {kind.source}; {double.source}"
        if kind.value == "nf4":
            out.set(
                "weight_format", Setting("nf4" if truthy(double.value) else "nf4-single", source)
            )
        elif truthy(double.value):
            out.set("weight_format", Setting("fp4", source))
        else:
            out.set(
                "weight_format",
                Setting.unpriced("fp4", source, "FP4 with fp32 absmax is not modelled", "fp4"),
            )
    upcast = recipe.get("upcast_layernorm")
    if upcast is not None and truthy(upcast.value):
        out.read(
            "upcast_layernorm",
            True,
            upcast.source,
            priced=False,
            note="fp32 norms of the quantized base are not modelled",
            lowers=False,
        )
    del load
    out.set("kbit_preparation", Setting("none", f"default ({_LF}: no peft k-bit preparation)"))
