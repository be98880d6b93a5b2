"""Performance accuracy: the roofline (service/estimator/performance) against published serving
benchmarks, and the fit of its constants.

``data/measured/performance_vllm.csv`` holds one row per published measurement (model, engine
and version, GPU, TP, prompt and output tokens, concurrency, how the load was offered, measured
mean TTFT, ITL and output tokens/s, the URL and what the harness was). ``load`` is
``closed-loop`` where the benchmark kept ``concurrency`` requests in flight
(``--max-concurrency``: the traffic the model answers) and ``burst`` where it sent all
``concurrency`` prompts at once and let the engine queue them (no ``--max-concurrency``): a
finite run whose ramp, drain and KV-pressure preemptions the steady state does not hold.

Rows are grouped by GPU class: the engine and the catalog's architecture family of the row's GPU
(:func:`gpu_class`: Hopper for H100 and H200, Ampere for A100, Ada for L40S, L4 and the RTX
40 series). A class whose own fit rows pin both of its efficiencies (decode figures for the
memory efficiency, a usable zero-load TTFT for the compute efficiency: :func:`fitted_classes`)
has them fitted (:func:`class_fitted`, registered under ``timing.CALIBRATED``'s prefix for the
class, and answered as calibrated only on the GPUs of ``timing.CHECKED_ON``, those its rows
were measured on); the engine's three overheads (per step, per request, per decoded sequence)
are one set for every class. Any other class has no fitted constants and the service answers
it with a band; its closed-loop rows are scored against the band and in two experiments
(:func:`transferred`, :func:`own_memory_fit`).

Before any fit, every source's closed-loop rows are split by a fixed rule (:func:`held_out`): a
third of them, rounded up and spread evenly over the source's rows in file order, never enter a
fit (so at least a third of every class, too). The constants are fitted together on the rest
(least squares on relative errors of ITL, output tokens/s and, at concurrency 1, TTFT:
:func:`fit`; a class's efficiencies see only its own rows, the overheads every row of the
engine), and the errors are reported on both sets, per class and per GPU. Burst rows never enter
a fit: they are scored apart, as the service answers them and as the fitted constants answer
them on the GPU's own datasheet peaks (:func:`transferred`, an experiment on how far a fit
carries to a GPU it never saw).

``python -m bench.validate.performance --fit`` prints the fitted values (the register must hold
them: tests/estimator/performance/test_calibration_fit.py checks it); without ``--fit`` it prints
the report (bench/validate/performance_report.py: every row scored, per class and per GPU).
"""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from bench.validate.paths import MEASURED
from service.application.resolve import resolve_gpu
from service.catalog.gpu_catalog import GpuCatalog, load_gpu_catalog
from service.catalog.model_catalog import ModelCatalog, load_model_catalog
from service.estimator import calibration
from service.estimator.inference import InferenceRequest
from service.estimator.performance import Traffic, estimate_performance, timing

if TYPE_CHECKING:
    from bench.validate.calibration import Result as CalibrationResult

DATA = MEASURED / "performance_vllm.csv"

#: A GPU class: (engine, the catalog's architecture family of the GPU), e.g. ("vllm", "hopper").
GpuClass = tuple[str, str]

#: The engine-wide constants every class's rows fit together (register names).
ENGINE_FITTED: dict[str, tuple[str, ...]] = {
    "vllm": (
        "perf.vllm.step_overhead_s",
        "perf.vllm.request_overhead_s",
        "perf.vllm.sequence_overhead_s",
    ),
}

#: The classes the issue's targets name (vLLM on H100/H200, A100, L40S): each gets a line in
#: the report, with rows or without.
TARGET_CLASSES: tuple[GpuClass, ...] = (("vllm", "hopper"), ("vllm", "ampere"), ("vllm", "ada"))

#: Held-out MAPE bounds tests/validation asserts (the issue's targets, on what the rows allow).
TARGETS = {"itl": 0.20, "output_tokens_per_s": 0.20, "ttft_zero_load": 0.40}


@dataclass(frozen=True)
class Row:
    id: str
    model: str
    engine: str
    engine_version: str
    gpu: str
    tp: int
    input_tokens: int
    output_tokens: int
    concurrency: int
    load: str  # closed-loop (--max-concurrency) or burst (all prompts at once)
    ttft_ms: float | None  # None: the row's TTFT is not usable (its note says why)
    itl_ms: float
    output_tokens_per_s: float
    url: str
    source: str  # the URL without its anchor: rows of one publication

    @property
    def zero_load(self) -> bool:
        return self.concurrency == 1 and self.closed_loop

    @property
    def closed_loop(self) -> bool:
        return self.load == "closed-loop"


