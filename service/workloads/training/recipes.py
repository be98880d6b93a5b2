"""The YAML recipes of LLaMA-Factory, axolotl and torchtune, read into the fine-tune fields.

- LLaMA-Factory (hiyouga/LLaMA-Factory ``src/llamafactory/hparams/``: ``model_args.py``,
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
- axolotl (axolotl-ai-cloud/axolotl ``src/axolotl/utils/schemas/``: ``config.py``,
  ``training.py``, ``peft.py``, ``model.py``, ``fsdp.py``; ``utils/config/__init__.py`` sets
  the load dtype from ``bf16``/``fp16``; ``loaders/model.py`` builds the 4-bit config with
  double quantization and runs peft's k-bit preparation, patched to keep ``embed_tokens`` and
  ``lm_head`` in 16 bits, unless FSDP or ZeRO-3 shards the QLoRA base). Defaults:
  ``micro_batch_size`` 1, ``sequence_len`` 512, ``bf16`` auto, ``optimizer``
  ``adamw_torch_fused``, ``gradient_checkpointing`` false, FSDP version 1.
- torchtune (pytorch/torchtune ``recipes/*.py`` and ``recipes/configs``): the recipe names
  the method (``full_finetune_*``, ``lora_finetune_*``), a ``qlora_*`` model builder the 4-bit
  base (torchao NF4, double-quantized scales); weights, adapters and optimizer states train in
  ``dtype`` without autocast; the distributed recipes shard with FSDP2 ``fully_shard``
  (``fsdp_cpu_offload``); ``enable_activation_checkpointing``, ``batch_size``,
  ``tokenizer.max_seq_len``, the ``optimizer`` and ``loss`` components.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from service.workloads.models import ModelRef, model_ref
from service.workloads.sources import ReadProblem, Sourced
from service.workloads.training.distributed import (
    deepspeed_settings,
    fsdp_settings,
    hf_fsdp_settings,
    truthy,
)
from service.workloads.training.files import ConfigFiles
from service.workloads.training.rules import (
    attention_setting,
    dtype_name,
    optimizer_settings,
    peft_default_targets,
    precision_setting,
)
from service.workloads.training.settings import Collected, Setting, Value

__all__ = [
    "TORCHTUNE_MODELS",
    "Recipe",
    "read_axolotl",
    "read_llamafactory",
    "read_torchtune",
]


class Recipe:
    """A recipe's keys (dotted for nesting) with command-line overrides over the file's."""

    def __init__(
        self, doc: Mapping[str, object], label: str, overrides: Mapping[str, Sourced[str]]
    ) -> None:
        self.doc = doc
        self.label = label
        self.overrides = overrides

    def get(self, key: str) -> Sourced[object] | None:
        if key in self.overrides:
            found = self.overrides[key]
            return Sourced(_scalar(found.value), found.source)
        node: object = self.doc
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return Sourced(node, f"{self.label} {key}")

    def value(self, key: str, default: Value, owner: str) -> Sourced[object]:
        found = self.get(key)
        if found is None or found.value is None:
            return Sourced(default, f"default ({owner})")
        return found


def _scalar(text: str) -> object:
    """A ``key=value`` override's value as YAML reads a plain scalar."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _int(found: Sourced[object], problems: list[ReadProblem]) -> int | None:
    value = found.value
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    problems.append(ReadProblem(found.source, f"expected a positive integer, got {value!r}"))
    return None


def _read_all(recipe: Recipe, keys: Mapping[str, str], out: Collected) -> None:
    for key, target in keys.items():
        found = recipe.get(key)
        if found is not None and found.value is not None:
            value = found.value
            shown: Value = (
                tuple(str(v) for v in value)
                if isinstance(value, list)
                else value
                if isinstance(value, bool | int | float | str)
                else str(value)
            )
            out.read(key, shown, found.source, target=target)


# ------------------------------------------------------------------------------ LLaMA-Factory

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
    _read_all(recipe, _LF_KEYS, out)
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
    length = _int(cutoff, problems)
    if length is not None:
        out.set("sequence_length", Setting(length, cutoff.source))
    batch = recipe.value("per_device_train_batch_size", 8, "transformers TrainingArguments")
    size = _int(batch, problems)
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
    _host(recipe, out)
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


