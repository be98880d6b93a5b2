"""The calibration register checked in and out of sample.

For every entry of ``service/estimator/calibration.py`` that was fitted to validation rows, this
module rebuilds those rows (the measured figure, and the estimator's prediction of it), and
reports:

- the error on the rows it was fitted on, at the registered value (in-sample);
- leave one out: the value refitted on all the fitted rows but one, and the error on that one;
- leave one model out: the value refitted without every row of one model, and the error on
  that model's rows (rows of one model share its shape, so leaving out one row of several
  still lets its siblings fit it);
- the error on the rows it affects but was not fitted on (held out), at the registered value
  and at the refit, so that keeping a value over its refit is judged on rows neither saw.

Refitting is least squares on relative errors, over a linearization of each row's prediction
in the entry's values (the estimator evaluated at the registered values and one step off each:
every calibrated term enters the figures it affects linearly). Entries that no validation row
measures are listed as such. Rows are evaluated with the value overridden
(``calibration.overridden``) and the estimator's cache dropped around it.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.validate import finetune as ft_validation
from bench.validate import inference as inf_validation
from service.application.resolve import resolve_gpu
from service.catalog.gpu_catalog import load_gpu_catalog
from service.estimator import calibration, memo
from service.estimator.engines.overhead import cuda_context_bytes
from service.estimator.errors import InvalidRequest
from service.estimator.inference import estimate_inference, stage_figures
from service.estimator.inference.request import setup_for
from service.estimator.training import estimate_finetune

GIB = 2**30
MIB = 2**20
CONTEXT_DATA = Path(__file__).parent / "data" / "cuda_context.csv"


@dataclass(frozen=True)
class Row:
    """One validation figure: its id, what was measured, and the estimator's prediction."""

    id: str
    measured: float
    predict: Callable[[], float]
    model: str = ""  # the model the row measured (leave one model out); "" counts as its own


@dataclass
class Check:
    """The rows that test one group of register entries fitted together."""

    names: tuple[str, ...]
    fitted: list[Row]
    held_out: list[Row] = field(default_factory=list)
    note: str = ""


@contextmanager
def _values(values: Mapping[str, float]) -> Iterator[None]:
    memo.clear()
    with calibration.overridden(**{k.replace(".", "__"): v for k, v in values.items()}):
        yield
    memo.clear()


def _evaluate(row: Row, values: Mapping[str, float]) -> float:
    with _values(values):
        return row.predict()


def _registered(names: tuple[str, ...]) -> dict[str, float]:
    return {n: calibration.REGISTER[n].value for n in names}


@dataclass(frozen=True)
class _Linear:
    """A row's prediction near the registered values: f0 + Σ slope_i · (v_i − v0_i)."""

    row: Row
    f0: float
    slopes: tuple[float, ...]


def _linearize(row: Row, names: tuple[str, ...]) -> _Linear:
    base = _registered(names)
    f0 = _evaluate(row, base)
    slopes = []
    for n in names:
        step = max(abs(base[n]) * 0.05, 1e-3)
        f1 = _evaluate(row, {**base, n: base[n] + step})
        slopes.append((f1 - f0) / step)
    return _Linear(row, f0, tuple(slopes))


def _fit(lines: list[_Linear], names: tuple[str, ...]) -> dict[str, float] | None:
    """Least squares on relative errors over ``lines``; None when the rows do not determine
    the values (too few rows, or slopes that never move)."""
    base = _registered(names)
    k = len(names)
    used = [ln for ln in lines if any(s != 0 for s in ln.slopes)]
    if len(used) < k:
        return None
    # Normal equations of min Σ ((f0 + s·d − m) / m)² in the step d from the registered values,
    # each value scaled by its registered size (d_i = base_i · u_i) so the system is well
    # conditioned whatever the units.
    scale = [abs(base[n]) or 1.0 for n in names]
    ata = [[0.0] * k for _ in range(k)]
    atb = [0.0] * k
    for ln in used:
        w = 1 / ln.row.measured**2
        r = ln.row.measured - ln.f0
        a = [ln.slopes[i] * scale[i] for i in range(k)]
        for i in range(k):
            atb[i] += w * a[i] * r
            for j in range(k):
                ata[i][j] += w * a[i] * a[j]
    if k == 1:
        if ata[0][0] == 0:
            return None
        step = [atb[0] / ata[0][0]]
    else:
        det = ata[0][0] * ata[1][1] - ata[0][1] * ata[1][0]
        if abs(det) < 1e-12 * (ata[0][0] * ata[1][1] or 1.0):
            return None  # the rows do not separate the two values
        step = [
            (atb[0] * ata[1][1] - atb[1] * ata[0][1]) / det,
            (ata[0][0] * atb[1] - ata[1][0] * atb[0]) / det,
        ]
    return {n: base[n] + u * sc for n, u, sc in zip(names, step, scale, strict=True)}


