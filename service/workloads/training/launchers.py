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

from service.workloads.shell import SimpleCommand, basename, simple_commands
from service.workloads.sources import ReadProblem, Sourced, Token, WorkloadError
from service.workloads.training.files import ConfigFiles, parse_document
from service.workloads.training.hf_arguments import HfArgs, config_values, parse_hf_args
from service.workloads.training.hf_trainer import read_hf_trainer
from service.workloads.training.launch_args import (
    ACCELERATE_SWITCHES,
    DEEPSPEED_SWITCHES,
    Context,
    accelerate,
    count,
    env_count,
    launcher_options,
    torchrun,
    training_command,
)
from service.workloads.training.recipe_clis import (
    axolotl_train,
    lf_launch,
    llamafactory_train,
    tune_run,
)
from service.workloads.training.settings import (
    Collected,
    ConfigUse,
    Launch,
    TrainingCommand,
    whole_number,
)

__all__ = ["find_training_command"]

_PYTHON = ("python", "python3")
# Serving engines' packages: their modules take flags (``--dtype``) a trainer also takes.
_SERVING_PACKAGES = frozenset({"vllm", "sglang"})
# Flags that make an unknown script a Hugging Face trainer (a serving or other script may take
# ``--dtype`` or ``--bf16`` too).
_TRAINER_EVIDENCE = frozenset(
    {
        "model_name_or_path",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "gradient_checkpointing",
        "deepspeed",
        "fsdp",
        "optim",
        "use_peft",
        "lora_r",
    }
)
_TRL_COMMANDS = frozenset({"sft", "dpo", "grpo", "kto", "reward", "rloo"})
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
    ctx = Context(files, working_dir, command.env, Collected(), [])
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
        launch, rest = torchrun(head, rest, ctx)
        return _target(launch, rest, ctx)
    if (
        program == "accelerate" and rest and rest[0].text == "launch"
    ) or python_module == "accelerate.commands.launch":
        body = rest[1:] if program == "accelerate" else rest
        flags, start = launcher_options(body, ACCELERATE_SWITCHES)
        launch = accelerate(head, flags, ctx)
        return _target(launch, body[start:], ctx, module="module" in flags or "m" in flags)
    if program == "deepspeed":
        flags, start = launcher_options(rest, DEEPSPEED_SWITCHES)
        nproc = count(flags.get("num_gpus"), ctx) or Sourced(None, "default (deepspeed: every GPU)")
        nodes = count(flags.get("num_nodes"), ctx)
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
        return _llamafactory(head, rest[1:], ctx, lf_launch(head, ctx))
    if program == "axolotl" and rest and rest[0].text == "train":
        return axolotl_train(head, rest[1:], ctx, None)
    if program == "tune" and rest and rest[0].text == "run":
        return tune_run(head, rest[1:], ctx)
    if python_module is not None:
        return _module(launch, python_module, words[2], rest, ctx)
    if program.startswith(_PYTHON) and len(words) > 1 and words[1].text.endswith(".py"):
        world = env_count("WORLD_SIZE", ctx)
        ranks = whole_number(world.value, at_most=1 << 20) if world is not None else None
        if world is not None and ranks is not None and ranks > 1:
            # One process per pod, WORLD_SIZE of them (the PyTorchJob operator's variable).
            launch = Launch(
                "python",
                head.source,
                launch.nproc_per_node,
                Sourced(ranks, world.source),
            )
        return _script(launch, words[1], words[2:], ctx)
    return None


def _target(
    launch: Launch, rest: list[Token], ctx: Context, *, module: bool = False
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
    launch: Launch, module: str, where: Token, rest: list[Token], ctx: Context
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    if module.split(".", 1)[0] in _SERVING_PACKAGES:
        return None
    if module in ("axolotl.cli.train",):
        return axolotl_train(where, rest, ctx, launch)
    if module in ("llamafactory.cli", "llamafactory.launcher") and rest and rest[0].text == "train":
        return _llamafactory(where, rest[1:], ctx, launch)
    if module.startswith("trl.scripts."):
        return _hf(launch, where, rest, ctx, trl=True, entry=f"-m {module}")
    return _hf(launch, where, rest, ctx, trl=False, entry=f"-m {module}", need_flags=True)


def _script(
    launch: Launch, script: Token, rest: list[Token], ctx: Context
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    first = rest[0].text if rest else ""
    lf_script = "llamafactory" in script.text.lower() or script.text.endswith("src/train.py")
    if basename(script.text) == "train.py" and lf_script and first.endswith((".yaml", ".yml")):
        return llamafactory_train(script, rest, ctx, launch)
    trl = "trl/scripts/" in script.text
    return _hf(launch, script, rest, ctx, trl=trl, entry=script.text, need_flags=not trl)


def _llamafactory(
    where: Token, rest: list[Token], ctx: Context, launch: Launch
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    """``llamafactory-cli train``: a recipe file first, or its HF arguments as flags."""
    if rest and rest[0].text.endswith((".yaml", ".yml", ".json")):
        return llamafactory_train(where, rest, ctx, launch)
    return _hf(launch, where, rest, ctx, trl=False, entry="llamafactory-cli train")


def _hf(
    launch: Launch,
    where: Token,
    rest: list[Token],
    ctx: Context,
    *,
    trl: bool,
    entry: str,
    need_flags: bool = False,
    trl_command: str | None = None,
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    args = parse_hf_args(rest)
    if isinstance(args, ReadProblem):
        return training_command(
            "trl" if trl else "transformers", entry, where, launch, None, ctx, problem=args
        )
    if need_flags and not _TRAINER_EVIDENCE & set(args.values):
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
    return training_command(
        "trl" if trl else "transformers", entry, where, launch, model, ctx, ignored=ignored
    )


def _trl(
    head: Token, sub: Token, rest: list[Token], ctx: Context
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
            if flag in ACCELERATE_SWITCHES or flag in (
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
    launch = accelerate(head, launch_flags, ctx)
    return _hf(
        launch, sub, script_words, ctx, trl=True, entry=f"trl {sub.text}", trl_command=sub.text
    )