def _host(recipe: Recipe, out: Collected) -> None:
    for key in ("dataloader_num_workers", "dataloader_prefetch_factor", "dataloader_pin_memory"):
        found = recipe.get(key)
        if found is not None and isinstance(found.value, bool | int):
            out.extra[key] = Sourced(found.value, found.source)


# ------------------------------------------------------------------------------ axolotl

_AX = "axolotl"
_AX_KEYS = {
    "adapter": "method",
    "lora_r": "lora.rank",
    "lora_target_linear": "lora.target_modules",
    "lora_target_modules": "lora.target_modules",
    "load_in_4bit": "weight_format",
    "load_in_8bit": "weight_format",
    "bf16": "precision",
    "fp16": "precision",
    "micro_batch_size": "batch_size",
    "sequence_len": "sequence_length",
    "gradient_checkpointing": "gradient_checkpointing",
    "optimizer": "optimizer",
    "flash_attention": "attention",
    "sdp_attention": "attention",
    "attn_implementation": "attention",
    "deepspeed": "zero_stage",
    "fsdp": "zero_stage",
    "fsdp_version": "zero_stage",
    "liger_fused_linear_cross_entropy": "loss_implementation",
    "cut_cross_entropy": "loss_implementation",
    "sample_packing": "",
    "gradient_accumulation_steps": "",
}
_AX_UNPRICED = {
    "tensor_parallel_size": ("tensor parallelism of the HF model is not modelled", True),
    "context_parallel_size": ("context parallelism is not modelled", True),
    "activation_offloading": ("activations offloaded to the host are not modelled", True),
    "lora_modules_to_save": ("full trainable copies of these modules are not modelled", False),
    "peft_use_dora": ("DoRA is not modelled", False),
}


