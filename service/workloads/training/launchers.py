"""Find a trainer in a command line: the launcher, its process count, and the trainer's reader.

Launchers, read from their argument definitions:

- ``torchrun`` / ``python -m torch.distributed.run`` (torch 2.13 ``distributed/run.py``
  ``get_args_parser``): ``--nnodes`` (``N`` or ``MIN:MAX``), ``--nproc-per-node`` (``N``,
  ``gpu``/``auto``: one per visible GPU; default 1), both also from ``PET_NNODES`` /
  ``PET_NPROC_PER_NODE`` (``argparse_util.env``: what the Kubeflow operators set), then the
  script (or ``-m module``) and its arguments.
- ``accelerate launch`` (accelerate ``commands/launch.py``): its flags, then the script;
  processes and sharding per `distributed.accelerate_settings`.
- ``deepspeed`` (DeepSpeed ``launcher/runner.py``): ``--num_gpus`` (default every visible
  GPU) and ``--num_nodes``.
- ``trl <sft|dpo|...>`` (``trl/cli/commands/training.py``): the script's flags, the rest to
  ``accelerate launch`` (``--accelerate_config NAME`` names a config bundled with TRL).
- ``llamafactory-cli train <yaml> [key=value ...]`` (``src/llamafactory/launcher.py``):
  ``torchrun`` over ``NPROC_PER_NODE`` (default: every visible GPU) × ``NNODES`` processes.
- ``axolotl train <yaml> [--key value ...]`` (``src/axolotl/cli/train.py``): accelerate over
  every visible GPU unless ``--launcher python``; ``python -m axolotl.cli.train <yaml>`` under
  any launcher.
- ``tune run [torchrun flags] <recipe> --config <name|yaml> [key=value ...]``.
- ``python <script> [flags]`` with Hugging Face ``TrainingArguments`` flags.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.workloads.commands import IgnoredArg
from service.workloads.models import ModelRef
from service.workloads.shell import SimpleCommand, basename, simple_commands
from service.workloads.sources import ReadProblem, Sourced, Token, WorkloadError
from service.workloads.training.distributed import accelerate_settings, unknown_sharding
from service.workloads.training.files import ConfigFiles, parse_document
from service.workloads.training.hf_arguments import HfArgs, config_values, parse_hf_args
from service.workloads.training.hf_trainer import read_hf_trainer
from service.workloads.training.recipes import (
    Recipe,
    read_axolotl,
    read_llamafactory,
    read_torchtune,
)
from service.workloads.training.settings import Collected, ConfigUse, Launch, TrainingCommand

__all__ = ["find_training_command"]

_PYTHON = ("python", "python3")
_TRL_COMMANDS = frozenset({"sft", "dpo", "grpo", "kto", "reward", "rloo"})
# torchrun options that take no value (everything else starting with - takes one).
_TORCHRUN_SWITCHES = frozenset(
    {
        "--standalone",
        "-m",
        "--module",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--virtual-local-rank",
        "--virtual_local_rank",
    }
)
_ACCELERATE_SWITCHES = frozenset(
    {
        "--multi_gpu",
        "--use_deepspeed",
        "--use_fsdp",
        "--cpu",
        "--tpu",
        "-m",
        "--module",
        "--no_python",
        "-q",
        "--quiet",
        "--debug",
        "--same_network",
        "--use_megatron_lm",
        "--use_parallelism_config",
        "--enable_cpu_affinity",
        "--dynamo_use_fullgraph",
        "--dynamo_use_dynamic",
        "--downcast_bf16",
        "--tpu_use_cluster",
        "--tpu_use_sudo",
        "--zero3_save_16bit_model",
        "--vm",
    }
)
_DEEPSPEED_SWITCHES = frozenset(
    {
        "--module",
        "--no_python",
        "--no_local_rank",
        "--force_multi",
        "--save_pid",
        "--enable_each_rank_log",
        "--bind_cores_to_rank",
        "--autotuning",
        "--elastic_training",
    }
)
# TRL's bundled accelerate configs (huggingface/trl trl/accelerate_configs/*.yaml): the keys
# that matter here.
_TRL_CONFIGS: dict[str, dict[str, object]] = {
    "single_gpu": {"distributed_type": "NO", "mixed_precision": "bf16", "num_processes": 8},
    "multi_gpu": {"distributed_type": "MULTI_GPU", "mixed_precision": "bf16", "num_processes": 8},
    "zero1": {
        "distributed_type": "DEEPSPEED",
        "deepspeed_config": {"zero_stage": 1},
        "mixed_precision": "bf16",
        "num_processes": 8,
    },
    "zero2": {
        "distributed_type": "DEEPSPEED",
        "mixed_precision": "bf16",
        "num_processes": 8,
        "deepspeed_config": {
            "zero_stage": 2,
            "offload_optimizer_device": "none",
            "offload_param_device": "none",
        },
    },
    "zero3": {
        "distributed_type": "DEEPSPEED",
        "mixed_precision": "bf16",
        "num_processes": 8,
        "deepspeed_config": {
            "zero_stage": 3,
            "offload_optimizer_device": "none",
            "offload_param_device": "none",
        },
    },
    "fsdp1": {
        "distributed_type": "FSDP",
        "mixed_precision": "bf16",
        "num_processes": 8,
        "fsdp_config": {
            "fsdp_version": 1,
            "fsdp_offload_params": False,
            "fsdp_reshard_after_forward": "FULL_SHARD",
        },
    },
    "fsdp2": {
        "distributed_type": "FSDP",
        "mixed_precision": "bf16",
        "num_processes": 8,
        "fsdp_config": {
            "fsdp_version": 2,
            "fsdp_offload_params": False,
            "fsdp_reshard_after_forward": True,
        },
    },
}


@dataclass
class _Context:
    files: ConfigFiles
    working_dir: str | None
    env: Mapping[str, Sourced[str]]
    out: Collected
    problems: list[ReadProblem]


def _is_flag(text: str) -> bool:
    return text.startswith("-") and len(text) > 1 and not text[1:].replace(".", "").isdigit()


def _options(
    words: Sequence[Token], switches: frozenset[str]
) -> tuple[dict[str, Sourced[str]], int]:
    """A launcher's options before its target: name (no dashes, ``-`` as ``_``) -> value, and
    the index of the first word that is not an option."""
    found: dict[str, Sourced[str]] = {}
    i = 0
    while i < len(words) and _is_flag(words[i].text):
        flag, has_inline, inline = words[i].text.partition("=")
        name = flag.lstrip("-").replace("-", "_")
        if flag in switches or has_inline:
            found[name] = Sourced(inline if has_inline else "true", words[i].source)
            i += 1
            if flag in ("-m", "--module"):
                break
            continue
        if i + 1 < len(words) and not words[i + 1].text.endswith(".py"):
            found[name] = Sourced(words[i + 1].text, words[i + 1].source)
            i += 2
        else:
            found[name] = Sourced("true", words[i].source)
            i += 1
    return found, i


def _count(text: Sourced[str] | None, ctx: _Context) -> Sourced[int | None] | None:
    """An integer process or node count; None inside for ``gpu``/``auto`` (every GPU)."""
    if text is None:
        return None
    word = text.value.strip()
    if ":" in word:
        low = word.split(":", 1)[0]
        ctx.out.note(f"elastic node count {word} ({text.source}): judged at its minimum, {low}")
        word = low
    if word.isdigit() and int(word) > 0:
        return Sourced(int(word), text.source)
    if word in ("gpu", "auto"):
        return Sourced(None, f"{text.source} ({word}: one per visible GPU)")
    ctx.problems.append(ReadProblem(text.source, f"{word!r} is not a process or node count"))
    return None


def _env_count(name: str, ctx: _Context) -> Sourced[str] | None:
    found = ctx.env.get(name)
    return None if found is None else Sourced(found.value, f"env {name} ({found.source})")


def find_training_command(
    words: Sequence[Token],
    env: Mapping[str, Sourced[str]] | None,
    files: ConfigFiles,
    working_dir: str | None = None,
) -> tuple[TrainingCommand | None, list[ReadProblem]]:
    """The first trainer invocation in a word list (wrappers and scripts unwrapped), or None,
    with the problems of reading it. Raises `WorkloadError` for a script that cannot be split."""
    try:
        commands = simple_commands(words, env)
    except ValueError as exc:
        source = words[-1].source if words else "command"
        raise WorkloadError(source, f"the shell command cannot be split: {exc}") from None
    for command in commands:
        found = _read(command, files, working_dir)
        if found is not None:
            return found
    return None, []


def _read(
    command: SimpleCommand, files: ConfigFiles, working_dir: str | None
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    words = list(command.words)
    if words and basename(words[0].text) == "uv" and len(words) > 2 and words[1].text == "run":
        words = words[2:]
    ctx = _Context(files, working_dir, command.env, Collected(), [])
    if not words:
        return None
    head = words[0]
    program = basename(head.text)
    launch = Launch("python", head.source, Sourced(1, "one process"), Sourced(1, "one node"))
    rest = words[1:]
    python_module = None
    if program.startswith(_PYTHON) and len(words) > 2 and words[1].text == "-m":
        python_module, rest = words[2].text, words[3:]
    if program == "torchrun" or python_module in (
        "torch.distributed.run",
        "torch.distributed.launch",
    ):
        launch, rest = _torchrun(head, rest, ctx)
        return _target(launch, rest, ctx)
    if (
        program == "accelerate" and rest and rest[0].text == "launch"
    ) or python_module == "accelerate.commands.launch":
        body = rest[1:] if program == "accelerate" else rest
        flags, start = _options(body, _ACCELERATE_SWITCHES)
        launch = _accelerate(head, flags, ctx)
        return _target(launch, body[start:], ctx, module="module" in flags or "m" in flags)
    if program == "deepspeed":
        flags, start = _options(rest, _DEEPSPEED_SWITCHES)
        nproc = _count(flags.get("num_gpus"), ctx) or Sourced(
            None, "default (deepspeed: every GPU)"
        )
        nodes = _count(flags.get("num_nodes"), ctx)
        launch = Launch(
            "deepspeed",
            head.source,
            nproc,
            Sourced(nodes.value or 1, nodes.source)
            if nodes
            else Sourced(1, "default (deepspeed: one node)"),
        )
        return _target(launch, rest[start:], ctx, module="module" in flags)
    if program == "trl" and rest and rest[0].text in _TRL_COMMANDS:
        return _trl(head, rest[0], rest[1:], ctx)
    if program in ("llamafactory-cli", "lmf") and rest and rest[0].text == "train":
        return _llamafactory(head, rest[1:], ctx, _lf_launch(head, ctx))
    if program == "axolotl" and rest and rest[0].text == "train":
        return _axolotl(head, rest[1:], ctx, None)
    if program == "tune" and rest and rest[0].text == "run":
        return _torchtune(head, rest[1:], ctx)
    if python_module is not None:
        return _module(launch, python_module, words[2], rest, ctx)
    if program.startswith(_PYTHON) and len(words) > 1 and words[1].text.endswith(".py"):
        world = _env_count("WORLD_SIZE", ctx)
        if world is not None and world.value.isdigit() and int(world.value) > 1:
            # One process per pod, WORLD_SIZE of them (the PyTorchJob operator's variable).
            launch = Launch(
                "python",
                head.source,
                launch.nproc_per_node,
                Sourced(int(world.value), world.source),
            )
        return _script(launch, words[1], words[2:], ctx)
    return None


def _torchrun(head: Token, rest: list[Token], ctx: _Context) -> tuple[Launch, list[Token]]:
    flags, start = _options(rest, _TORCHRUN_SWITCHES)
    nproc_text = flags.get("nproc_per_node") or _env_count("PET_NPROC_PER_NODE", ctx)
    nodes_text = flags.get("nnodes") or _env_count("PET_NNODES", ctx)
    nproc = _count(nproc_text, ctx) or Sourced(1, "default (torchrun: 1 per node)")
    nodes = _count(nodes_text, ctx)
    launch = Launch(
        "torchrun",
        head.source,
        nproc,
        Sourced(nodes.value or 1, nodes.source) if nodes else Sourced(1, "default (torchrun: 1)"),
    )
    target = rest[start:]
    if "module" in flags or "m" in flags:
        # `torchrun -m pkg.mod`: _options stopped after -m; the module is next.
        return launch, [Token("-m", "torchrun -m"), *target]
    return launch, target


def _accelerate(head: Token, flags: dict[str, Sourced[str]], ctx: _Context) -> Launch:
    config = flags.pop("config_file", None)
    accelerate_settings(flags, config, ctx.files, ctx.working_dir, ctx.out, ctx.problems)
    processes = ctx.out.extra.get("processes")
    machines = ctx.out.extra.get("machines")
    nodes = int(machines.value) if machines is not None and isinstance(machines.value, int) else 1
    if processes is not None and isinstance(processes.value, int):
        per_node = max(processes.value // nodes, 1)
        nproc: Sourced[int | None] = Sourced(
            per_node, f"{processes.source}" + (f" / {nodes} machines" if nodes > 1 else "")
        )
    elif config is not None and "mixed_precision_unknown" in ctx.out.extra:
        nproc = Sourced(None, f"{config.source} (not in the request: every visible GPU assumed)")
    else:
        nproc = Sourced(None, "default (accelerate: every visible GPU)")
    return Launch(
        "accelerate launch",
        head.source,
        nproc,
        Sourced(nodes, machines.source if machines else "default (accelerate: 1 machine)"),
    )


def _target(
    launch: Launch, rest: list[Token], ctx: _Context, *, module: bool = False
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    """What a launcher runs: ``-m module`` or a script, with its arguments."""
    if rest and rest[0].text in ("-m", "--module"):
        rest, module = rest[1:], True
    if not rest:
        return None
    if module:
        return _module(launch, rest[0].text, rest[0], rest[1:], ctx)
    if basename(rest[0].text).startswith(_PYTHON) and len(rest) > 1:
        return _target(launch, rest[1:], ctx)
    return _script(launch, rest[0], rest[1:], ctx)


def _module(
    launch: Launch, module: str, where: Token, rest: list[Token], ctx: _Context
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    if module in ("axolotl.cli.train",):
        return _axolotl(where, rest, ctx, launch)
    if module in ("llamafactory.cli", "llamafactory.launcher") and rest and rest[0].text == "train":
        return _llamafactory(where, rest[1:], ctx, launch)
    if module.startswith("trl.scripts."):
        return _hf(launch, where, rest, ctx, trl=True, entry=f"-m {module}")
    return _hf(launch, where, rest, ctx, trl=False, entry=f"-m {module}", need_flags=True)


def _script(
    launch: Launch, script: Token, rest: list[Token], ctx: _Context
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    first = rest[0].text if rest else ""
    lf_script = "llamafactory" in script.text.lower() or script.text.endswith("src/train.py")
    if basename(script.text) == "train.py" and lf_script and first.endswith((".yaml", ".yml")):
        return _llamafactory(script, rest, ctx, launch)
    trl = "trl/scripts/" in script.text
    return _hf(launch, script, rest, ctx, trl=trl, entry=script.text, need_flags=not trl)


def _hf(
    launch: Launch,
    where: Token,
    rest: list[Token],
    ctx: _Context,
    *,
    trl: bool,
    entry: str,
    need_flags: bool = False,
    trl_command: str | None = None,
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    args = parse_hf_args(rest)
    if isinstance(args, ReadProblem):
        return _command(
            "trl" if trl else "transformers", entry, where, launch, None, ctx, problem=args
        )
    if need_flags and not args.values:
        return None
    values = dict(args.values)
    config = next((a for a in args.ignored if a.words[0] == "--config" and len(a.words) == 2), None)
    if trl and config is not None:
        found = ctx.files.find(config.words[1], ctx.working_dir)
        use = ConfigUse(
            config.words[1], config.source, "trl config", found.source if found else None
        )
        ctx.out.configs.append(use)
        if found is not None:
            doc = parse_document(found, config.source)
            if isinstance(doc, ReadProblem):
                ctx.problems.append(doc)
            else:
                values = {**config_values(doc, config.words[1]), **values}
        else:
            ctx.out.note(
                f"TRL config {config.words[1]} is not in the request: its keys are unknown"
            )
    if trl_command is not None and trl_command != "sft":
        ctx.out.read(
            "trl command",
            trl_command,
            where.source,
            priced=False,
            note=f"trl {trl_command} holds models or generations beyond one SFT step",
            lowers=False,
        )
    model = read_hf_trainer(
        HfArgs(values, args.ignored, args.rest),
        trl=trl,
        out=ctx.out,
        files=ctx.files,
        working_dir=ctx.working_dir,
        problems=ctx.problems,
    )
    ignored = tuple(a for a in args.ignored if a is not config)
    return _command(
        "trl" if trl else "transformers", entry, where, launch, model, ctx, ignored=ignored
    )


def _trl(
    head: Token, sub: Token, rest: list[Token], ctx: _Context
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    # Arguments no script dataclass takes go to `accelerate launch`.
    launch_flags: dict[str, Sourced[str]] = {}
    script_words: list[Token] = []
    i = 0
    accelerate_names = {
        "--num_processes",
        "--num_machines",
        "--mixed_precision",
        "--config_file",
        "--accelerate_config",
        "--zero_stage",
        "--use_deepspeed",
        "--use_fsdp",
        "--multi_gpu",
        "--gpu_ids",
        "--main_process_port",
    }
    while i < len(rest):
        flag, has_inline, inline = rest[i].text.partition("=")
        if flag in accelerate_names:
            if flag in _ACCELERATE_SWITCHES or flag in (
                "--use_deepspeed",
                "--use_fsdp",
                "--multi_gpu",
            ):
                launch_flags[flag[2:]] = Sourced("true", rest[i].source)
                i += 1
            elif has_inline:
                launch_flags[flag[2:]] = Sourced(inline, rest[i].source)
                i += 1
            elif i + 1 < len(rest):
                launch_flags[flag[2:]] = Sourced(rest[i + 1].text, rest[i + 1].source)
                i += 2
            else:
                i += 1
            continue
        script_words.append(rest[i])
        i += 1
    bundled = launch_flags.pop("accelerate_config", None)
    if bundled is not None and bundled.value in _TRL_CONFIGS:
        path = f"trl/accelerate_configs/{bundled.value}.yaml"
        ctx.files = ctx.files.with_files(
            {path: (json.dumps(_TRL_CONFIGS[bundled.value]), f"bundled with TRL ({path})")}
        )
        launch_flags["config_file"] = Sourced(path, bundled.source)
    elif bundled is not None:
        launch_flags["config_file"] = bundled
    launch = _accelerate(head, launch_flags, ctx)
    return _hf(
        launch, sub, script_words, ctx, trl=True, entry=f"trl {sub.text}", trl_command=sub.text
    )


def _lf_launch(head: Token, ctx: _Context) -> Launch:
    nproc = _count(_env_count("NPROC_PER_NODE", ctx), ctx) or Sourced(
        None, "default (LLaMA-Factory: every visible GPU)"
    )
    nodes = _count(_env_count("NNODES", ctx), ctx)
    return Launch(
        "llamafactory-cli (torchrun)",
        head.source,
        nproc,
        Sourced(nodes.value or 1, nodes.source) if nodes else Sourced(1, "default (NNODES 1)"),
    )


def _recipe(
    path: Token, overrides: list[Token], ctx: _Context, role: str, dashed: bool = False
) -> Recipe | None:
    found = ctx.files.find(path.text, ctx.working_dir)
    ctx.out.configs.append(ConfigUse(path.text, path.source, role, found.source if found else None))
    values: dict[str, Sourced[str]] = {}
    i = 0
    while i < len(overrides):
        word = overrides[i]
        if dashed and word.text.startswith("--"):
            key, has_inline, inline = word.text[2:].partition("=")
            if has_inline:
                values[key.replace("-", "_")] = Sourced(inline, word.source)
                i += 1
            elif i + 1 < len(overrides) and not overrides[i + 1].text.startswith("--"):
                values[key.replace("-", "_")] = Sourced(
                    overrides[i + 1].text, overrides[i + 1].source
                )
                i += 2
            else:
                values[key.replace("-", "_")] = Sourced("true", word.source)
                i += 1
            continue
        key, eq, value = word.text.partition("=")
        if eq:
            values[key.lstrip("-")] = Sourced(value, word.source)
        i += 1
    if found is None:
        ctx.out.note(
            f"{role} {path.text} ({path.source}) is not in the request: post it in `files`"
        )
        return Recipe({}, path.text, values) if values else None
    if found.matched_by_name:
        ctx.out.note(
            f"{path.text} ({path.source}) matched the carried file {found.path} by its name"
        )
    doc = parse_document(found, path.source)
    if isinstance(doc, ReadProblem):
        ctx.problems.append(doc)
        return None
    return Recipe(doc, path.text, values)


def _llamafactory(
    where: Token, rest: list[Token], ctx: _Context, launch: Launch
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    if not rest or not rest[0].text.endswith((".yaml", ".yml", ".json")):
        return _hf(launch, where, rest, ctx, trl=False, entry="llamafactory-cli train")
    recipe = _recipe(rest[0], rest[1:], ctx, "LLaMA-Factory recipe")
    if recipe is None:
        return _unknown_recipe("llamafactory", "llamafactory-cli train", where, launch, ctx)
    model = read_llamafactory(recipe, ctx.out, ctx.files, ctx.working_dir, ctx.problems)
    return _command("llamafactory", "llamafactory-cli train", where, launch, model, ctx)


def _axolotl(
    where: Token, rest: list[Token], ctx: _Context, launch: Launch | None
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    before, _, after = _split_dashdash(rest)
    kept: list[Token] = []
    launcher: Token | None = None
    i = 0
    while i < len(before):
        word = before[i]
        if word.text == "--launcher" and i + 1 < len(before):
            launcher, i = before[i + 1], i + 2
            continue
        if word.text.startswith("--launcher="):
            launcher = Token(word.text.split("=", 1)[1], word.source)
        else:
            kept.append(word)
        i += 1
    if not kept:
        return None
    if launch is None:
        if launcher is not None and launcher.text == "python":
            launch = Launch(
                "axolotl (python)",
                where.source,
                Sourced(1, launcher.source),
                Sourced(1, "one node"),
            )
        elif launcher is not None and launcher.text == "torchrun":
            launch, _ = _torchrun(where, after, ctx)
        else:
            flags, _ = _options(after, _ACCELERATE_SWITCHES)
            launch = _accelerate(where, flags, ctx)
    recipe = _recipe(kept[0], kept[1:], ctx, "axolotl config", dashed=True)
    if recipe is None:
        return _unknown_recipe("axolotl", "axolotl train", where, launch, ctx)
    model = read_axolotl(recipe, ctx.out, ctx.files, ctx.working_dir, ctx.problems)
    return _command("axolotl", "axolotl train", where, launch, model, ctx)


def _split_dashdash(words: list[Token]) -> tuple[list[Token], bool, list[Token]]:
    for i, word in enumerate(words):
        if word.text == "--":
            return words[:i], True, words[i + 1 :]
    return words, False, []


def _torchtune(
    head: Token, rest: list[Token], ctx: _Context
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    launch, target = _torchrun(head, rest, ctx)
    launch = Launch("tune run", launch.source, launch.nproc_per_node, launch.nnodes)
    if not target:
        return None
    recipe_name = Sourced(basename(target[0].text).removesuffix(".py"), target[0].source)
    args = target[1:]
    config: Token | None = None
    overrides: list[Token] = []
    i = 0
    while i < len(args):
        if args[i].text in ("--config", "-c") and i + 1 < len(args):
            config = args[i + 1]
            i += 2
            continue
        overrides.append(args[i])
        i += 1
    if config is None:
        ctx.problems.append(ReadProblem(target[0].source, "tune run needs --config"))
        return _command("torchtune", "tune run", head, launch, None, ctx)
    recipe = _recipe(config, overrides, ctx, "torchtune config")
    if recipe is None:
        return _unknown_recipe("torchtune", "tune run", head, launch, ctx)
    model = read_torchtune(recipe, recipe_name, ctx.out, ctx.problems)
    single = ctx.out.extra.get("single_device")
    if single is not None and single.value:
        launch = Launch(
            "tune run", launch.source, Sourced(1, recipe_name.source), Sourced(1, "one node")
        )
    return _command("torchtune", f"tune run {recipe_name.value}", head, launch, model, ctx)


def _unknown_recipe(
    trainer: str, entry: str, where: Token, launch: Launch, ctx: _Context
) -> tuple[TrainingCommand, list[ReadProblem]]:
    unknown_sharding(ctx.out, f"the {trainer} recipe", where.source)
    return _command(trainer, entry, where, launch, None, ctx)


def _command(
    trainer: str,
    entry: str,
    where: Token,
    launch: Launch,
    model: ModelRef | None,
    ctx: _Context,
    *,
    ignored: tuple[IgnoredArg, ...] = (),
    problem: ReadProblem | None = None,
) -> tuple[TrainingCommand, list[ReadProblem]]:
    if problem is not None:
        ctx.problems.append(problem)
    command = TrainingCommand(
        trainer=trainer,
        entrypoint=entry,
        entrypoint_source=where.source,
        launch=launch,
        model=model,
        settings=dict(ctx.out.settings),
        options=tuple(ctx.out.options),
        configs=tuple(ctx.out.configs),
        ignored_args=ignored,
        env=dict(ctx.env),
        notes=tuple(ctx.out.notes),
        extra=dict(ctx.out.extra),
    )
    return command, ctx.problems