def _error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


@dataclass
class Result:
    names: tuple[str, ...]
    registered: dict[str, float]
    refit: dict[str, float] | None
    in_sample: list[tuple[str, float]]
    loo: list[tuple[str, float]]
    lomo: list[tuple[str, float]]
    held_out: list[tuple[str, float]]
    note: str
    # The held-out rows at the values refitted on every fitted row (empty without a refit).
    held_out_refit: list[tuple[str, float]] = field(default_factory=list)


def _left_out(
    lines: list[_Linear], names: tuple[str, ...], group: Callable[[int, _Linear], Hashable]
) -> list[tuple[str, float]]:
    """Each group's rows checked at the values refitted on every other group's (a group the
    others cannot determine is skipped), in the rows' order within each group."""
    keys = [group(i, ln) for i, ln in enumerate(lines)]
    errors: list[tuple[str, float]] = []
    for key in dict.fromkeys(keys):
        values = _fit([ln for ln, k in zip(lines, keys, strict=True) if k != key], names)
        if values is None:
            continue
        errors += [
            (ln.row.id, _error(_evaluate(ln.row, values), ln.row.measured))
            for ln, k in zip(lines, keys, strict=True)
            if k == key
        ]
    return errors


def run(check: Check) -> Result:
    names = check.names
    base = _registered(names)
    lines = [_linearize(r, names) for r in check.fitted]
    informative = [ln for ln in lines if any(s != 0 for s in ln.slopes)]
    in_sample = [(ln.row.id, _error(ln.f0, ln.row.measured)) for ln in informative]
    loo = _left_out(informative, names, lambda i, ln: i)
    lomo = _left_out(informative, names, lambda i, ln: ln.row.model or ln.row.id)
    held_out = [(r.id, _error(_evaluate(r, base), r.measured)) for r in check.held_out]
    refit = _fit(informative, names)
    held_out_refit = (
        []
        if refit is None
        else [(r.id, _error(_evaluate(r, refit), r.measured)) for r in check.held_out]
    )
    return Result(names, base, refit, in_sample, loo, lomo, held_out, check.note, held_out_refit)


# ------------------------------------------------------------------------------------------
# The rows of each entry
# ------------------------------------------------------------------------------------------


def _vllm_rows() -> list[dict[str, str]]:
    return [r for r in inf_validation._vllm_rows()]


def _vllm_row(row: dict[str, str], what: str) -> Row:
    req = inf_validation.vllm_request(row)
    if what == "non_torch":

        def predict() -> float:
            return stage_figures(req)[0].non_kv_overhead / GIB

        return Row(row["run"], float(row["non_torch_gib"]), predict, row["model"])
    if what == "activations":

        def predict() -> float:
            return stage_figures(req)[0].activations / GIB

        return Row(row["run"], float(row["activation_gib"]), predict, row["model"])

    def graphs() -> float:
        return setup_for(req).outside_budget.cuda_graphs / GIB

    return Row(row["run"], float(row["cudagraph_actual_gib"]), graphs, row["model"])


