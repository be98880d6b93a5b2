"""axolotl's YAML config read into the fine-tune fields.

axolotl (axolotl-ai-cloud/axolotl ``src/axolotl/utils/schemas/``: ``config.py``,
``training.py``, ``peft.py``, ``model.py``, ``fsdp.py``; ``utils/config/__init__.py`` sets
the load dtype from ``bf16``/``fp16``; ``loaders/model.py`` builds the 4-bit config with
double quantization and runs peft's k-bit preparation, patched to keep ``embed_tokens`` and
``lm_head`` in 16 bits, unless FSDP or ZeRO-3 shards the QLoRA base). Defaults:
``micro_batch_size`` 1, ``sequence_len`` 512, ``bf16`` auto, ``optimizer``
``adamw_torch_fused``, ``gradient_checkpointing`` false, FSDP version 1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from service.workloads.models import ModelRef, model_ref
from service.workloads.sources import ReadProblem, Sourced
from service.workloads.training.distributed import deepspeed_settings, hf_fsdp_settings, truthy
from service.workloads.training.files import ConfigFiles
from service.workloads.training.recipes import Recipe, positive_int, read_host, read_keys
from service.workloads.training.rules import (
    attention_setting,
    optimizer_settings,
    peft_default_targets,
    precision_setting,
)
from service.workloads.training.settings import Collected, Setting

__all__ = ["read_axolotl"]

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
    read_keys(recipe, _AX_KEYS, out)
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
    size = positive_int(batch, problems)
    if size is not None:
        out.set("batch_size", Setting(size, batch.source))
    length = recipe.value("sequence_len", 512, _AX)
    tokens = positive_int(length, problems)
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
    read_host(recipe, out)
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
