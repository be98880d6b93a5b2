"""What the trainers' shared settings mean for the fine-tune estimate, as tables.

Every trainer read here runs Hugging Face transformers and peft underneath (torchtune aside),
so their optimizer names, attention implementations, model-loading dtypes and LoRA defaults
mean the same thing whichever front end names them. Sources, each read at the version cited:

- optimizers: transformers 5.24 ``training_args.py`` ``OptimizerNames`` and
  ``trainer_optimizer.py`` ``_OPTIMIZER_HANDLERS`` (``adamw_torch_fused`` is ``torch.optim.AdamW``
  with ``fused=True``; ``adafactor`` transformers' Adafactor with ``scale_parameter`` and
  ``relative_step`` off; the bitsandbytes names ``bitsandbytes.optim.AdamW`` with
  ``optim_bits=8`` and ``is_paged`` from the name).
- attention: transformers' ``attn_implementation`` (``None`` is SDPA where torch has it).
- precision: which dtype the trainable weights are held in follows the model's load dtype and
  the mixed-precision switch (transformers ``TrainingArguments.bf16``/``fp16`` run autocast
  over whatever the model holds). DeepSpeed keeps fp32 master weights for a bf16/fp16 run
  (``runtime/zero``, ``runtime/bf16_optimizer.py``), and accelerate's FSDP2 preparation upcasts
  trainable parameters to fp32 when mixed precision is on (accelerate ``utils/fsdp_utils.py``
  ``fsdp2_prepare_model``): a sharded mixed-precision job is ``bf16-mixed`` whatever it loads.
- LoRA targets left unset: peft picks per model type
  (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``, peft 0.21.2
  ``src/peft/utils/constants.py``; the decoder families it lists are copied below).
"""

from __future__ import annotations

from service.workloads.training.settings import ByModel, Setting, Value

__all__ = [
    "PEFT_DEFAULT_TARGETS",
    "attention_setting",
    "dtype_name",
    "optimizer_settings",
    "peft_default_targets",
    "precision_setting",
]


# Dtype words trainers accept (torch names, short names) -> the estimate's dtype names.
_DTYPES: dict[str, str] = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "torch.bfloat16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "torch.float16": "fp16",
    "float32": "fp32",
    "fp32": "fp32",
    "float": "fp32",
    "torch.float32": "fp32",
    "auto": "auto",
}


def dtype_name(word: object) -> str | None:
    """``bf16``, ``fp16``, ``fp32``, ``auto`` for a dtype word; None when not a dtype."""
    return _DTYPES.get(str(word).strip().lower()) if word is not None else None


# HF optimizer name -> (estimate optimizer, foreach, note). A name absent here is not priced.
_OPTIMIZERS: dict[str, tuple[str, bool]] = {
    "adamw_torch": ("adamw", True),
    "adamw_torch_fused": ("adamw", False),
    "adamw_bnb_8bit": ("adamw-8bit", False),
    "adamw_8bit": ("adamw-8bit", False),
    "paged_adamw_8bit": ("paged-adamw-8bit", False),
    "adafactor": ("adafactor", False),
    "sgd": ("sgd", True),
    "rmsprop": ("rmsprop", True),
}


def optimizer_settings(name: str, source: str) -> dict[str, Setting]:
    """``optimizer`` and ``optimizer_foreach`` for an HF optimizer name."""
    known = _OPTIMIZERS.get(name)
    if known is not None:
        optimizer, foreach = known
        return {
            "optimizer": Setting(optimizer, source),
            "optimizer_foreach": Setting(
                foreach, source, note="" if foreach else "fused or in-place update: no temporary"
            ),
        }
    note = f"optimizer {name!r} is not modelled: AdamW priced, plain SGD (no state) as its floor"
    return {
        "optimizer": Setting.unpriced("adamw", source, note, "sgd"),
        "optimizer_foreach": Setting(False, source),
    }


# attn_implementation -> the estimate's attention; absent: not priced.
_ATTENTION: dict[str, str] = {
    "flash_attention_2": "flash",
    "flash_attention_3": "flash",
    "kernels-community/flash-attn": "flash",
    "kernels-community/flash-attn3": "flash",
    "kernels-community/vllm-flash-attn3": "flash",
    "sdpa": "sdpa",
    "eager": "eager",
}