def read_axolotl(
    recipe: Recipe,
    out: Collected,
    files: ConfigFiles,
    working_dir: str | None,
    problems: list[ReadProblem],
) -> ModelRef | None:
    """Fill ``out`` from an axolotl YAML (with ``--key value`` overrides)."""
    _read_all(recipe, _AX_KEYS, out)
    for key, (note, lowers) in _AX_UNPRICED.items():
        found = recipe.get(key)
        if found is not None and found.value not in (None, False, 1, []):
            out.read(key, str(found.value), found.source, priced=False, note=note, lowers=lowers)
    deepspeed = recipe.get("deepspeed")
    if deepspeed is not None and deepspeed.value:
        raw = deepspeed.value
        ref = raw if isinstance(raw, str) else json.dumps(raw)
        deepspeed_settings(ref, deepspeed.source, files, working_dir, out, problems)
    fsdp = recipe.get("fsdp")
    fsdp_config = recipe.get("fsdp_config")
    version = recipe.get("fsdp_version")
    if fsdp is not None and fsdp.value:
        config = (
            dict(fsdp_config.value)
            if fsdp_config and isinstance(fsdp_config.value, Mapping)
            else {}
        )
        if version is not None and version.value:
            config["version"] = version.value
        elif "fsdp_version" not in config and "version" not in config:
            config["version"] = 1
        hf_fsdp_settings(
            Sourced(fsdp.value, fsdp.source),
            Sourced(config, fsdp_config.source if fsdp_config else f"default ({_AX}: FSDP1)"),
            files,
            working_dir,
            out,
            problems,
        )
    adapter = recipe.get("adapter")
    four = recipe.value("load_in_4bit", False, _AX)
    eight = recipe.value("load_in_8bit", False, _AX)
    name = str(adapter.value).lower() if adapter is not None and adapter.value else "full"
    if name not in ("lora", "qlora", "full"):
        out.set(
            "method",
            Setting.unpriced(
                "lora", adapter.source if adapter else "", f"adapter {name} is not modelled", "lora"
            ),
        )
        name = "lora"
    quantized = truthy(four.value) or truthy(eight.value)
    method = "qlora" if name in ("lora", "qlora") and quantized else name
    if name == "qlora" and not truthy(four.value):
        problems.append(ReadProblem(four.source, "adapter qlora needs load_in_4bit: true"))
    if "method" not in out.settings:
        out.set("method", Setting(method, adapter.source if adapter else f"default ({_AX}: full)"))
    if method in ("lora", "qlora"):
        rank = recipe.value("lora_r", 8, "peft LoraConfig")
        out.set("lora.rank", Setting(rank.value, rank.source))  # type: ignore[arg-type]
        linear = recipe.get("lora_target_linear")
        modules = recipe.get("lora_target_modules")
        if linear is not None and truthy(linear.value):
            out.set("lora.target_modules", Setting("all-linear", linear.source))
        elif modules is not None and modules.value:
            names = modules.value if isinstance(modules.value, list) else [modules.value]
            out.set("lora.target_modules", Setting(tuple(str(n) for n in names), modules.source))
        else:
            out.set("lora.target_modules", peft_default_targets(f"default ({_AX})"))
    bf16 = recipe.value("bf16", "auto", _AX)
    fp16 = recipe.value("fp16", False, _AX)
    auto = str(bf16.value).lower() == "auto"
    if auto:
        out.note("bf16: auto is judged as bf16 (GPUs from Ampere on support it)")
    mixed = "bf16" if (auto or truthy(bf16.value)) else "fp16" if truthy(fp16.value) else "no"
    load = {"bf16": "bf16", "fp16": "fp16"}.get(mixed, "fp32")
    stage = out.settings.get("zero_stage")
    sharded = stage is not None and stage.value not in (0, None)
    if method == "qlora":
        double = recipe.value("bnb_4bit_use_double_quant", True, _AX)
        kind = recipe.value("bnb_4bit_quant_type", "nf4", _AX)
        if truthy(four.value):
            fmt = (
                ("nf4" if kind.value == "nf4" else "fp4") if truthy(double.value) else "nf4-single"
            )
            out.set("weight_format", Setting(fmt, f"{four.source}; {double.source}"))
        else:
            out.set("weight_format", Setting("int8", eight.source))
        if sharded:
            out.set(
                "kbit_preparation",
                Setting(
                    "none",
                    f"{stage.source if stage else ''}: sharded QLoRA skips peft's preparation",
                ),
            )
        else:
            out.set(
                "kbit_preparation",
                Setting.unpriced(
                    "peft",
                    f"default ({_AX} loaders/model.py)",
                    "axolotl keeps embed_tokens and lm_head in 16 bits through peft's "
                    "preparation: priced with them in fp32",
                    "none",
                ),
            )
    elif method == "lora":
        out.set("weight_format", Setting(load, bf16.source, note="the base as loaded"))
    out.set(
        "precision",
        precision_setting(mixed, load, sharded, bf16.source, adapters=method in ("lora", "qlora")),
    )
    batch = recipe.value("micro_batch_size", 1, _AX)
    size = _int(batch, problems)
    if size is not None:
        out.set("batch_size", Setting(size, batch.source))
    length = recipe.value("sequence_len", 512, _AX)
    tokens = _int(length, problems)
    if tokens is not None:
        out.set("sequence_length", Setting(tokens, length.source))
    checkpointing = recipe.value("gradient_checkpointing", False, _AX)
    if isinstance(checkpointing.value, str) and checkpointing.value.startswith("offload"):
        out.set(
            "gradient_checkpointing",
            Setting.unpriced(
                "full",
                checkpointing.source,
                "checkpoints offloaded to the host are not modelled",
                "full",
            ),
        )
    elif "gradient_checkpointing" not in out.settings or truthy(checkpointing.value):
        out.set(
            "gradient_checkpointing",
            Setting("full" if truthy(checkpointing.value) else "none", checkpointing.source),
        )
    optim = recipe.value("optimizer", "adamw_torch_fused", _AX)
    for key, setting in optimizer_settings(str(optim.value), optim.source).items():
        out.set(key, setting)
    out.set("attention", _ax_attention(recipe))
    liger = recipe.get("liger_fused_linear_cross_entropy")
    cce = recipe.get("cut_cross_entropy")
    if cce is not None and truthy(cce.value):
        out.set("loss_implementation", Setting("cut-cross-entropy", cce.source))
    elif liger is not None and truthy(liger.value):
        out.set("loss_implementation", Setting("liger", liger.source))
    else:
        out.set("loss_implementation", Setting("transformers", f"default ({_AX})"))
    _host(recipe, out)
    model = recipe.get("base_model")
    return None if model is None or not model.value else model_ref(str(model.value), model.source)


