"""Which model names the service resolves: before the alias rules and with them.

The names are those the public start-up logs give for the model they ran
(``data/public_logs_{vllm,sglang,llamacpp}.csv``, column ``model``; a parenthetical note after
the name dropped, cells that only describe the model skipped) and those gathered in
``data/model_names_gathered.csv`` (issue 26's examples and ids from public launch commands,
each with its source). Each distinct name (any case) is resolved twice in the same run:

- *before*: only the exact routes the service had before the alias rules (a catalog id or
  alias, a catalog GGUF repository file);
- *after*: :func:`service.application.resolve.resolve_model`'s whole path (exact routes, then
  the alias rules). A name the rules recognise as a format the service does not price (MLX,
  NVFP4, a non-preset GGUF type) is counted apart: a 404 that says why.

``python -m bench.validate.model_resolution`` prints the table; ``make validate`` puts it in
docs/accuracy.md.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache

from bench.validate.paths import HERE
from service.application.resolve import resolve_model
from service.catalog.model_catalog import ModelCatalog, load_model_catalog
from service.estimator.errors import EstimatorError
from service.schemas.estimates import ModelSelector

DATA = HERE / "data"
LOGS = ("public_logs_vllm.csv", "public_logs_sglang.csv", "public_logs_llamacpp.csv")
GATHERED = DATA / "model_names_gathered.csv"


@dataclass(frozen=True)
class Outcome:
    name: str
    source: str
    before: bool
    after: str  # "catalog" | "catalog-gguf" | "rules" | "unpriced" | "unresolved"
    resolved_to: str
    detail: str

    @property
    def hub_id(self) -> bool:
        """A Hugging Face id or a GGUF file name, as opposed to a description."""
        return "/" in self.name or self.name.lower().endswith(".gguf")


def names() -> list[tuple[str, str]]:
    """(name, source) for every distinct name, in file order."""
    out: dict[str, tuple[str, str]] = {}
    for file in LOGS:
        with (DATA / file).open() as f:
            for row in csv.DictReader(f):
                cell = row["model"].strip()
                if not cell or cell.startswith("("):
                    continue
                name = re.sub(r"\s*\+.*$", "", re.sub(r"\s*\(.*\)\s*$", "", cell)).strip()
                if name:
                    out.setdefault(name.lower(), (name, row["row_id"]))
    with GATHERED.open() as f:
        for row in csv.DictReader(f):
            source = row["source_url"] or row["note"]
            out.setdefault(row["name"].lower(), (row["name"], source))
    return list(out.values())


@lru_cache(maxsize=1)
def _catalog() -> ModelCatalog:
    return load_model_catalog()


def _exact(catalog: ModelCatalog, name: str) -> bool:
    try:
        return name in catalog or catalog.gguf_file(name) is not None
    except EstimatorError:
        return False


def outcome(name: str, source: str) -> Outcome:
    catalog = _catalog()
    before = _exact(catalog, name)
    try:
        model = resolve_model(ModelSelector(model=name), catalog)
    except EstimatorError as exc:
        unpriced = "not priced" in exc.detail or "not a modelled" in exc.detail
        kind = "unpriced" if unpriced else "unresolved"
        return Outcome(name, source, before, kind, "", exc.detail)
    r = model.resolution
    assert r is not None
    return Outcome(name, source, before, r.route, r.resolved_to, r.format or "")


def results() -> list[Outcome]:
    return [outcome(name, source) for name, source in names()]


def _share(n: int, total: int) -> str:
    return f"{n} of {total} ({100 * n / total:.0f}%)" if total else "0"


def report() -> str:
    rows = results()
    lines = [
        "## Model names resolved",
        "",
        "Model names from the public start-up logs (vLLM, SGLang, llama.cpp) and from "
        "bench/validate/data/model_names_gathered.csv (issue 26's examples, ids from public "
        "launch commands), each resolved in one run without and with the alias rules "
        "(service/catalog/model_aliases.toml; docs/models.md#names-the-catalog-does-not-hold). "
        "*Before*: a catalog id or alias, or a catalog GGUF file; *after*: those, then the "
        "rules. `bench/validate/model_resolution.py`.",
        "",
        "| names | resolved before | resolved after | recognised as unpriced |",
        "|---|---:|---:|---:|",
    ]
    for label, subset in (
        ("all names", rows),
        ("Hub ids and GGUF file names", [r for r in rows if r.hub_id]),
        ("from the public logs", [r for r in rows if not r.source.startswith(("http", "issue"))]),
    ):
        n = len(subset)
        before = sum(r.before for r in subset)
        after = sum(r.after in ("catalog", "catalog-gguf", "rules", "store") for r in subset)
        unpriced = sum(r.after == "unpriced" for r in subset)
        lines.append(
            f"| {label} | {_share(before, n)} | {_share(after, n)} | {_share(unpriced, n)} |"
        )
    lines += [
        "",
        "| name | source | before | after | resolved to | format / why not |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        why = r.detail if r.after not in ("unresolved", "unpriced") else r.detail[:90] + "…"
        lines.append(
            f"| `{r.name}` | {r.source} | {'yes' if r.before else 'no'} | {r.after} | "
            f"{r.resolved_to} | {why.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(report())
