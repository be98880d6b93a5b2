"""Names people type that the catalog does not hold, read as models it does: mirrors and
re-uploads, quantized copies named by their format, GGUF file names and ``-hf`` tags.

The rules are data (``model_aliases.toml``, read and checked by :mod:`.model_aliases`), each
with the reason it holds. :class:`NameResolver` applies them to a name that matched nothing
exactly and returns a :class:`NameMatch`: the catalog model whose config it takes, the weight
format the name says (with the ``quantization_config`` that format implies), and every rule
it used with its reason, for the answer's ``model.resolution`` and its assumptions. A name
that names a format the service does not price is a 404 saying so; a name several different
models answer to is a 404 listing them. Nothing here is consulted before the exact routes (a
model-store id, a catalog id or alias, a catalog GGUF repository), which always win.

How a name is read, in order:

1. a GGUF file (``…-Q4_K_M.gguf``, ``org/repo-GGUF/…gguf``) or repository (``org/…-GGUF``,
   ``org/…-GGUF:Q4_K_M``, llama.cpp's ``-hf`` form; no tag is Q4_K_M, as ``-hf`` picks): the
   quantization tag must be a modelled llama-quantize preset, the rest names the base model;
2. a renamed organisation becomes its new name (``neuralmagic`` → ``RedHatAI``) and the exact
   id is tried again;
3. the whole name, when a catalog record holds it under another publisher (a mirror of
   ``Qwen3-235B-A22B-FP8`` is Qwen's own -FP8 record) or under a renamed prefix of the same
   publisher (``Meta-Llama-3.1-…`` → ``Llama-3.1-…``), is that record;
4. format and packaging suffixes are taken off the end (``-GPTQ``, ``-AWQ``, ``-bnb-4bit``,
   ``-FP8``, ``-hf``, ``-fp16``: at most one quantization format), a suffix of an unpriced
   format stops with a 404;
5. what is left is looked up by bare name (case-insensitive; a catalog name is also indexed
   without its packaging suffixes): among every publisher's models when the organisation
   publishes other publishers' weights (the ``[[publisher]]`` table), is absent, or the name
   carries a quantization suffix (a copy is named after the model it was made from), else
   only among the organisation's own; a renamed prefix and then a variant suffix
   (``-Instruct``) are tried when the name alone matches nothing;
6. several matches that share one config are one model (a mirror and its original: the
   record whose config is its own is taken); matches with different configs are ambiguous.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from service.catalog.model_aliases import AliasRules, QuantFormat, SameWeights
from service.estimator.errors import NotFound
from service.estimator.gguf_quant import PRESETS

if TYPE_CHECKING:
    from service.catalog.model_catalog import ModelEntry

__all__ = ["GGUF_DEFAULT_TAG", "NameMatch", "NameResolver", "Step"]

_DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
# llama.cpp's `-hf <repo>` without a tag takes Q4_K_M (common/download.cpp).
GGUF_DEFAULT_TAG = "Q4_K_M"
# A token of a GGUF file name that names a quantization type (llama.cpp's own tag pattern).
_QUANT_TOKEN = re.compile(r"^(I?Q\d(_[A-Z0-9]+)*|TQ\d_\d|BF16|F16|F32|F64|MXFP4(_MOE)?)$")
_SPLIT_PART = re.compile(r"-\d{5}-of-\d{5}$", re.IGNORECASE)
_HUB_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/")


@dataclass(frozen=True, slots=True)
class Step:
    """One rule a resolution used: its kind and what it said."""

    rule: str
    detail: str

    def text(self) -> str:
        return f"{self.rule}: {self.detail}"


@dataclass(frozen=True, slots=True)
class NameMatch:
    """What a typed name was read as: the catalog model whose config it takes, and how."""

    requested: str
    entry: ModelEntry
    steps: tuple[Step, ...]
    format: QuantFormat | None = None
    torch_dtype: str | None = None  # the copy's checkpoint dtype, when the name says one
    unquantized: bool = False  # the copy drops the original's quantization
    gguf_tag: str | None = None
    gguf_file: str | None = None
    gguf_imatrix: bool = False
    gguf_mix: str = "stock"

    @property
    def format_name(self) -> str | None:
        if self.gguf_tag is not None:
            return f"gguf-{self.gguf_tag}"
        if self.format is not None:
            return self.format.name
        return _DTYPE_NAMES.get(self.torch_dtype or "") if self.unquantized else None

    @property
    def config_overrides(self) -> Mapping[str, Any]:
        """What the copy's config changes in the base's: its quantization and dtype."""
        out: dict[str, Any] = {}
        if self.format is not None:
            out["quantization_config"] = dict(self.format.quantization_config)
        elif self.unquantized and self.entry.architecture.quantization is not None:
            out["quantization_config"] = None
        if self.torch_dtype is not None:
            out["torch_dtype"] = self.torch_dtype
        return MappingProxyType(out)


def _ends(name: str, suffix: str) -> bool:
    return name.lower().endswith(suffix.lower()) and len(name) > len(suffix)


def _clean(name: str) -> str:
    text = name.strip()
    for prefix in _HUB_PREFIXES:
        if text.lower().startswith(prefix):
            text = text[len(prefix) :]
            break
    return text.strip("/")


def _split(name: str) -> tuple[str | None, str]:
    org, sep, bare = name.partition("/")
    return (org, bare) if sep and org and "/" not in bare else (None, name)


@dataclass
class _Search:
    """One resolution in progress: the rules it used so far."""

    requested: str
    steps: list[Step] = field(default_factory=list)

    def add(self, rule: str, detail: str) -> None:
        self.steps.append(Step(rule, detail))


class NameResolver:
    """The rules over one catalog's entries (built once, at start-up)."""

    def __init__(
        self,
        rules: AliasRules,
        entries: Iterable[ModelEntry],
        exact: Callable[[str], ModelEntry | None],
    ) -> None:
        self.rules = rules
        self._exact = exact
        # Bare names as given, and without a packaging suffix (`Llama-2-7b-hf` also answers to
        # `llama-2-7b`); a name as given is preferred over one found by its shortened form.
        named: dict[str, list[ModelEntry]] = {}
        shortened: dict[str, list[tuple[ModelEntry, SameWeights]]] = {}
        orgs: set[str] = set()
        for entry in entries:
            if entry.gguf is not None:
                continue
            orgs.add(entry.id.partition("/")[0].lower())
            for name in entry.names:
                bare = _split(name)[1]
                bucket = named.setdefault(bare.lower(), [])
                if entry not in bucket:
                    bucket.append(entry)
                for rule in self.rules.same_weights:
                    if _ends(bare, rule.suffix):
                        short = shortened.setdefault(bare[: -len(rule.suffix)].lower(), [])
                        if all(e is not entry for e, _ in short):
                            short.append((entry, rule))
        self._named = {k: tuple(v) for k, v in named.items()}
        self._shortened = {k: tuple(v) for k, v in shortened.items()}
        self._orgs = frozenset(orgs)

    # ---- entry points --------------------------------------------------------------------

    def resolve(self, name: str) -> NameMatch | None:
        """The match for ``name``, None when no rule reads it; NotFound when a rule says the
        name is a format the service does not price, or names several different models."""
        text = _clean(name)
        if not text or len(text) > 300:
            return None
        search = _Search(name.strip())
        gguf = self._gguf(text, search)
        if gguf is not None:
            return gguf
        org, bare = _split(text)
        return self._model(org, bare, search)

    # ---- GGUF ----------------------------------------------------------------------------

    def _gguf(self, text: str, search: _Search) -> NameMatch | None:
        repo, _, tail = text.rpartition(":") if ":" in text else (text, "", "")
        file = None
        if repo.lower().endswith(".gguf"):
            path = repo
            repo, _, file = path.rpartition("/")
        elif not repo.lower().endswith("-gguf"):
            return None
        org, repo_name = _split(repo) if repo else (None, "")
        publisher = self.rules.publisher(org)
        if file is not None:
            stem = _SPLIT_PART.sub("", file[: -len(".gguf")])
            tag, base = self._file_tag(stem, search.requested)
            search.add(
                "gguf",
                f"file {file}: quantization {tag} (a llama-quantize preset), model {base}",
            )
        else:
            base = repo_name[: -len("-gguf")] if repo_name else ""
            tag = tail.strip().upper() or GGUF_DEFAULT_TAG
            if tag not in PRESETS:
                raise self._unmodelled_tag(tag, search.requested)
            how = "the tag given" if tail.strip() else "no tag: llama.cpp's -hf default"
            search.add("gguf", f"repository {repo}: quantization {tag} ({how}), model {base}")
        if not base:
            return None
        if publisher is not None:
            search.add("publisher", f"{publisher.org}: {publisher.reason}")
        match = self._lookup(org, base, search, any_org=True)
        return NameMatch(
            requested=search.requested,
            entry=match,
            steps=tuple(search.steps),
            gguf_tag=tag,
            gguf_file=file,
            gguf_imatrix=publisher.gguf_imatrix if publisher else False,
            gguf_mix=publisher.gguf_mix if publisher else "stock",
        )

    @staticmethod
    def _unmodelled_tag(tag: str, requested: str) -> NotFound:
        return NotFound(
            f"{requested[:120]!r} is a GGUF file of type {tag[:20]}, which is not a modelled "
            f"llama-quantize preset ({', '.join(PRESETS)}); put the file in the model store "
            "(LLMMEM_MODEL_DIRS): its tensor infos give the exact bytes",
            field="model",
        )

    def _file_tag(self, stem: str, requested: str) -> tuple[str, str]:
        """A GGUF file stem's quantization tag and the model name before it."""
        tokens = re.split(r"([-.])", stem)
        for i in range(len(tokens) - 1, -1, -2):
            token = tokens[i].upper()
            if _QUANT_TOKEN.match(token):
                if token not in PRESETS:
                    raise self._unmodelled_tag(token, requested)
                base = "".join(tokens[: max(0, i - 1)])
                return token, base
        raise NotFound(
            f"{requested[:120]!r} names a GGUF file without a quantization tag the service "
            "reads (…-Q4_K_M.gguf); put the file in the model store for its exact bytes",
            field="model",
        )

    # ---- Hugging Face names --------------------------------------------------------------

    def _model(self, org: str | None, bare: str, search: _Search) -> NameMatch | None:
        for rename in self.rules.renamed_orgs:
            if org is not None and org.lower() == rename.old.lower():
                search.add("renamed organisation", f"{rename.old} → {rename.new}: {rename.reason}")
                org = rename.new
                found = self._exact(f"{org}/{bare}")
                if found is not None:
                    return NameMatch(search.requested, found, tuple(search.steps))
        publisher = self.rules.publisher(org)
        if publisher is not None:
            search.add("publisher", f"{publisher.org}: {publisher.reason}")
        whole = self._whole_name(org, bare, publisher is not None, search)
        if whole is not None:
            return NameMatch(search.requested, whole, tuple(search.steps))
        stem = bare
        fmt: QuantFormat | None = None
        dtype: str | None = None
        unquantized = False
        while True:
            self._refuse_unpriced(org, stem, search.requested)
            taken = self._take_format(stem) if fmt is None else None
            if taken is not None:
                fmt, suffix = taken
                stem = stem[: -len(suffix)]
                dtype = fmt.torch_dtype
                search.add("format", f"{suffix} → {fmt.name}: {fmt.reason}")
                continue
            same = next((s for s in self.rules.same_weights if _ends(stem, s.suffix)), None)
            if same is not None:
                stem = stem[: -len(same.suffix)]
                dtype = dtype or same.torch_dtype
                unquantized = unquantized or (same.unquantized and fmt is None)
                search.add("same weights", f"{same.suffix}: {same.reason}")
                continue
            break
        # Among every publisher's models: no organisation, a publisher of others' weights, or
        # a quantization suffix (a copy named after the model it was made from). Otherwise
        # only the organisation's own models, and only if it has any.
        any_org = org is None or publisher is not None or fmt is not None
        if not any_org and (org or "").lower() not in self._orgs:
            return None
        entry = self._lookup(org, stem, search, any_org)
        if org is not None and publisher is None and fmt is not None:
            search.steps.insert(
                0,
                Step(
                    "quantized copy",
                    f"{org} is not a listed publisher; the name before the format suffix is "
                    "taken as the model the copy was made from",
                ),
            )
        return NameMatch(search.requested, entry, tuple(search.steps), fmt, dtype, unquantized)

    def _whole_name(
        self, org: str | None, bare: str, publishes_others: bool, search: _Search
    ) -> ModelEntry | None:
        """A catalog model the whole name already names, before any suffix is read: under
        another publisher (a mirror of ``Qwen3-235B-A22B-FP8`` is Qwen's own -FP8 record), or
        under a renamed prefix of the same publisher (``Meta-Llama-3.1-…`` → ``Llama-3.1-…``)."""
        names: list[tuple[str, tuple[Step, ...]]] = [(bare, ())]
        for rename in self.rules.renamed:
            applies = org is None or publishes_others or org.lower() == (rename.org or "").lower()
            if applies and bare.lower().startswith(rename.old.lower()):
                step = Step("renamed", f"{rename.old} → {rename.new}: {rename.reason}")
                names.append((rename.new + bare[len(rename.old) :], (step,)))
        for name, steps in names:
            if org is not None and not publishes_others:
                found = self._exact(f"{org}/{name}")
                if found is not None:
                    search.steps.extend(steps)
                    search.add("name", f"{found.id}, the same publisher's repository")
                    return found
                continue
            named = tuple(self._named.get(name.lower(), ()))
            if named:
                search.steps.extend(steps)
                try:
                    return self._one(named, org, name, search)
                except NotFound:
                    return None  # several different models: the suffixes may still tell
        return None

    def _refuse_unpriced(self, org: str | None, stem: str, requested: str) -> None:
        for rule in self.rules.unpriced:
            if rule.orgs and (org is None or org.lower() not in rule.orgs):
                continue
            suffix = next((s for s in rule.suffixes if _ends(stem, s)), None)
            if suffix is not None:
                raise NotFound(
                    f"{requested[:120]!r} is {rule.reason}: not priced. Name the model it was "
                    f"made from (without {suffix}) for the original checkpoint's bytes, or put "
                    "the files in the model store (LLMMEM_MODEL_DIRS) for their exact bytes",
                    field="model",
                )

    def _take_format(self, stem: str) -> tuple[QuantFormat, str] | None:
        best: tuple[QuantFormat, str] | None = None
        for fmt in self.rules.formats:
            for suffix in fmt.suffixes:
                if _ends(stem, suffix) and (best is None or len(suffix) > len(best[1])):
                    best = (fmt, stem[len(stem) - len(suffix) :])
        return best

    def _lookup(self, org: str | None, stem: str, search: _Search, any_org: bool) -> ModelEntry:
        """The one catalog model ``stem`` names: the name itself, then with a renamed prefix,
        then with a variant suffix. ``any_org``: among every publisher's models."""
        if org is not None and not any_org:
            own = self._exact(f"{org}/{stem}")
            if own is not None:
                search.add("name", f"{own.id}, the same publisher's repository")
                return own
        tries: list[tuple[str, tuple[Step, ...]]] = [(stem, ())]
        for rename in self.rules.renamed:
            applies = any_org or (org or "").lower() == (rename.org or "").lower()
            if applies and stem.lower().startswith(rename.old.lower()):
                step = Step("renamed", f"{rename.old} → {rename.new}: {rename.reason}")
                tries.append((rename.new + stem[len(rename.old) :], (step,)))
        for variant in self.rules.variants:
            step = Step("variant", f"{variant.suffix}: {variant.reason}")
            tries += [(name + variant.suffix, (*steps, step)) for name, steps in list(tries)]
        for name, steps in tries:
            named, via = self._candidates(name, None if any_org else org)
            if named:
                search.steps.extend(steps)
                if via is not None:
                    search.add("same weights", f"catalog name with {via.suffix}: {via.reason}")
                return self._one(named, org, name, search)
        where = "any publisher's" if any_org else f"{org}'s"
        read = "; ".join(s.rule for s in search.steps) or "as given"
        raise NotFound(
            f"{search.requested[:120]!r} was read as {stem[:80]!r} ({read}), which names none "
            f"of {where} catalog models: post its config.json as `hf_config`, or put its files "
            "in the model store (LLMMEM_MODEL_DIRS)",
            field="model",
        )

    def _candidates(
        self, name: str, org: str | None
    ) -> tuple[tuple[ModelEntry, ...], SameWeights | None]:
        """Catalog models named ``name`` (of ``org`` only, when given): by their own name,
        else by their name less a packaging suffix (returned, for the reasons)."""

        def mine(entry: ModelEntry) -> bool:
            return org is None or entry.id.lower().startswith(f"{org.lower()}/")

        key = name.lower()
        found = tuple(e for e in self._named.get(key, ()) if mine(e))
        if found:
            return found, None
        short = [(e, rule) for e, rule in self._shortened.get(key, ()) if mine(e)]
        return tuple(e for e, _ in short), (short[0][1] if short else None)

    def _one(
        self, found: tuple[ModelEntry, ...], org: str | None, name: str, search: _Search
    ) -> ModelEntry:
        """One model from same-named records: they must share one config (a mirror and its
        original); the record whose config is its own (no base) is taken, else the first."""
        shapes = {json.dumps(dict(e.config), sort_keys=True) for e in found}
        if len(shapes) > 1:
            names = ", ".join(sorted(e.id for e in found)[:6])
            raise NotFound(
                f"{search.requested[:120]!r} was read as {name[:80]!r}, which several catalog "
                f"models with different configs are named: {names}; name one of them",
                field="model",
            )
        ranked = sorted(found, key=lambda e: (e.base is not None, e.id.lower()))
        entry = ranked[0]
        if len(found) == 1:
            bare = _split(entry.id)[1]
            own = {bare.lower()} | {
                bare[: -len(r.suffix)].lower()
                for r in self.rules.same_weights
                if _ends(bare, r.suffix)
            }
            alias = name.lower() not in own
            why = "the only catalog model of that name" + (" (an alias)" if alias else "")
        else:
            why = f"{len(found)} catalog records of that name share one config; taken the original"
        if org is None:
            why += " (no organisation given)"
        search.add("name", f"{entry.id}: {why}")
        return entry
