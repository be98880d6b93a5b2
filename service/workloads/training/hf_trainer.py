"""A Hugging Face Trainer job (a TRL command, or a script that parses ``TrainingArguments``)
read into the fine-tune fields.

What each flag does follows the code that consumes it: transformers 5.24 ``Trainer`` and
``TrainingArguments`` (``bf16``/``fp16`` over ``ACCELERATE_MIXED_PRECISION``: ``__post_init__``;
``deepspeed``/``fsdp`` win over the launcher's config), TRL ``scripts/sft.py`` and
``trainer/sft_trainer.py`` (the model loads in ``ModelConfig.dtype``; ``use_peft`` builds a
``LoraConfig`` from ``lora_r``/``lora_target_modules``, ``get_quantization_config`` a
``BitsAndBytesConfig`` from ``load_in_4bit``/``bnb_4bit_quant_type``/``use_bnb_nested_quant``;
a quantized model's trainable parameters are cast to bf16; ``loss_type`` ``chunked_nll``
computes lm_head and the cross entropy per chunk of 256 tokens under checkpointing).

A script that is not TRL's may parse other arguments than these; what it leaves unset takes
the transformers defaults, which are marked unpriced where the script decides (the sequence
length, the model's dtype), with the least they could be (one sequence of one token, bf16) as
the floor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from service.workloads.models import ModelRef, model_ref
from service.workloads.sources import ReadProblem, Sourced
from service.workloads.training.distributed import deepspeed_settings, hf_fsdp_settings
from service.workloads.training.files import ConfigFiles
from service.workloads.training.hf_arguments import FIELDS, TRL_DEFAULTS, HfArgs
from service.workloads.training.rules import (
    attention_setting,
    dtype_name,
    optimizer_settings,
    peft_default_targets,
    precision_setting,
)
from service.workloads.training.settings import Collected, Setting, Value

__all__ = ["read_hf_trainer"]

Lookup = Callable[[str], Sourced[Value]]

_DEFAULTS: dict[str, tuple[Value, str]] = {f.name: (f.default, f.owner) for f in FIELDS}
# Fields whose values set a body field directly: flag -> body field.
_TARGETS = {
    "per_device_train_batch_size": "batch_size",
    "max_length": "sequence_length",
    "gradient_checkpointing": "gradient_checkpointing",
    "optim": "optimizer",
    "attn_implementation": "attention",
    "lora_r": "lora.rank",
    "lora_target_modules": "lora.target_modules",
    "use_peft": "method",
    "load_in_4bit": "method",
    "load_in_8bit": "method",
    "bnb_4bit_quant_type": "weight_format",
    "use_bnb_nested_quant": "weight_format",
    "dtype": "precision",
    "bf16": "precision",
    "fp16": "precision",
    "use_liger_kernel": "loss_implementation",
    "loss_type": "loss_implementation",
    "deepspeed": "zero_stage",
    "fsdp": "zero_stage",
    "fsdp_config": "zero_stage",
}
_NO_MEMORY_EFFECT = {
    "gradient_accumulation_steps": "gradients accumulate in place: no effect on the peak",
    "gradient_checkpointing_kwargs": "use_reentrant changes no stored bytes",
    "packing": "packed rows are full rows, as priced",
    "padding_free": "the same tokens without padding, as priced",
    "dataloader_num_workers": "host memory only",
    "dataloader_pin_memory": "host memory only",
    "dataloader_prefetch_factor": "host memory only",
    "model_name_or_path": "",
    "fsdp_config": "",
}
# Given, these are read but not modelled: (note, whether the trainer may need less).
_UNPRICED = {
    "torch_compile": ("torch.compile may fuse and free activations: not modelled", True),
    "activation_offloading": ("activations offloaded to the host are not modelled", True),
    "use_dora": ("DoRA's magnitude vectors and weight norms are not modelled", False),
    "lora_modules_to_save": ("full trainable copies of these modules are not modelled", False),
    "lora_target_parameters": ("LoRA on parameters (MoE experts) is not modelled", False),
    "use_cpu": ("training on the CPU holds no GPU memory", True),
}


def read_hf_trainer(
    args: HfArgs,
    *,
    trl: bool,
    out: Collected,
    files: ConfigFiles,
    working_dir: str | None,
    problems: list[ReadProblem],
) -> ModelRef | None:
    """Fill ``out`` from a TRL command's or an HF script's flags; the model it names."""
    owner = "TRL" if trl else "transformers"

    def value(name: str) -> Sourced[Value]:
        given = args.values.get(name)
        if given is not None:
            return given
        if trl and name in TRL_DEFAULTS:
            default, where = TRL_DEFAULTS[name]
            return Sourced(default, f"default ({where})")
        default, where = _DEFAULTS[name]
        return Sourced(default, f"default ({owner} {where})")

    for name, read in args.values.items():
        target = _TARGETS.get(name, "")
        if name in _UNPRICED:
            note, lowers = _UNPRICED[name]
            out.read(name, read.value, read.source, priced=False, note=note, lowers=lowers)
        else:
            out.read(
                name, read.value, read.source, target=target, note=_NO_MEMORY_EFFECT.get(name, "")
            )

    # Sharding from the script's own flags wins over the launcher's.
    deepspeed = args.values.get("deepspeed")
    if deepspeed is not None and str(deepspeed.value):
        deepspeed_settings(
            str(deepspeed.value), deepspeed.source, files, working_dir, out, problems
        )
    fsdp = args.values.get("fsdp")
    if fsdp is not None and str(fsdp.value).strip() not in ("", "false", "False"):
        config = args.values.get("fsdp_config")
        hf_fsdp_settings(
            Sourced(fsdp.value, fsdp.source),
            None if config is None else Sourced(config.value, config.source),
            files,
            working_dir,
            out,
            problems,
        )

    # The method: LoRA through TRL's use_peft; a 4- or 8-bit base makes it QLoRA.
    use_peft = bool(value("use_peft").value)
    four, eight = value("load_in_4bit"), value("load_in_8bit")
    quantized = bool(four.value) or bool(eight.value)
    method_source = value("use_peft").source
    if quantized and not use_peft:
        which = four if four.value else eight
        problems.append(
            ReadProblem(
                which.source,
                "a 4- or 8-bit base cannot be fully fine-tuned (the Trainer refuses it)",
                "add --use_peft (QLoRA)",
            )
        )
    method = "qlora" if (use_peft and quantized) else "lora" if use_peft else "full"
    if method == "qlora":
        method_source = f"{method_source} with {(four if four.value else eight).source}"
    out.set("method", Setting(method, method_source))
    adapters = method in ("lora", "qlora")
    if adapters:
        rank = value("lora_r")
        out.set("lora.rank", Setting(rank.value, rank.source))
        targets = value("lora_target_modules")
        names = targets.value if isinstance(targets.value, tuple) else None
        if names is None:
            out.set("lora.target_modules", peft_default_targets(targets.source))
        elif names in (("all-linear",), ("all_linear",)):
            out.set("lora.target_modules", Setting("all-linear", targets.source))
        else:
            out.set("lora.target_modules", Setting(names, targets.source))

    load = value("dtype")
    load_name = dtype_name(load.value) or "auto"
    if method == "qlora":
        _quantized_base(value, four, out, load_name, load.source)
    elif adapters and load_name != "auto":
        out.set("weight_format", Setting(load_name, load.source, note="the base as loaded"))

    # Mixed precision: the Trainer's flags, else accelerate's (ACCELERATE_MIXED_PRECISION).
    bf16, fp16 = value("bf16"), value("fp16")
    if trl and fp16.value and "bf16" not in args.values:
        bf16 = Sourced(False, f"default (TRL: false when fp16; {fp16.source})")
    mixed, mixed_source = "no", f"{bf16.source}; {fp16.source}"
    if bf16.value:
        mixed, mixed_source = "bf16", bf16.source
    elif fp16.value:
        mixed, mixed_source = "fp16", fp16.source
    elif "mixed_precision" in out.extra:
        found = out.extra["mixed_precision"]
        mixed, mixed_source = str(found.value), found.source
    for name, flag in (("bf16", bf16), ("fp16", fp16)):
        explicit = out.extra.get(f"deepspeed_{name}")
        if explicit is not None and bool(explicit.value) != bool(flag.value):
            problems.append(
                ReadProblem(
                    explicit.source,
                    f"the DeepSpeed config sets {name}.enabled {explicit.value} but the "
                    f"Trainer's {name} is {flag.value} ({flag.source}): the Trainer refuses the "
                    "mismatch",
                    f"set {name}.enabled to auto",
                )
            )
    stage = out.settings.get("zero_stage")
    sharded = stage is not None and stage.value not in (0, None)
    precision = precision_setting(
        mixed, load_name, sharded, f"{mixed_source}; dtype {load.source}", adapters=adapters
    )
    if "mixed_precision_unknown" in out.extra and mixed == "no":
        precision = Setting.unpriced(
            precision.value,
            precision.source,
            "the accelerate config's mixed precision is not in the request",
            "bf16",
        )
    if not trl and "dtype" not in args.values and not sharded and not adapters:
        precision = Setting.unpriced(
            precision.value,
            precision.source,
            "the script decides the model's dtype: transformers' from_pretrained default (the "
            "checkpoint's dtype) assumed",
            "bf16",
        )
    out.set("precision", precision)

    optim = value("optim")
    for name, setting in optimizer_settings(str(optim.value), optim.source).items():
        out.set(name, setting)
    batch = value("per_device_train_batch_size")
    micro = out.extra.get("micro_batch")
    if micro is not None and micro.value != batch.value:
        problems.append(
            ReadProblem(
                str(micro.source),
                f"the DeepSpeed config's micro batch ({micro.value}) differs from "
                f"per_device_train_batch_size ({batch.value}): the Trainer refuses the mismatch",
                "set train_micro_batch_size_per_gpu to auto",
            )
        )
    if "auto_find_batch_size" in args.values and args.values["auto_find_batch_size"].value:
        out.set(
            "batch_size",
            Setting.unpriced(
                batch.value,
                batch.source,
                "auto_find_batch_size halves the batch after an out-of-memory error",
                1,
            ),
        )
    else:
        out.set("batch_size", _script_default(trl, "per_device_train_batch_size", batch, args))
    length = value("max_length")
    if length.value is None:
        out.set(
            "sequence_length",
            Setting.unpriced(
                2048,
                "not given (the script decides)",
                "no max_length/max_seq_length/block_size given: 2048 tokens assumed",
                1,
            ),
        )
    else:
        out.set("sequence_length", _script_default(trl, "max_length", length, args))
    checkpointing = value("gradient_checkpointing")
    if "gradient_checkpointing" not in out.settings or "gradient_checkpointing" in args.values:
        out.set(
            "gradient_checkpointing",
            Setting("full" if checkpointing.value else "none", checkpointing.source),
        )
    attention = value("attn_implementation")
    out.set(
        "attention",
        attention_setting(
            None if attention.value is None else str(attention.value), attention.source
        ),
    )
    out.set("loss_implementation", _loss(trl, value, args.values))
    for key in ("dataloader_num_workers", "dataloader_prefetch_factor", "dataloader_pin_memory"):
        found = value(key)
        if found.value is not None:
            out.extra[key] = found
    model = value("model_name_or_path")
    if model.value is None:
        return None
    return model_ref(str(model.value), model.source)


def _script_default(trl: bool, name: str, read: Sourced[Value], args: HfArgs) -> Setting:
    """A value as given, or a default: TRL's own are known, a script's may differ."""
    if trl or name in args.values:
        return Setting(read.value, read.source)
    return Setting.unpriced(
        read.value,
        read.source,
        f"{name} not given: the TrainingArguments default, if the script parses them",
        1,
    )


def _quantized_base(
    value: Lookup, four: Sourced[Value], out: Collected, load_name: str, load_source: str
) -> None:
    """``weight_format`` and ``kbit_preparation`` of TRL's bitsandbytes base."""
    if four.value:
        kind = value("bnb_4bit_quant_type")
        nested = value("use_bnb_nested_quant")
        source = f"{kind.source}; use_bnb_nested_quant {nested.source}"
        if kind.value == "nf4":
            out.set("weight_format", Setting("nf4" if nested.value else "nf4-single", source))
        elif nested.value:
            out.set("weight_format", Setting("fp4", source))
        else:
            out.set(
                "weight_format",
                Setting.unpriced("fp4", source, "FP4 with fp32 absmax is not modelled", "fp4"),
            )
    else:
        out.set("weight_format", Setting("int8", value("load_in_8bit").source))
    if load_name == "fp32":
        out.set(
            "kbit_preparation",
            Setting(
                "peft",
                load_source,
                note="the model loads in float32: its non-quantized tensors are fp32, as "
                "peft's preparation makes them",
            ),
        )
    else:
        out.set("kbit_preparation", Setting("none", load_source))
    out.read(
        "trainable dtype",
        "bf16",
        "TRL SFTTrainer (quantized model)",
        priced=False,
        note="TRL casts the adapters of a quantized model to bf16; they are priced in fp32",
        lowers=True,
    )


def _loss(trl: bool, value: Lookup, given: Mapping[str, Sourced[Value]]) -> Setting:
    liger = value("use_liger_kernel")
    if liger.value:
        return Setting("liger", liger.source)
    if not trl:
        return Setting("transformers", "default (transformers ForCausalLMLoss)")
    loss = given.get("loss_type")
    kind = str(loss.value) if loss is not None else "chunked_nll"
    source = loss.source if loss is not None else "default (TRL SFTConfig: chunked_nll)"
    if kind == "nll":
        return Setting("transformers", source)
    return Setting.unpriced(
        "transformers",
        source,
        f"TRL's {kind} loss is not modelled: transformers' (full logits) priced, "
        "cut-cross-entropy (no logits) as its floor",
        "cut-cross-entropy",
    )
