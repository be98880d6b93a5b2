"""What a training job is read into: the fine-tune estimate's fields, each with its source.

A trainer's command line and config files are read into `Setting`s keyed by the field of the
``POST /v1/estimate/finetune`` body they set (``batch_size``, ``lora.rank``, ``zero_stage``,
...; `FIELDS`), and into `OptionRead`s, one per key of the trainer's own that was read (its
name as the trainer spells it, the value, where it was, whether the estimate prices it). The
readers never compute memory: the plan (``service.scheduling.training_plan``) hands the fields
to the fine-tune estimator unchanged.

A setting the estimator cannot model as the trainer runs it is ``priced: false`` with a note.
Its ``floor`` is a value the estimator does model that needs no more memory than what the
trainer does (``MISSING`` when none is known): the scheduling layer denies a job only when it
does not fit even with every unpriced setting at its floor.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from service.workloads.commands import IgnoredArg
from service.workloads.models import ModelRef
from service.workloads.sources import Sourced

__all__ = [
    "FIELDS",
    "MISSING",
    "ByModel",
    "Collected",
    "ConfigUse",
    "Launch",
    "OptionRead",
    "Setting",
    "TrainingCommand",
    "Value",
    "whole_number",
]

Value = int | float | str | bool | tuple[str, ...] | None


@dataclass(frozen=True)
class ByModel:
    """A value the model decides (its config's ``model_type`` or its dtype), resolved by the
    plan once the model is known: ``resolve(model_type, dtype)`` gives the value, or raises
    ValueError saying why the trainer would fail."""

    describe: str
    resolve: Callable[[str, str], Value]


def whole_number(value: object, *, at_most: int = 10**9) -> int | None:
    """A non-negative integer written as an int or as ASCII digits (``"8"``), at most
    ``at_most``; None otherwise (``"auto"``, ``"²"``, a thousand digits, a bool)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= at_most else None
    text = str(value).strip()
    if not re.fullmatch(r"[0-9]{1,10}", text):
        return None
    number = int(text)
    return number if number <= at_most else None


class _Missing:
    """No modelled value bounds the trainer's behaviour from below."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()

#: The fine-tune body fields a trainer sets (``lora.rank`` is ``body["lora"]["rank"]``).
FIELDS: tuple[str, ...] = (
    "method",
    "lora.rank",
    "lora.target_modules",
    "trainable_layers",
    "weight_format",
    "precision",
    "optimizer",
    "optimizer_foreach",
    "batch_size",
    "sequence_length",
    "gradient_checkpointing",
    "attention",
    "loss_implementation",
    "kbit_preparation",
    "zero_stage",
    "sharding_implementation",
    "offload_optimizer",
    "offload_parameters",
    "tensor_parallel_size",
)


@dataclass(frozen=True)
class Setting:
    """One field of the fine-tune body as the trainer sets it.

    ``value`` is what the estimate uses. ``priced`` false: the trainer does something the
    estimator does not model exactly; ``floor`` is then a modelled value that needs no more
    memory (the estimate at the floor is a lower bound), or `MISSING`.
    """

    value: Value | ByModel
    source: str
    priced: bool = True
    note: str = ""
    floor: Value | _Missing = MISSING

    @staticmethod
    def unpriced(
        value: Value | ByModel, source: str, note: str, floor: Value | _Missing
    ) -> Setting:
        return Setting(value, source, False, note, floor)


@dataclass(frozen=True)
class OptionRead:
    """A key of the trainer's own (flag, config key) as read, and what the estimate does with
    it: ``target`` the body field it sets ("" when none), ``priced`` whether it is modelled;
    for one that is not, ``lowers`` whether the trainer may need less than the estimate says
    (false: the estimate can only be low, so a "does not fit" stands)."""

    name: str
    value: Value
    source: str
    priced: bool
    note: str = ""
    target: str = ""
    lowers: bool = True


@dataclass(frozen=True)
class ConfigUse:
    """A config file the job names: where it is named, and whether its text was read."""

    path: str
    named_at: str
    role: str
    """What the file is: ``deepspeed``, ``accelerate``, ``fsdp_config``, ``recipe``, ..."""
    read_from: str | None = None
    """Where its text came from (``files[...]``, a ConfigMap key); None: not in the request."""


@dataclass(frozen=True)
class Launch:
    """How many processes the launcher starts: per node, and nodes.

    ``nproc_per_node`` None means one per visible GPU (torchrun ``auto``/``gpu``, accelerate
    and LLaMA-Factory without a count): the plan resolves it from the pod's GPUs.
    """

    name: str
    source: str
    nproc_per_node: Sourced[int | None]
    nnodes: Sourced[int]


@dataclass(frozen=True)
class TrainingCommand:
    """A trainer invocation as read: trainer, model, the fine-tune fields and their sources."""

    trainer: str
    """``trl``, ``transformers``, ``llamafactory``, ``axolotl`` or ``torchtune``."""
    entrypoint: str
    entrypoint_source: str
    launch: Launch
    model: ModelRef | None
    settings: Mapping[str, Setting]
    options: tuple[OptionRead, ...] = ()
    configs: tuple[ConfigUse, ...] = ()
    ignored_args: tuple[IgnoredArg, ...] = ()
    env: Mapping[str, Sourced[str]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    extra: Mapping[str, Sourced[Value]] = field(default_factory=dict)
    """Facts that are no body field (`Collected.extra`): ``shard_over``, ``processes``,
    ``mixed_precision``, ``dataloader_num_workers``, ``dataloader_prefetch_factor``,
    ``dataloader_pin_memory`` (what sizes the host's pinned data-loader buffers)."""

    def setting(self, name: str) -> Setting | None:
        return self.settings.get(name)


@dataclass
class Collected:
    """What the readers of one job have found so far (later readers refine earlier ones)."""

    settings: dict[str, Setting] = field(default_factory=dict)
    options: list[OptionRead] = field(default_factory=list)
    configs: list[ConfigUse] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Sourced[Value]] = field(default_factory=dict)
    """Facts that are no body field: ``shard_over`` (``node`` for hybrid sharding),
    ``processes`` / ``machines`` (accelerate), ``mixed_precision`` (accelerate, DeepSpeed)."""

    def set(self, name: str, setting: Setting) -> None:
        self.settings[name] = setting

    def read(
        self,
        name: str,
        value: Value,
        source: str,
        *,
        target: str = "",
        priced: bool = True,
        note: str = "",
        lowers: bool = True,
    ) -> None:
        self.options.append(OptionRead(name, value, source, priced, note, target, lowers))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