@lru_cache(maxsize=1)
def rows() -> tuple[Row, ...]:
    out = []
    with DATA.open() as f:
        for r in csv.DictReader(f):
            out.append(
                Row(
                    id=r["id"],
                    model=r["model"],
                    engine=r["engine"],
                    engine_version=r["engine_version"],
                    gpu=r["gpu"],
                    tp=int(r["tp"]),
                    input_tokens=int(r["input_tokens"]),
                    output_tokens=int(r["output_tokens"]),
                    concurrency=int(r["concurrency"]),
                    load=r["load"],
                    ttft_ms=float(r["ttft_ms"]) if r["ttft_ms"] else None,
                    itl_ms=float(r["itl_ms"]),
                    output_tokens_per_s=float(r["output_tokens_per_s"]),
                    url=r["url"],
                    source=r["url"].split("#")[0],
                )
            )
    return tuple(out)


def held_out(all_rows: tuple[Row, ...] | None = None) -> frozenset[str]:
    """The closed-loop ids no fit may see: per source, ceil(n / 3) rows at evenly spread
    positions (``round((k + 0.5) × n / m)`` for k < m) of the source's closed-loop rows in file
    order. (Burst rows enter no fit at all.)"""
    all_rows = rows() if all_rows is None else all_rows
    by_source: dict[str, list[Row]] = {}
    for r in all_rows:
        if r.closed_loop:
            by_source.setdefault(r.source, []).append(r)
    out: set[str] = set()
    for group in by_source.values():
        n = len(group)
        m = math.ceil(n / 3)
        for k in range(m):
            out.add(group[min(n - 1, round((k + 0.5) * n / m))].id)
    return frozenset(out)


def fit_rows(cls: GpuClass | None = None) -> tuple[Row, ...]:
    """The closed-loop rows a fit sees: those not held out of the fitted classes
    (:func:`fitted_classes`), all of them or one class's."""
    hold, fitted = held_out(), fitted_classes()
    return tuple(
        r
        for r in rows()
        if r.closed_loop
        and r.id not in hold
        and gpu_class(r) in fitted
        and (cls is None or gpu_class(r) == cls)
    )


def row_ids(cls: GpuClass | None = None, prefix: str = "performance_vllm") -> tuple[str, ...]:
    """Register ids of the fit rows (``performance_vllm:<id>``), all or one class's."""
    return tuple(f"{prefix}:{r.id}" for r in fit_rows(cls))


@lru_cache(maxsize=1)
def gpu_catalog() -> GpuCatalog:
    return load_gpu_catalog()


def gpu_class(row: Row) -> GpuClass:
    """The row's class: its engine and its GPU's architecture family (catalog)."""
    gpu = resolve_gpu(gpu_catalog(), row.gpu)
    assert gpu.performance is not None
    return (row.engine, gpu.performance.architecture or "")


def classes_with_rows(subset: tuple[Row, ...] | None = None) -> tuple[GpuClass, ...]:
    """The classes with closed-loop rows (of ``subset``, every row by default), sorted."""
    subset = rows() if subset is None else subset
    return tuple(sorted({gpu_class(r) for r in subset if r.closed_loop}))


#: Held-out rows a fitted class needs for each target figure, zero-load TTFT included (the
#: issue's MAPE on one or two rows would say nothing).
MIN_HELD_OUT = 3


def zero_load_ttft(row: Row) -> bool:
    """Whether the row has a usable zero-load TTFT (a prefill at concurrency 1)."""
    return row.zero_load and ttft_usable(row)


@lru_cache(maxsize=1)
def fitted_classes() -> tuple[GpuClass, ...]:
    """The classes whose own rows both pin and check their two efficiencies, sorted: decode
    figures (ITL, output tokens/s: every row has them) pin the memory efficiency and a usable
    zero-load TTFT the compute efficiency, so the fit rows need at least one such TTFT, and the
    held-out rows at least :data:`MIN_HELD_OUT` of them (and so of every target figure). Only
    these classes are fitted and answered as calibrated. A class with rows that fall short
    would answer TTFT (or every figure) with constants no row of its own checks: it keeps its
    band, and its rows are scored against it and in :func:`own_memory_fit`."""
    hold = held_out()
    pinned: set[GpuClass] = set()
    checks: dict[GpuClass, int] = {}
    for r in rows():
        if r.closed_loop and zero_load_ttft(r):
            cls = gpu_class(r)
            if r.id in hold:
                checks[cls] = checks.get(cls, 0) + 1
            else:
                pinned.add(cls)
    return tuple(sorted(c for c in pinned if checks.get(c, 0) >= MIN_HELD_OUT))