def _public_log_rows(what: str) -> list[Row]:
    """Held-out rows from the public vLLM start-up logs (bench/validate/public_logs.py, each
    row with its URL; no register entry was fitted on them), for ``what``:

    - ``graphs``: the CUDA-graph memory the log prints ("Graph capturing finished ... took"),
      without enforce_eager; a negative figure (0.11's capture frees memory the profiling run
      held, so the free-memory difference does not measure the pool) is left out;
    - ``workspace``: the non-torch figure on one GPU (TP 1, PP 1) of a named GPU other than an
      H100, the GPUs the library workspace was not fitted on.
    """
    from bench.validate import public_logs as pl

    out = []
    for item in pl.scorable():
        if isinstance(item, pl.Excluded):
            continue
        row, req, gpu = item.row, item.request, item.gpu
        if what == "graphs":
            printed = pl.number(row["cudagraph_printed"])
            if not printed or printed <= 0 or row["enforce_eager"].strip() == "True":
                continue

            def predict(req: object = req) -> float:
                s = setup_for(req)  # type: ignore[arg-type]
                return (s.overhead.cuda_graphs + s.outside_budget.cuda_graphs) / GIB

        else:
            printed = pl.number(row["non_torch_printed"])
            single = (pl.number(row["tp"]) or 1) == 1 and (pl.number(row["pp"]) or 1) == 1
            other_gpu = gpu is not None and gpu.resident_threads() and "h100" not in gpu.ref
            if not printed or not single or not other_gpu:
                continue

            def predict(req: object = req) -> float:
                return stage_figures(req)[0].non_kv_overhead / GIB  # type: ignore[arg-type]

        try:
            predict()
        except InvalidRequest:
            continue
        where = f", {gpu.name}" if gpu is not None else ""
        out.append(Row(f"{item.id} (vLLM {item.line}{where})", printed, predict, row["model"]))
    return out


def _registered_rows(name: str) -> set[str]:
    """The row keys an entry's ``fitted_on`` lists (``file:key``), for explicit lists."""
    return {r.split(":", 1)[1] for r in calibration.REGISTER[name].fitted_on if "*" not in r}


def checks() -> list[Check]:
    rows = _vllm_rows()
    with_figures = [r for r in rows if r["non_torch_gib"]]
    tp1 = [r for r in with_figures if r["tp"] == "1" and r["pp"] == "1"]
    tp_n = [r for r in with_figures if r["tp"] != "1" and r["pp"] == "1"]
    pp_n = [r for r in with_figures if r["pp"] != "1"]
    workspace = "cuda.library_workspace_bytes_per_resident_thread"
    out = [
        Check(("cuda.context_bytes_per_resident_thread",), _context_rows()),
        Check(
            (workspace,),
            [_vllm_row(r, "non_torch") for r in tp1 if r["run"] in _registered_rows(workspace)],
            [_vllm_row(r, "non_torch") for r in pp_n] + _public_log_rows("workspace"),
            "held out: the pipeline-parallel rows, whose non-torch figure (0.07 GiB) the term "
            "does not describe, and the public logs' non-torch figures on one GPU other than an "
            "H100 (an RTX 3090: the only other GPU the term is checked on)",
        ),
        Check(
            ("nccl.tp_group_bytes", "nccl.tp_peer_bytes"),
            [_vllm_row(r, "non_torch") for r in tp_n],
        ),
        Check(
            ("vllm.cuda_graph_base_bytes", "vllm.cuda_graph_per_layer_bytes"),
            [_vllm_row(r, "graphs") for r in rows if r["cudagraph_actual_gib"]],
            _public_log_rows("graphs"),
            "held out: the CUDA-graph memory public vLLM logs print (Graph capturing finished, "
            "took), on other releases, GPUs and capture settings than the fit's",
        ),
    ]
    out.append(Check(("transformers.sampling_bytes_per_logit",), _transformers_decode_rows()))
    out.append(Check(("training.fragmentation_fraction",), _reserved_rows()))
    return out


def _context_rows() -> list[Row]:
    """Public measurements of a bare CUDA context (MiB), each GPU its own group."""
    gpus = load_gpu_catalog()
    out = []
    with CONTEXT_DATA.open() as f:
        for row in csv.DictReader(f):
            gpu = resolve_gpu(gpus, row["gpu"])

            def predict(gpu: object = gpu) -> float:
                return cuda_context_bytes(gpu) / MIB  # type: ignore[arg-type]

            out.append(Row(row["row_id"], float(row["context_mib"]), predict, row["gpu"]))
    return out


