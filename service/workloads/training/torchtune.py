"""torchtune's recipes and YAML configs read into the fine-tune fields.

torchtune (pytorch/torchtune ``recipes/*.py`` and ``recipes/configs``): the recipe names
the method (``full_finetune_*``, ``lora_finetune_*``), a ``qlora_*`` model builder the 4-bit
base (torchao NF4, double-quantized scales); weights, adapters and optimizer states train in
``dtype`` without autocast; the distributed recipes shard with FSDP2 ``fully_shard``
(``fsdp_cpu_offload``); ``enable_activation_checkpointing``, ``batch_size``,
``tokenizer.max_seq_len``, the ``optimizer`` and ``loss`` components.
"""

from __future__ import annotations

from service.workloads.models import ModelRef, model_ref
from service.workloads.sources import ReadProblem, Sourced
from service.workloads.training.distributed import fsdp_settings, truthy
from service.workloads.training.recipes import Recipe, positive_int
from service.workloads.training.rules import dtype_name, optimizer_settings
from service.workloads.training.settings import Collected, Setting

__all__ = ["TORCHTUNE_MODELS", "read_torchtune"]

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
    size = positive_int(batch, problems)
    if size is not None:
        out.set("batch_size", Setting(size, batch.source))
    length = recipe.get("tokenizer.max_seq_len")
    if length is not None and length.value is not None:
        tokens = positive_int(length, problems)
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