def class_fitted(cls: GpuClass) -> tuple[str, str]:
    """The register names of a class's own constants: its memory and compute efficiencies,
    under the prefix ``timing.CALIBRATED`` gives the class (a class with rows and no prefix is
    an error: its rows would be fitted with constants the service never reads)."""
    prefix = timing.CALIBRATED[cls]
    return (f"{prefix}.memory_efficiency", f"{prefix}.compute_efficiency")


def fitted_names(classes: tuple[GpuClass, ...] | None = None) -> tuple[str, ...]:
    """The constants a fit over ``classes`` varies, in order: each engine's overheads, then
    each class's efficiencies."""
    classes = fitted_classes() if classes is None else classes
    engines = tuple(dict.fromkeys(engine for engine, _ in classes))
    out = [n for e in engines for n in ENGINE_FITTED[e]]
    out += [n for c in classes for n in class_fitted(c)]
    return tuple(out)


@lru_cache(maxsize=1)
def _models() -> ModelCatalog:
    return load_model_catalog()


@dataclass(frozen=True)
class Predicted:
    ttft_ms: float
    itl_ms: float
    output_tokens_per_s: float
    calibrated: bool


def predict(row: Row) -> Predicted:
    gpu = resolve_gpu(gpu_catalog(), row.gpu)
    arch = _models().get(row.model).architecture
    req = InferenceRequest(
        architecture=arch,
        engine=row.engine,
        tensor_parallel_size=row.tp,
        gpu_memory_bytes=gpu.total_bytes,
        gpu=gpu,
        sequence_length=None,
    )
    traffic = Traffic(row.input_tokens, row.output_tokens, row.concurrency)
    p = estimate_performance(req, traffic).performance
    return Predicted(p.ttft_ms, p.itl_ms, p.output_tokens_per_s, p.calibrated)


def predict_with(row: Row, values: Mapping[str, float]) -> Predicted:
    # The perf constants enter no cached figure (only the step timing), so the caches stay.
    with calibration.overridden(**{k.replace(".", "__"): v for k, v in values.items()}):
        return predict(row)


#: The class whose fitted constants the transfer experiment carries to a class without a fit.
REFERENCE_CLASS: GpuClass = ("vllm", "hopper")


def transfer_class(cls: GpuClass) -> GpuClass:
    """The fitted class whose constants answer a row of ``cls`` in the transfer experiment: the
    class's own where it has a fit (a GPU of the class its rows never checked), else the
    reference class's."""
    return cls if cls in timing.CALIBRATED else REFERENCE_CLASS


@contextmanager
def _answered_with_fitted_class(cls: GpuClass, gpu_ref: str) -> Iterator[None]:
    """While open, answers of ``cls`` on ``gpu_ref`` take the constants of
    :func:`transfer_class` (only the efficiencies and overheads: every peak stays the GPU's
    own)."""
    table, checked = timing.CALIBRATED, timing.CHECKED_ON
    key = cls
    saved, saved_checked = table.get(key), checked.get(key)
    table[key] = table[transfer_class(cls)]
    checked[key] = (saved_checked or frozenset()) | {gpu_ref}
    try:
        yield
    finally:
        if saved is None:
            del table[key]
        else:
            table[key] = saved
        if saved_checked is None:
            del checked[key]
        else:
            checked[key] = saved_checked


def transferred(row: Row) -> Predicted:
    """The row as fitted constants answer it on the row's GPU (its class's own, else the
    reference class's: :func:`transfer_class`), with that GPU's own bandwidth, tensor rate and
    interconnect from the catalog: how far a fit carries to a GPU it never saw. An experiment
    for the report; the service's answer there stays a band."""
    gpu = resolve_gpu(gpu_catalog(), row.gpu)
    with _answered_with_fitted_class(gpu_class(row), gpu.ref):
        return predict(row)


