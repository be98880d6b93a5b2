"""Sharding and mixed precision as DeepSpeed, accelerate and FSDP configs set them.

- DeepSpeed JSON (deepspeedai/DeepSpeed ``deepspeed/runtime/zero/config.py``
  ``DeepSpeedZeroConfig``, ``offload_config.py``): ``zero_optimization.stage`` (0-3; the legacy
  ``true`` is stage 1), ``offload_optimizer.device`` and ``offload_param.device`` (``cpu``,
  ``nvme``, ``none``; the deprecated ``cpu_offload`` and ``cpu_offload_param`` switches),
  ``bf16.enabled``/``fp16.enabled`` (``auto``: the Trainer's flags, transformers
  ``integrations/deepspeed.py``), ``train_micro_batch_size_per_gpu``. Bucket sizes other than
  ``auto`` are read and reported as not priced.
- accelerate (huggingface/accelerate ``commands/launch.py`` ``_validate_launch_command`` and
  ``commands/config/config_args.py`` ``ClusterConfig``): a flag on the command line wins over
  the config file (``--config_file``, else a default file the service cannot see), which wins
  over accelerate's defaults: ``distributed_type`` (``MULTI_GPU``, ``DEEPSPEED``, ``FSDP``),
  ``mixed_precision``, ``num_processes`` (all machines together), ``num_machines``,
  ``deepspeed_config`` (``zero_stage``, default 2 in ``DeepSpeedPlugin``;
  ``offload_optimizer_device``, ``offload_param_device``, ``deepspeed_config_file``) and
  ``fsdp_config`` (``fsdp_version``, default 1 in ``FullyShardedDataParallelPlugin``;
  ``fsdp_sharding_strategy``/``fsdp_reshard_after_forward``, ``fsdp_offload_params``,
  ``fsdp_activation_checkpointing``).
- transformers ``TrainingArguments.fsdp``/``fsdp_config`` (5.24 ``_process_fsdp_args``,
  ``_apply_legacy_fsdp_to_config``): ``fsdp_``-prefixed keys lose the prefix, ``version``
  defaults to 2, ``full_shard``/``shard_grad_op`` set ``reshard_after_forward``, ``offload``
  sets ``cpu_offload``.

FSDP in the estimate (``service/estimator/training/sharding.py``): FSDP2 that reshards after
forward is ``fsdp2`` at stage 3; FSDP1 ``FULL_SHARD`` is ZeRO stage 3 and ``SHARD_GRAD_OP`` (or
FSDP2 without resharding) stage 2, as that module states; ``HYBRID_SHARD`` shards within a
node only; CPU offload moves parameters, gradients and optimizer states to the host.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from service.workloads.sources import ReadProblem, Sourced
from service.workloads.training.files import ConfigFiles, parse_document
from service.workloads.training.settings import Collected, ConfigUse, Setting, whole_number

__all__ = [
    "accelerate_settings",
    "deepspeed_settings",
    "fsdp_settings",
    "hf_fsdp_settings",
    "truthy",
    "unknown_sharding",
]

_TRUE = frozenset({"true", "yes", "1", "t", "y", "on"})


def truthy(value: object) -> bool:
    """A config value read as a boolean (YAML booleans, ``"true"``, ``1``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return str(value).strip().lower() in _TRUE


def unknown_sharding(out: Collected, what: str, source: str, *, why: str = "") -> None:
    """Sharding the service cannot read (a config the request does not carry, a distributed
    type it does not model): priced unsharded (the most a GPU could hold), with ZeRO-3 and
    full CPU offload as the floor (the least)."""
    why = why or "is not in the request"
    note = f"{what} {why}: priced without sharding or offload"
    out.set("zero_stage", Setting.unpriced(0, source, note, 3))
    out.set("offload_optimizer", Setting.unpriced(False, source, note, True))
    out.set("offload_parameters", Setting.unpriced(False, source, note, True))
    out.set("sharding_implementation", Setting("deepspeed", source))
    out.note(note)


def _load(
    ref: str,
    named_at: str,
    role: str,
    files: ConfigFiles,
    working_dir: str | None,
    out: Collected,
    problems: list[ReadProblem],
) -> tuple[Mapping[str, object], str] | None:
    """A named config file's mapping and its label for sources; None when it is not carried
    (recorded as unknown) or cannot be parsed (a problem)."""
    text = ref.strip()
    if text.startswith("{"):
        try:
            inline = json.loads(text)
        except ValueError:
            problems.append(ReadProblem(named_at, f"the inline {role} JSON cannot be parsed"))
            return None
        if isinstance(inline, dict):
            out.configs.append(ConfigUse("(inline JSON)", named_at, role, named_at))
            return inline, f"{named_at} (inline)"
    found = files.find(text, working_dir)
    if found is None:
        out.configs.append(ConfigUse(text, named_at, role))
        return None
    out.configs.append(ConfigUse(text, named_at, role, found.source))
    if found.matched_by_name:
        out.note(f"{text} ({named_at}) matched the carried file {found.path} by its name")
    doc = parse_document(found, named_at)
    if isinstance(doc, ReadProblem):
        problems.append(doc)
        return None
    return doc, text


def _device(block: object) -> str | None:
    if isinstance(block, Mapping):
        device = block.get("device")
        return str(device).lower() if device is not None else "none"
    return None


def deepspeed_settings(
    ref: str,
    named_at: str,
    files: ConfigFiles,
    working_dir: str | None,
    out: Collected,
    problems: list[ReadProblem],
) -> bool:
    """Read a DeepSpeed config (path or inline JSON) into the sharding fields; False when it
    is not carried (then the sharding is unknown)."""
    loaded = _load(ref, named_at, "deepspeed", files, working_dir, out, problems)
    if loaded is None:
        unknown_sharding(out, f"DeepSpeed config {ref}", named_at)
        return False
    doc, label = loaded
    zero = doc.get("zero_optimization", {})
    stage: object = 0
    where = f"{label} zero_optimization.stage"
    if isinstance(zero, bool):
        stage, where = (1 if zero else 0), f"{label} zero_optimization"
    elif isinstance(zero, Mapping):
        stage = zero.get("stage", 0)
    if isinstance(stage, bool) or not isinstance(stage, int) or stage not in (0, 1, 2, 3):
        problems.append(
            ReadProblem(where, f"ZeRO stage {stage!r} is not one of 0, 1, 2, 3", "set 0-3")
        )
        return True
    out.read("zero_optimization.stage", stage, where, target="zero_stage")
    out.set("zero_stage", Setting(stage, where))
    out.set("sharding_implementation", Setting("deepspeed", where))
    block = zero if isinstance(zero, Mapping) else {}
    for key, legacy, field in (
        ("offload_optimizer", "cpu_offload", "offload_optimizer"),
        ("offload_param", "cpu_offload_param", "offload_parameters"),
    ):
        device = _device(block.get(key))
        source = f"{label} zero_optimization.{key}.device"
        if device is None and legacy in block:
            device = "cpu" if truthy(block[legacy]) else "none"
            source = f"{label} zero_optimization.{legacy}"
        if device is None:
            out.set(field, Setting(False, f"default (DeepSpeed: no {key})"))
            continue
        offloaded = device in ("cpu", "nvme")
        note = "NVMe: the host figure counts what the NVMe holds" if device == "nvme" else ""
        out.read(f"zero_optimization.{key}.device", device, source, target=field, note=note)
        out.set(field, Setting(offloaded, source, note=note))
    for key in ("reduce_bucket_size", "stage3_prefetch_bucket_size", "allgather_bucket_size"):
        value = block.get(key)
        if value is not None and value != "auto":
            out.read(
                f"zero_optimization.{key}",
                str(value),
                f"{label} zero_optimization.{key}",
                priced=False,
                note="bucket sizes other than the Trainer's auto are not modelled",
            )
    for precision in ("bf16", "fp16"):
        enabled = doc.get(precision)
        if isinstance(enabled, Mapping) and "enabled" in enabled:
            flag = enabled["enabled"]
            source = f"{label} {precision}.enabled"
            if flag == "auto":
                out.read(f"{precision}.enabled", "auto", source, note="follows the Trainer's flags")
                continue
            # The HF Trainer refuses a value that differs from its own flag (transformers
            # integrations/deepspeed.py HfTrainerDeepSpeedConfig.fill_match).
            out.extra[f"deepspeed_{precision}"] = Sourced(truthy(flag), source)
            if truthy(flag):
                out.read(f"{precision}.enabled", True, source, target="precision")
                out.extra["mixed_precision"] = Sourced(precision, source)
    micro = doc.get("train_micro_batch_size_per_gpu")
    if isinstance(micro, int) and not isinstance(micro, bool):
        out.extra["micro_batch"] = Sourced(micro, f"{label} train_micro_batch_size_per_gpu")
    return True


def fsdp_settings(
    *,
    version: Sourced[int],
    strategy: Sourced[str],
    offload: Sourced[bool],
    activation_checkpointing: Sourced[bool] | None,
    out: Collected,
) -> None:
    """The sharding fields for an FSDP setup (``strategy``: an FSDP1 sharding strategy name,
    or ``true``/``false`` for FSDP2's ``reshard_after_forward``)."""
    word = strategy.value.strip().upper()
    numeric = {"1": "FULL_SHARD", "2": "SHARD_GRAD_OP", "3": "NO_SHARD", "4": "HYBRID_SHARD"}
    word = numeric.get(word, word)
    source = f"{strategy.source}, fsdp version {version.value} ({version.source})"
    if version.value == 2:
        reshard = word in ("TRUE", "FULL_SHARD")
        if reshard:
            stage, implementation, note = 3, "fsdp2", ""
        else:
            stage, implementation = 2, "deepspeed"
            note = "FSDP2 without resharding after forward priced as ZeRO stage 2"
    else:
        table = {
            "FULL_SHARD": (3, "FSDP1 FULL_SHARD priced as ZeRO stage 3"),
            "SHARD_GRAD_OP": (2, "FSDP1 SHARD_GRAD_OP priced as ZeRO stage 2"),
            "NO_SHARD": (0, "FSDP1 NO_SHARD: replicated as DDP"),
            "HYBRID_SHARD": (3, "HYBRID_SHARD: ZeRO stage 3 within each node"),
            "HYBRID_SHARD_ZERO2": (2, "HYBRID_SHARD_ZERO2: ZeRO stage 2 within each node"),
        }
        if word not in table:
            out.set(
                "zero_stage",
                Setting.unpriced(0, source, f"FSDP sharding {strategy.value!r} is not known", 3),
            )
            return
        stage, note = table[word]
        implementation = "deepspeed"
        if word.startswith("HYBRID"):
            out.extra["shard_over"] = Sourced("node", strategy.source)
    out.read("fsdp sharding", strategy.value, strategy.source, target="zero_stage", note=note)
    out.set("zero_stage", Setting(stage, source, note=note))
    out.set("sharding_implementation", Setting(implementation, source))
    out.set("offload_optimizer", Setting(offload.value, offload.source))
    out.set("offload_parameters", Setting(offload.value and stage == 3, offload.source))
    if offload.value:
        out.read("fsdp offload_params", True, offload.source, target="offload_parameters")
    if activation_checkpointing is not None and activation_checkpointing.value:
        out.read(
            "fsdp activation_checkpointing",
            True,
            activation_checkpointing.source,
            target="gradient_checkpointing",
        )
        out.set(
            "gradient_checkpointing",
            Setting("full", activation_checkpointing.source, note="FSDP's own checkpointing"),
        )


def hf_fsdp_settings(
    fsdp: Sourced[object],
    fsdp_config: Sourced[object] | None,
    files: ConfigFiles,
    working_dir: str | None,
    out: Collected,
    problems: list[ReadProblem],
) -> None:
    """TrainingArguments' (and axolotl's) ``fsdp`` with its ``fsdp_config`` (path or mapping).

    ``fsdp_version`` defaults to 2 (transformers 5.24); axolotl passes its own version.
    """
    config: Mapping[str, object] = {}
    label = "fsdp_config"
    if fsdp_config is not None:
        raw = fsdp_config.value
        if isinstance(raw, Mapping):
            config, label = raw, fsdp_config.source
        elif isinstance(raw, str):
            loaded = _load(
                raw, fsdp_config.source, "fsdp_config", files, working_dir, out, problems
            )
            if loaded is None:
                unknown_sharding(out, f"FSDP config {raw}", fsdp_config.source)
                return
            config, label = loaded
    config = {(k[5:] if k.startswith("fsdp_") else k): v for k, v in config.items()}
    version_value = config.get("version", 2)
    version = Sourced(
        whole_number(version_value) or 2,
        f"{label} version" if "version" in config else "default (transformers: FSDP2)",
    )
    items = fsdp.value
    words: list[str] = []
    if isinstance(items, str):
        words = items.split()
    elif isinstance(items, list | tuple):
        words = [str(i) for i in items]
    strategy = Sourced("FULL_SHARD" if version.value == 1 else "true", "default (full_shard)")
    offload = Sourced(truthy(config.get("cpu_offload", False)), f"{label} cpu_offload")
    for word in words:
        lowered = word.lower()
        if lowered in ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2"):
            value = (
                lowered.upper()
                if version.value == 1
                else ("true" if lowered == "full_shard" else "false")
            )
            strategy = Sourced(value, fsdp.source)
        elif lowered == "offload":
            offload = Sourced(True, fsdp.source)
    for key in ("reshard_after_forward", "sharding_strategy"):
        if key in config:
            strategy = Sourced(str(config[key]), f"{label} {key}")
            break
    checkpointing = None
    if "activation_checkpointing" in config:
        checkpointing = Sourced(
            truthy(config["activation_checkpointing"]), f"{label} activation_checkpointing"
        )
    if "offload_params" in config:
        offload = Sourced(truthy(config["offload_params"]), f"{label} offload_params")
    fsdp_settings(
        version=version,
        strategy=strategy,
        offload=offload,
        activation_checkpointing=checkpointing,
        out=out,
    )


def accelerate_settings(
    flags: Mapping[str, Sourced[str]],
    config_ref: Sourced[str] | None,
    files: ConfigFiles,
    working_dir: str | None,
    out: Collected,
    problems: list[ReadProblem],
) -> None:
    """What ``accelerate launch`` sets: its flags (names without dashes) over its config file.

    Records ``processes``, ``machines`` and ``mixed_precision`` in ``out.extra`` and the
    sharding fields in ``out.settings``.
    """
    config: Mapping[str, object] = {}
    label = ""
    if config_ref is not None:
        loaded = _load(
            config_ref.value, config_ref.source, "accelerate", files, working_dir, out, problems
        )
        if loaded is None:
            unknown_sharding(out, f"accelerate config {config_ref.value}", config_ref.source)
            out.extra["mixed_precision_unknown"] = Sourced(True, config_ref.source)
        else:
            config, label = loaded
    else:
        out.note(
            "no --config_file: accelerate reads its default config file if the image has one, "
            "which the service cannot see; accelerate's defaults are assumed"
        )

    def pick(flag: str, key: str, section: str | None = None) -> Sourced[object] | None:
        if flag in flags:
            return Sourced(flags[flag].value, flags[flag].source)
        holder = config.get(section) if section else config
        if isinstance(holder, Mapping) and key in holder:
            path = f"{section}.{key}" if section else key
            return Sourced(holder[key], f"{label} {path}")
        return None

    for flag, key, name in (
        ("num_processes", "num_processes", "processes"),
        ("num_machines", "num_machines", "machines"),
    ):
        found = pick(flag, key)
        count = whole_number(found.value, at_most=1 << 20) if found is not None else None
        if found is not None and count:
            out.extra[name] = Sourced(count, found.source)
            out.read(key, count, found.source, target="gpu_count")
    mixed = pick("mixed_precision", "mixed_precision")
    if mixed is not None:
        word = str(mixed.value).lower()
        priced = word in ("no", "bf16", "fp16")
        note = "" if priced else f"mixed precision {word!r} is not modelled"
        out.read(
            "mixed_precision", word, mixed.source, target="precision", priced=priced, note=note
        )
        out.extra["mixed_precision"] = Sourced(word if priced else "bf16", mixed.source)
    kind: Sourced[object] | None = None
    for flag, name in (
        ("use_deepspeed", "DEEPSPEED"),
        ("use_fsdp", "FSDP"),
        ("multi_gpu", "MULTI_GPU"),
    ):
        if flag in flags:
            kind = Sourced(name, flags[flag].source)
    if kind is None and "distributed_type" in config:
        kind = Sourced(str(config["distributed_type"]).upper(), f"{label} distributed_type")
    if kind is None:
        return
    out.read("distributed_type", str(kind.value), kind.source)
    if kind.value == "DEEPSPEED":
        file_ref = pick("deepspeed_config_file", "deepspeed_config_file", "deepspeed_config")
        if file_ref is not None and str(file_ref.value) not in ("", "none"):
            deepspeed_settings(
                str(file_ref.value), file_ref.source, files, working_dir, out, problems
            )
            return
        stage = pick("zero_stage", "zero_stage", "deepspeed_config")
        stage_value = whole_number(stage.value) if stage is not None else 2
        if stage_value not in (0, 1, 2, 3):
            problems.append(
                ReadProblem(
                    stage.source if stage else "",
                    f"ZeRO stage {stage.value if stage else ''!r} is not 0-3",
                )
            )
            return
        stage_source = stage.source if stage is not None else "default (accelerate: ZeRO stage 2)"
        out.read("zero_stage", stage_value, stage_source, target="zero_stage")
        out.set("zero_stage", Setting(stage_value, stage_source))
        out.set("sharding_implementation", Setting("deepspeed", stage_source))
        for flag, field in (
            ("offload_optimizer_device", "offload_optimizer"),
            ("offload_param_device", "offload_parameters"),
        ):
            found = pick(flag, flag, "deepspeed_config")
            device = str(found.value).lower() if found is not None else "none"
            source = found.source if found is not None else "default (accelerate: none)"
            out.set(field, Setting(device in ("cpu", "nvme"), source))
            if found is not None:
                out.read(flag, device, source, target=field)
    elif kind.value == "FSDP":
        version = pick("fsdp_version", "fsdp_version", "fsdp_config")
        version_value = (whole_number(version.value) or 1) if version is not None else 1
        strategy = pick("fsdp_reshard_after_forward", "fsdp_reshard_after_forward", "fsdp_config")
        if strategy is None:
            strategy = pick("fsdp_sharding_strategy", "fsdp_sharding_strategy", "fsdp_config")
        offload = pick("fsdp_offload_params", "fsdp_offload_params", "fsdp_config")
        checkpointing = pick(
            "fsdp_activation_checkpointing", "fsdp_activation_checkpointing", "fsdp_config"
        )
        fsdp_settings(
            version=Sourced(
                version_value,
                version.source if version else "default (accelerate: FSDP1)",
            ),
            strategy=Sourced(
                str(strategy.value)
                if strategy
                else ("true" if version_value == 2 else "FULL_SHARD"),
                strategy.source if strategy else "default (accelerate: full shard)",
            ),
            offload=Sourced(
                truthy(offload.value) if offload else False,
                offload.source if offload else "default (accelerate: no offload)",
            ),
            activation_checkpointing=None
            if checkpointing is None
            else Sourced(truthy(checkpointing.value), checkpointing.source),
            out=out,
        )
    elif kind.value not in ("MULTI_GPU", "NO"):
        out.read(
            "distributed_type",
            str(kind.value),
            kind.source,
            priced=False,
            note=f"{kind.value} is not modelled",
        )
        unknown_sharding(out, f"distributed type {kind.value}", kind.source, why="is not modelled")