def _ax_attention(recipe: Recipe) -> Setting:
    named = recipe.get("attn_implementation")
    if named is not None and named.value:
        return attention_setting(str(named.value), named.source)
    flash = recipe.get("flash_attention")
    if flash is not None and truthy(flash.value):
        return Setting("flash", flash.source)
    sdp = recipe.get("sdp_attention")
    if sdp is not None and truthy(sdp.value):
        return Setting("sdpa", sdp.source)
    return attention_setting(None, f"default ({_AX}: transformers' choice)")


# ------------------------------------------------------------------------------ torchtune

_TT = "torchtune"
# torchtune model builders -> the Hugging Face checkpoint they load (torchtune/models/*).
TORCHTUNE_MODELS: dict[str, str] = {
    "llama3_1_8b": "meta-llama/Llama-3.1-8B",
    "llama3_1_70b": "meta-llama/Llama-3.1-70B",
    "llama3_2_1b": "meta-llama/Llama-3.2-1B",
    "llama3_2_3b": "meta-llama/Llama-3.2-3B",
    "llama3_8b": "meta-llama/Meta-Llama-3-8B",
    "llama3_70b": "meta-llama/Meta-Llama-3-70B",
    "qwen2_5_7b_base": "Qwen/Qwen2.5-7B",
    "qwen2_5_7b_instruct": "Qwen/Qwen2.5-7B-Instruct",
    "qwen2_0_5b": "Qwen/Qwen2-0.5B",
}
# torchtune's LoRA module names -> the Hugging Face names the estimate's targets use.
_TT_MODULES = {
    "q_proj": "q_proj",
    "k_proj": "k_proj",
    "v_proj": "v_proj",
    "output_proj": "o_proj",
}
_TT_OPTIMIZERS = {
    "torch.optim.AdamW": "adamw_torch",
    "torch.optim.SGD": "sgd",
    "bitsandbytes.optim.PagedAdamW8bit": "paged_adamw_8bit",
    "bitsandbytes.optim.AdamW8bit": "adamw_8bit",
    "bitsandbytes.optim.PagedAdamW": "paged_adamw_32bit",
}
_TT_LOSSES = {
    "torchtune.modules.loss.CEWithChunkedOutputLoss": Setting("chunked", ""),
    "torchtune.modules.loss.LinearCrossEntropyLoss": Setting.unpriced(
        "chunked",
        "",
        "LinearCrossEntropyLoss projects one chunk at a time: priced as the chunked loss, "
        "which holds every chunk's logits in its forward",
        "cut-cross-entropy",
    ),
}