def transferred_with(row: Row, values: Mapping[str, float]) -> Predicted:
    """:func:`transferred` with some register values overridden."""
    with calibration.overridden(**{k.replace(".", "__"): v for k, v in values.items()}):
        return transferred(row)


@lru_cache(maxsize=8)
def own_memory_fit(cls: GpuClass) -> float | None:
    """An experiment for a class with closed-loop rows and no fit (:func:`fitted_classes`):
    the memory efficiency that minimises the squared relative errors of its own fit rows' decode
    figures (ITL, output tokens/s), every other constant at the reference class's registered
    value and every peak the GPU's own (as :func:`transferred` carries them). Not registered:
    the service answers the class with its band. None for a fitted class or one without rows."""
    hold = held_out()
    subset = tuple(r for r in rows() if r.closed_loop and r.id not in hold and gpu_class(r) == cls)
    if cls in fitted_classes() or not subset:
        return None
    name = class_fitted(transfer_class(cls))[0]

    def f(x: list[float]) -> float:
        value = math.exp(x[0])
        if value > 1:
            return float("inf")
        total = 0.0
        for r in subset:
            e = errors(r, transferred_with(r, {name: value}))
            total += e["itl"] ** 2 + e["output_tokens_per_s"] ** 2
        return total

    start = [math.log(calibration.REGISTER[name].value)]
    return math.exp(_nelder_mead(f, start, 0.2, ITERATIONS_PER_CONSTANT)[0])


def band_holds(row: Row) -> dict[str, bool]:
    """Whether the service's band (uncalibrated answers) holds each measured figure."""
    gpu = resolve_gpu(gpu_catalog(), row.gpu)
    arch = _models().get(row.model).architecture
    req = InferenceRequest(
        architecture=arch,
        engine=row.engine,
        tensor_parallel_size=row.tp,
        gpu_memory_bytes=gpu.total_bytes,
        gpu=gpu,
        sequence_length=None,
    )
    band = estimate_performance(
        req, Traffic(row.input_tokens, row.output_tokens, row.concurrency)
    ).performance.band
    if band is None:
        return {}
    return {
        "itl": band.itl_ms[0] <= row.itl_ms <= band.itl_ms[1],
        "output_tokens_per_s": band.output_tokens_per_s[0]
        <= row.output_tokens_per_s
        <= band.output_tokens_per_s[1],
    }


def ttft_usable(row: Row) -> bool:
    """Whether the row's TTFT can be a prefill at all: the FLOPs it implies (2 per active
    parameter per prompt token over TTFT) must stay under the GPUs' dense peak. A faster one
    skipped work (a prefix-cache hit on a repeated prompt, a lower precision) and is neither
    fitted nor scored; nor is a TTFT the CSV leaves empty (one a publication's own setup biases,
    e.g. warm-up prompts repeated with prefix caching on)."""
    if row.ttft_ms is None:
        return False
    gpu = resolve_gpu(gpu_catalog(), row.gpu)
    assert gpu.performance is not None
    active = _models().get(row.model).counts.active
    implied = 2 * active * row.input_tokens / (row.ttft_ms / 1e3)
    return implied <= row.tp * gpu.performance.tensor_flops_per_s


def errors(row: Row, p: Predicted) -> dict[str, float]:
    """Relative errors (predicted − measured) / measured of the row's figures."""
    out = {
        "itl": (p.itl_ms - row.itl_ms) / row.itl_ms,
        "output_tokens_per_s": (p.output_tokens_per_s - row.output_tokens_per_s)
        / row.output_tokens_per_s,
    }
    if row.ttft_ms is not None and ttft_usable(row):
        key = "ttft_zero_load" if row.zero_load else "ttft_loaded"
        out[key] = (p.ttft_ms - row.ttft_ms) / row.ttft_ms
    return out


def _loss(values: Mapping[str, float], fit_set: tuple[Row, ...]) -> float:
    total = 0.0
    for row in fit_set:
        for name, e in errors(row, predict_with(row, values)).items():
            if name != "ttft_loaded":
                total += e * e
    return total


