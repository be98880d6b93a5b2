"""What the launchers share: their options, process counts, and the command they hand back.

``torchrun`` (torch 2.13 ``distributed/run.py`` ``get_args_parser``: ``--nnodes`` ``N`` or
``MIN:MAX``, ``--nproc-per-node`` ``N`` or ``gpu``/``auto``, each also from ``PET_NNODES`` /
``PET_NPROC_PER_NODE`` through ``argparse_util.env``) and ``accelerate launch`` (its flags over
its config file, `distributed.accelerate_settings`) are read here; :mod:`.launchers` finds them
in a command line, :mod:`.recipe_clis` runs the recipe front ends through them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.workloads.commands import IgnoredArg
from service.workloads.models import ModelRef
from service.workloads.sources import ReadProblem, Sourced, Token
from service.workloads.training.distributed import accelerate_settings
from service.workloads.training.files import ConfigFiles
from service.workloads.training.settings import Collected, Launch, TrainingCommand, whole_number

__all__ = [
    "ACCELERATE_SWITCHES",
    "DEEPSPEED_SWITCHES",
    "TORCHRUN_SWITCHES",
    "Context",
    "accelerate",
    "count",
    "env_count",
    "is_flag",
    "launcher_options",
    "torchrun",
    "training_command",
]

# torchrun options that take no value (everything else starting with - takes one).
TORCHRUN_SWITCHES = frozenset(
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
ACCELERATE_SWITCHES = frozenset(
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
DEEPSPEED_SWITCHES = frozenset(
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


@dataclass
class Context:
    """What the readers of one command share: the files, the variables, what was found."""

    files: ConfigFiles
    working_dir: str | None
    env: Mapping[str, Sourced[str]]
    out: Collected
    problems: list[ReadProblem]


def is_flag(text: str) -> bool:
    return text.startswith("-") and len(text) > 1 and not text[1:].replace(".", "").isdigit()


def launcher_options(
    words: Sequence[Token], switches: frozenset[str]
) -> tuple[dict[str, Sourced[str]], int]:
    """A launcher's options before its target: name (no dashes, ``-`` as ``_``) -> value, and
    the index of the first word that is not an option."""
    found: dict[str, Sourced[str]] = {}
    i = 0
    while i < len(words) and is_flag(words[i].text):
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


def count(text: Sourced[str] | None, ctx: Context) -> Sourced[int | None] | None:
    """An integer process or node count; None inside for ``gpu``/``auto`` (every GPU)."""
    if text is None:
        return None
    word = text.value.strip()
    if ":" in word:
        low = word.split(":", 1)[0]
        ctx.out.note(f"elastic node count {word} ({text.source}): judged at its minimum, {low}")
        word = low
    number = whole_number(word, at_most=1 << 20)
    if number:
        return Sourced(number, text.source)
    if word in ("gpu", "auto"):
        return Sourced(None, f"{text.source} ({word}: one per visible GPU)")
    ctx.problems.append(ReadProblem(text.source, f"{word!r} is not a process or node count"))
    return None


def env_count(name: str, ctx: Context) -> Sourced[str] | None:
    found = ctx.env.get(name)
    return None if found is None else Sourced(found.value, f"env {name} ({found.source})")


def torchrun(head: Token, rest: list[Token], ctx: Context) -> tuple[Launch, list[Token]]:
    flags, start = launcher_options(rest, TORCHRUN_SWITCHES)
    nproc_text = flags.get("nproc_per_node") or env_count("PET_NPROC_PER_NODE", ctx)
    nodes_text = flags.get("nnodes") or env_count("PET_NNODES", ctx)
    nproc = count(nproc_text, ctx) or Sourced(1, "default (torchrun: 1 per node)")
    nodes = count(nodes_text, ctx)
    launch = Launch(
        "torchrun",
        head.source,
        nproc,
        Sourced(nodes.value or 1, nodes.source) if nodes else Sourced(1, "default (torchrun: 1)"),
    )
    target = rest[start:]
    if "module" in flags or "m" in flags:
        # `torchrun -m pkg.mod`: launcher_options stopped after -m; the module is next.
        return launch, [Token("-m", "torchrun -m"), *target]
    return launch, target


def accelerate(head: Token, flags: dict[str, Sourced[str]], ctx: Context) -> Launch:
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


def training_command(
    trainer: str,
    entry: str,
    where: Token,
    launch: Launch,
    model: ModelRef | None,
    ctx: Context,
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