def read_torchtune(
    recipe: Recipe,
    recipe_name: Sourced[str],
    out: Collected,
    problems: list[ReadProblem],
) -> ModelRef | None:
    """Fill ``out`` from a torchtune config run by ``recipe_name``."""
    name = recipe_name.value
    distributed = name.endswith("_distributed")
    if not (name.startswith("full_finetune") or name.startswith("lora_finetune")):
        out.read(
            "recipe",
            name,
            recipe_name.source,
            priced=False,
            note="only the full and LoRA fine-tuning recipes are modelled",
        )
    component = recipe.get("model._component_")
    builder = str(component.value).rsplit(".", 1)[-1] if component else ""
    lora = builder.startswith(("lora_", "qlora_"))
    qlora = builder.startswith("qlora_")
    method = "qlora" if qlora else "lora" if lora else "full"
    source = component.source if component else recipe_name.source
    out.read("model._component_", builder, source, target="method")
    out.set("method", Setting(method, source))
    base = builder.split("_", 1)[1] if lora else builder
    model: ModelRef | None = None
    if base in TORCHTUNE_MODELS:
        model = model_ref(TORCHTUNE_MODELS[base], f"{source} (torchtune builder {base})")
    if lora:
        rank = recipe.value("model.lora_rank", 8, _TT)
        out.set("lora.rank", Setting(rank.value, rank.source))  # type: ignore[arg-type]
        targets: list[str] = []
        attn = recipe.get("model.lora_attn_modules")
        for module in attn.value if attn and isinstance(attn.value, list) else []:
            targets.append(_TT_MODULES.get(str(module), str(module)))
        mlp = recipe.value("model.apply_lora_to_mlp", False, _TT)
        if truthy(mlp.value):
            targets += ["gate_proj", "up_proj", "down_proj"]
        output = recipe.value("model.apply_lora_to_output", False, _TT)
        if truthy(output.value):
            targets.append("lm_head")
        where = attn.source if attn else source
        out.set("lora.target_modules", Setting(tuple(targets), where))
        if qlora:
            out.set(
                "weight_format",
                Setting("nf4", source, note="torchao NF4: block 64, double-quantized scales"),
            )
            out.set("kbit_preparation", Setting("none", source))
    dtype = recipe.value("dtype", "bf16", _TT)
    word = dtype_name(dtype.value) or "bf16"
    out.set(
        "precision", Setting("bf16" if word == "bf16" else "fp32", dtype.source, note="no autocast")
    )
    if lora and not qlora:
        out.set("weight_format", Setting("bf16" if word == "bf16" else "fp32", dtype.source))
    if lora:
        out.read(
            "adapter dtype",
            word,
            dtype.source,
            priced=False,
            note="torchtune's adapters train in the model dtype; they are priced in fp32",
        )
    batch = recipe.value("batch_size", 1, _TT)
    size = _int(batch, problems)
    if size is not None:
        out.set("batch_size", Setting(size, batch.source))
    length = recipe.get("tokenizer.max_seq_len")
    if length is not None and length.value is not None:
        tokens = _int(length, problems)
        if tokens is not None:
            out.set("sequence_length", Setting(tokens, length.source))
    else:
        out.set(
            "sequence_length",
            Setting.unpriced(
                2048,
                length.source if length else f"default ({_TT}: tokenizer.max_seq_len null)",
                "no max_seq_len: samples keep their own length; 2048 tokens assumed",
                1,
            ),
        )
    checkpointing = recipe.value("enable_activation_checkpointing", False, _TT)
    out.set(
        "gradient_checkpointing",
        Setting("full" if truthy(checkpointing.value) else "none", checkpointing.source),
    )
    for key, note in (
        ("enable_activation_offloading", "activations offloaded to the host are not modelled"),
        ("compile", "torch.compile may fuse and free activations: not modelled"),
        ("optimizer_in_bwd", "the optimizer step inside backward frees gradients early"),
    ):
        found = recipe.get(key)
        if found is not None and truthy(found.value):
            out.read(key, True, found.source, priced=False, note=note)
    opt = recipe.get("optimizer._component_")
    opt_name = _TT_OPTIMIZERS.get(str(opt.value), str(opt.value)) if opt else "adamw_torch"
    fused = recipe.get("optimizer.fused")
    if opt_name == "adamw_torch" and fused is not None and truthy(fused.value):
        opt_name = "adamw_torch_fused"
    for key, setting in optimizer_settings(opt_name, opt.source if opt else _TT).items():
        out.set(key, setting)
    loss = recipe.get("loss._component_")
    loss_setting = _TT_LOSSES.get(str(loss.value)) if loss else None
    if loss is not None and loss_setting is not None:
        out.set(
            "loss_implementation",
            Setting(
                loss_setting.value,
                loss.source,
                loss_setting.priced,
                loss_setting.note,
                loss_setting.floor,
            ),
        )
    else:
        out.set(
            "loss_implementation",
            Setting.unpriced(
                "transformers",
                loss.source if loss else _TT,
                "this loss is not modelled: full logits priced",
                "cut-cross-entropy",
            ),
        )
    out.set("attention", Setting("sdpa", f"{_TT} (scaled_dot_product_attention)"))
    if distributed:
        offload = recipe.value("fsdp_cpu_offload", False, _TT)
        reshard = recipe.value("fsdp_reshard_after_forward", True, _TT)
        fsdp_settings(
            version=Sourced(2, f"{recipe_name.source} (FSDP2 fully_shard)"),
            strategy=Sourced(str(truthy(reshard.value)).lower(), reshard.source),
            offload=Sourced(truthy(offload.value), offload.source),
            activation_checkpointing=None,
            out=out,
        )
        out.extra["single_device"] = Sourced(False, recipe_name.source)
    else:
        out.extra["single_device"] = Sourced(True, recipe_name.source)
    return model