def _nelder_mead(
    f: Callable[[list[float]], float], x0: list[float], step: float, iterations: int
) -> list[float]:
    """Nelder-Mead on ``f`` from ``x0`` (a simplex of relative steps): a fixed number of
    iterations, deterministic."""
    n = len(x0)
    simplex = [list(x0)]
    for i in range(n):
        x = list(x0)
        x[i] = x[i] + step if x[i] == 0 else x[i] * (1 + step)
        simplex.append(x)
    scores = [f(x) for x in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=lambda i: scores[i])
        simplex = [simplex[i] for i in order]
        scores = [scores[i] for i in order]
        centroid = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        refl = [c + (c - w) for c, w in zip(centroid, worst, strict=True)]
        fr = f(refl)
        if fr < scores[0]:
            exp = [c + 2 * (c - w) for c, w in zip(centroid, worst, strict=True)]
            fe = f(exp)
            simplex[-1], scores[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < scores[-2]:
            simplex[-1], scores[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(centroid, worst, strict=True)]
            fc = f(con)
            if fc < scores[-1]:
                simplex[-1], scores[-1] = con, fc
            else:
                best = simplex[0]
                simplex = [best] + [
                    [b + 0.5 * (x - b) for b, x in zip(best, xs, strict=True)] for xs in simplex[1:]
                ]
                scores = [scores[0]] + [f(x) for x in simplex[1:]]
    return simplex[min(range(n + 1), key=lambda i: scores[i])]


#: Nelder-Mead iterations per fitted constant (five constants: 200 iterations).
ITERATIONS_PER_CONSTANT = 40


def fit(fit_set: tuple[Row, ...] | None = None) -> dict[str, float]:
    """The constants of the classes in ``fit_set`` (the fit rows by default) minimising the
    squared relative errors on it, searched together in log space from the register's values:
    each class's efficiencies (each in (0, 1]) and the engine's overheads."""
    fit_set = fit_rows() if fit_set is None else fit_set
    present = {gpu_class(r) for r in fit_set}
    names = fitted_names(tuple(c for c in fitted_classes() if c in present))
    start = [math.log(calibration.REGISTER[n].value) for n in names]
    efficiencies = [n for n in names if n.endswith("_efficiency")]

    def f(x: list[float]) -> float:
        values = {n: math.exp(v) for n, v in zip(names, x, strict=True)}
        if any(values[n] > 1 for n in efficiencies):
            return float("inf")
        return _loss(values, fit_set)

    best = _nelder_mead(f, start, 0.2, ITERATIONS_PER_CONSTANT * len(names))
    return {n: math.exp(v) for n, v in zip(names, best, strict=True)}


def _metric_errors(
    subset: tuple[Row, ...], values: Mapping[str, float] | None
) -> list[tuple[str, float]]:
    out = []
    for row in subset:
        p = predict(row) if values is None else predict_with(row, values)
        for metric, e in errors(row, p).items():
            if metric != "ttft_loaded":
                out.append((f"{row.id} {metric}", e))
    return out


def register_result() -> CalibrationResult:
    """The perf constants as bench/validate/calibration.py reports every fitted entry: the
    errors at the registered values on the fit rows, refitted leaving one row out and one
    model out, and on the held-out rows (one line per row and figure)."""
    from bench.validate.calibration import Result

    fitted = fit_rows()
    names = fitted_names()
    registered = {n: calibration.REGISTER[n].value for n in names}
    loo: list[tuple[str, float]] = []
    for row in fitted:
        loo += _metric_errors((row,), fit(tuple(r for r in fitted if r is not row)))
    lomo: list[tuple[str, float]] = []
    for model in dict.fromkeys(r.model for r in fitted):
        rest = tuple(r for r in fitted if r.model != model)
        values = fit(rest)
        lomo += _metric_errors(tuple(r for r in fitted if r.model == model), values)
    hold = held_out()
    fitted_set = fitted_classes()
    held = tuple(r for r in rows() if r.id in hold and gpu_class(r) in fitted_set)
    refit = fit(fitted)
    return Result(
        names=names,
        registered=registered,
        refit=refit,
        in_sample=_metric_errors(fitted, None),
        loo=loo,
        lomo=lomo,
        held_out=_metric_errors(held, None),
        note="one line per row and figure (ITL, output tokens/s, zero-load TTFT); the rows, "
        "the split and the per-row errors are in the performance section above",
        held_out_refit=_metric_errors(held, refit),
    )


def main(argv: list[str]) -> int:
    if "--fit" in argv:
        for name, value in fit().items():
            print(f"{name} = {value:.6g}")
        return 0
    from bench.validate.performance_report import report  # the report builds on this module

    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