def _transformers_decode_rows() -> list[Row]:
    """The Qwen benchmark rows with a 1-token prompt, where decoding sets the peak; rows no
    single program can have produced (``inconsistent_rows``) are left out."""
    out = []
    rows = inf_validation.transformers_rows()
    inconsistent = inf_validation.inconsistent_rows(rows)
    for i, row in enumerate(rows):
        if row["input_tokens"] != "1" or i in inconsistent:
            continue
        req = inf_validation.transformers_request(row)

        def predict(req: object = req) -> float:
            t = estimate_inference(req).total  # type: ignore[arg-type]
            return (t["weights"] + t["kv_cache"] + t["activations"]) / GIB

        name = f"{row['model']} {row['quant']} in=1 gpus={row['gpus']}"
        out.append(Row(name, inf_validation._gib(row), predict, row["model"]))
    return out


def _reserved_rows() -> list[Row]:
    out = []
    for v in ft_validation.compared_swift_values(ft_validation._rows()):
        req = v.request
        assert req is not None

        def predict(req: object = req) -> float:
            est = estimate_finetune(req)  # type: ignore[arg-type]
            alloc = float(est.details["allocated_peak_bytes"])  # type: ignore[arg-type]
            frag = float(est.details["fragmentation_fraction"])  # type: ignore[arg-type]
            return alloc * (1 + frag)

        out.append(Row(v.name, v.measured, predict, v.model))
    return out


# ------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------


def _stats(errors: list[tuple[str, float]]) -> str:
    if not errors:
        return "—"
    abs_e = [abs(e) for _, e in errors]
    worst = max(errors, key=lambda x: abs(x[1]))
    return (
        f"{len(errors)} rows: mean {statistics.mean(abs_e):.2%}, worst {worst[1]:+.2%} ({worst[0]})"
    )


def _fmt(name: str, v: float) -> str:
    unit = calibration.REGISTER[name].unit
    if "bytes" in unit and v >= 2**20:
        return f"{v / 2**20:.1f} MiB"
    return f"{v:.4g}"


def results() -> list[Result]:
    from bench.validate import performance  # it builds its Result from this module's class

    return [*(run(c) for c in checks()), performance.register_result()]


def report(computed: list[Result] | None = None) -> str:
    computed = results() if computed is None else computed
    lines = [
        "## Calibration register: in and out of sample",
        "",
        "Every constant of `service/estimator/calibration.py` that was fitted to measured rows, "
        "checked on those rows at its registered value (in-sample), refitted on all of them but "
        "one and checked on that one (leave one out), refitted without every row of one model "
        "and checked on that model's rows (leave one model out: a model's other rows cannot "
        "stand in for it), and checked on rows it affects but was not fitted on (held out). "
        "Least squares on relative errors.",
        "",
        "| entry | registered | refit on all rows | in-sample | leave one out | "
        "leave one model out | held out | held out at the refit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    checked: set[str] = set()
    for r in computed:
        checked.update(r.names)
        registered = ", ".join(_fmt(n, r.registered[n]) for n in r.names)
        refit = "—" if r.refit is None else ", ".join(_fmt(n, r.refit[n]) for n in r.names)
        lines.append(
            f"| {' + '.join(f'`{n}`' for n in r.names)} | {registered} | {refit} | "
            f"{_stats(r.in_sample)} | {_stats(r.loo)} | {_stats(r.lomo)} | "
            f"{_stats(r.held_out)} | {_stats(r.held_out_refit)} |"
        )
    notes = [r for r in computed if r.note]
    if notes:
        lines.append("")
        for r in notes:
            lines.append(f"- {' + '.join(r.names)}: {r.note}.")
    kept = [calibration.REGISTER[r.names[0]] for r in computed]
    kept = [e for e in kept if e.kept_over_refit]
    if kept:
        lines += ["", "Registered values kept over their refit, and why:", ""]
        for e in kept:
            lines.append(f"- `{e.name}`: {e.kept_over_refit}.")
    unmeasured = [e for n, e in calibration.REGISTER.items() if n not in checked or not e.fitted_on]
    if unmeasured:
        lines += ["", "Entries no validation row measures (their value and source):", ""]
        for e in unmeasured:
            lines.append(f"- `{e.name}` = {_fmt(e.name, e.value)}: {e.source}")
    return "\n".join(lines) + "\n"