def attention_setting(name: str | None, source: str) -> Setting:
    """The estimate's ``attention`` for transformers' ``attn_implementation`` (None: SDPA)."""
    if name is None:
        return Setting("sdpa", source, note="transformers picks SDPA when none is named")
    found = _ATTENTION.get(name)
    if found is not None:
        return Setting(found, source)
    return Setting.unpriced(
        "sdpa", source, f"attention {name!r} is not modelled; SDPA priced", "flash"
    )


def precision_setting(
    mixed: str, load: str, sharded: bool, source: str, *, adapters: bool = False
) -> Setting:
    """The estimate's precision from the mixed-precision switch (``bf16``, ``fp16``, ``no``)
    and the model's load dtype (``fp32``, ``bf16``, ``fp16``, ``auto``).

    Autocast over fp32 weights, or a sharded run (DeepSpeed, FSDP2 keep fp32 masters), is
    ``bf16-mixed``/``fp16-mixed``; bf16 weights without fp32 masters are ``bf16`` (optimizer
    states follow the parameter dtype); fp32 without autocast is ``fp32``. With ``adapters``
    (LoRA) the trainable tensors are the adapters (fp32 whatever the base), so the switch alone
    decides: autocast on is ``-mixed``.
    """
    if mixed in ("bf16", "fp16"):
        if sharded or load == "fp32" or adapters:
            return Setting(f"{mixed}-mixed", source)
        if load == "bf16":
            return Setting("bf16", source, note="bf16 weights: autocast adds no copies")
        if load == "auto":
            return Setting(
                ByModel(
                    "dtype auto: the checkpoint's dtype decides",
                    lambda _type, dtype: _by_checkpoint(mixed, dtype),
                ),
                source,
            )
        return Setting.unpriced(
            f"{mixed}-mixed", source, "fp16 weights trained in place are not modelled", "bf16"
        )
    if load == "fp32":
        return Setting("fp32", source)
    if load == "bf16":
        return Setting("bf16", source)
    if load == "auto":
        return Setting(
            ByModel(
                "dtype auto: the checkpoint's dtype decides",
                lambda _type, dtype: "fp32" if dtype == "fp32" else _pure(dtype),
            ),
            source,
        )
    return Setting.unpriced(
        "bf16", source, "fp16 weights trained in place are not modelled", "bf16"
    )


def _by_checkpoint(mixed: str, dtype: str) -> Value:
    if dtype == "fp32":
        return f"{mixed}-mixed"
    return "bf16" if dtype == "bf16" else f"{mixed}-mixed"


def _pure(dtype: str) -> Value:
    if dtype == "bf16":
        return "bf16"
    raise ValueError(f"a {dtype} checkpoint trained without mixed precision is not modelled")


# peft 0.21.2 src/peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING,
# the decoder-only families of the estimator.
PEFT_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "v_proj"),
    "llama4": ("q_proj", "v_proj"),
    "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "qwen3": ("q_proj", "v_proj"),
    "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"),
    "gemma3_text": ("q_proj", "v_proj"),
    "phi": ("q_proj", "v_proj", "fc1", "fc2"),
    "stablelm": ("q_proj", "v_proj"),
    "falcon": ("query_key_value",),
    "gpt_neox": ("query_key_value",),
    "gpt2": ("c_attn",),
    "gptj": ("q_proj", "v_proj"),
    "opt": ("q_proj", "v_proj"),
}


def _peft_targets(model_type: str, _dtype: str) -> Value:
    found = PEFT_DEFAULT_TARGETS.get(model_type)
    if found is None:
        raise ValueError(
            f"peft has no default LoRA targets for model type {model_type!r}: the trainer "
            "fails until target modules are named"
        )
    return found


def peft_default_targets(source: str) -> Setting:
    """peft's per-model-type default ``target_modules`` (targets left unset)."""
    return Setting(ByModel("peft's default for the model type", _peft_targets), source)
