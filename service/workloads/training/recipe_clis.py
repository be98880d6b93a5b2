"""The recipe front ends: ``llamafactory-cli train``, ``axolotl train`` (and
``python -m axolotl.cli.train``), ``tune run``, each a YAML recipe with overrides.

- ``llamafactory-cli train <yaml> [key=value ...]`` (hiyouga/LLaMA-Factory
  ``src/llamafactory/launcher.py``, ``hparams/parser.py`` ``read_args``: OmegaConf dotlist
  overrides): ``torchrun`` over ``NPROC_PER_NODE`` (default: every visible GPU) × ``NNODES``.
- ``axolotl train <yaml> [--key value ...]`` (axolotl ``src/axolotl/cli/train.py``): accelerate
  over every visible GPU unless ``--launcher python``/``torchrun`` (launcher arguments after
  ``--``).
- ``tune run [torchrun flags] <recipe> --config <name|yaml> [key=value ...]`` (torchtune
  ``torchtune/_cli/run.py``).
"""

from __future__ import annotations

from service.workloads.shell import basename
from service.workloads.sources import ReadProblem, Sourced, Token
from service.workloads.training.axolotl import read_axolotl
from service.workloads.training.distributed import unknown_sharding
from service.workloads.training.files import parse_document
from service.workloads.training.launch_args import (
    ACCELERATE_SWITCHES,
    Context,
    accelerate,
    count,
    env_count,
    launcher_options,
    torchrun,
    training_command,
)
from service.workloads.training.llamafactory import read_llamafactory
from service.workloads.training.recipes import Recipe
from service.workloads.training.settings import ConfigUse, Launch, TrainingCommand
from service.workloads.training.torchtune import read_torchtune

__all__ = ["axolotl_train", "lf_launch", "llamafactory_train", "tune_run"]


def lf_launch(head: Token, ctx: Context) -> Launch:
    nproc = count(env_count("NPROC_PER_NODE", ctx), ctx) or Sourced(
        None, "default (LLaMA-Factory: every visible GPU)"
    )
    nodes = count(env_count("NNODES", ctx), ctx)
    return Launch(
        "llamafactory-cli (torchrun)",
        head.source,
        nproc,
        Sourced(nodes.value or 1, nodes.source) if nodes else Sourced(1, "default (NNODES 1)"),
    )


def _recipe(
    path: Token, overrides: list[Token], ctx: Context, role: str, dashed: bool = False
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


def llamafactory_train(
    where: Token, rest: list[Token], ctx: Context, launch: Launch
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    """LLaMA-Factory with a recipe file first (the caller reads bare flags as HF arguments)."""
    recipe = _recipe(rest[0], rest[1:], ctx, "LLaMA-Factory recipe")
    if recipe is None:
        return _unknown_recipe("llamafactory", "llamafactory-cli train", where, launch, ctx)
    model = read_llamafactory(recipe, ctx.out, ctx.files, ctx.working_dir, ctx.problems)
    return training_command("llamafactory", "llamafactory-cli train", where, launch, model, ctx)


def axolotl_train(
    where: Token, rest: list[Token], ctx: Context, launch: Launch | None
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
            launch, _ = torchrun(where, after, ctx)
        else:
            flags, _ = launcher_options(after, ACCELERATE_SWITCHES)
            launch = accelerate(where, flags, ctx)
    recipe = _recipe(kept[0], kept[1:], ctx, "axolotl config", dashed=True)
    if recipe is None:
        return _unknown_recipe("axolotl", "axolotl train", where, launch, ctx)
    model = read_axolotl(recipe, ctx.out, ctx.files, ctx.working_dir, ctx.problems)
    return training_command("axolotl", "axolotl train", where, launch, model, ctx)


def _split_dashdash(words: list[Token]) -> tuple[list[Token], bool, list[Token]]:
    for i, word in enumerate(words):
        if word.text == "--":
            return words[:i], True, words[i + 1 :]
    return words, False, []


def tune_run(
    head: Token, rest: list[Token], ctx: Context
) -> tuple[TrainingCommand, list[ReadProblem]] | None:
    launch, target = torchrun(head, rest, ctx)
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
        return training_command("torchtune", "tune run", head, launch, None, ctx)
    recipe = _recipe(config, overrides, ctx, "torchtune config")
    if recipe is None:
        return _unknown_recipe("torchtune", "tune run", head, launch, ctx)
    model = read_torchtune(recipe, recipe_name, ctx.out, ctx.problems)
    single = ctx.out.extra.get("single_device")
    if single is not None and single.value:
        launch = Launch(
            "tune run", launch.source, Sourced(1, recipe_name.source), Sourced(1, "one node")
        )
    return training_command("torchtune", f"tune run {recipe_name.value}", head, launch, model, ctx)


def _unknown_recipe(
    trainer: str, entry: str, where: Token, launch: Launch, ctx: Context
) -> tuple[TrainingCommand, list[ReadProblem]]:
    unknown_sharding(ctx.out, f"the {trainer} recipe", where.source)
    return training_command(trainer, entry, where, launch, None, ctx)
