"""SGLang's start-up memory rules by release, as data: which release line a version belongs to
and the defaults each line derives from the GPU and the layout.

Read from the released wheels' Python source (public repository sgl-project/sglang at the tag
of each release): ``sglang/srt/server_args.py`` (``ServerArgs.__post_init__`` up to 0.5.2,
``ServerArgs._handle_gpu_memory_settings`` 0.5.3 - 0.5.18),
``sglang/srt/arg_groups/memory_hook.py`` (``handle_gpu_memory_settings``,
``reserve_for_graph_mb``, ``adjust_mem_fraction_for_vlm``; 0.5.20 - 0.5.23),
``sglang/srt/model_executor/model_runner.py`` (``profile_max_num_token``, ``init_memory_pool``),
``sglang/srt/configs/model_config.py`` (``is_hybrid_swa_model``). Releases read: those in
:data:`READ`; a version between two of them takes the rules of the one before, and an
assumption says it was not read.

``mem_fraction_static`` when the caller sets none (``gpu`` = the GPU's memory in MiB as
``nvidia-smi --query-gpu=memory.total`` prints it, ``ps`` = TP × PP):

- line A (0.2.15 - 0.4.5): a table by TP size only;
- line B (0.4.6): the table up to 81920 MiB, above it ``(gpu − 13 GiB) / gpu``;
- line C (0.4.7): the table (by ``ps``) up to 81920 MiB, else 0.88; 0.79 above 180000 MiB;
  above 96 GiB ``min(f + 48 GiB · (1 − f) / gpu, (gpu − 18 GiB) / gpu)``;
- line D (0.4.8 - 0.5.2): ``round((gpu − reserved) / gpu, 3)`` with ``reserved`` a tier of
  the GPU's memory growing with ``ps``;
- line E (0.5.3 - 0.5.19) and F (0.5.20 - 0.5.23): ``reserved`` = 512 MiB + 1.5 MiB per
  token of ``max(chunked_prefill_size, 2048)`` + 2 MiB per decode CUDA-graph batch size +
  ``ps / 8`` GiB + the prefill CUDA graph's (8 MiB per captured size, 1.5 GiB for MLA; on by
  default from 0.5.10), at least 10 GiB on GPUs above 60 GiB. F differs in its 24 - 35 GiB
  tier (chunk 4096, batch 48) and its fallback without a GPU reading (0.95).

Lines D - F then scale a multimodal model's fraction by its vision tower (from 0.4.9).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.estimator.errors import InvalidRequest

__all__ = [
    "DEFAULT_VERSION",
    "LINES",
    "READ",
    "FractionInputs",
    "Line",
    "Release",
    "chunked_prefill_default",
    "cuda_graph_max_bs_default",
    "fraction_default",
    "hybrid_swa",
    "max_num_reqs",
    "prefill_graph_sizes",
    "release",
    "request_table_rows",
    "running_requests",
    "vlm_factor",
]

Version = tuple[int, int, int]

#: The releases whose source was read (and that the tests' worked examples cover).
READ: frozenset[Version] = frozenset(
    {
        (0, 2, 15),
        (0, 3, 0),
        (0, 3, 6),
        (0, 4, 0),
        (0, 4, 3),
        (0, 4, 4),
        (0, 4, 5),
        (0, 4, 6),
        (0, 4, 7),
        (0, 4, 8),
        (0, 4, 9),
        (0, 4, 10),
        (0, 5, 1),
        (0, 5, 2),
        (0, 5, 3),
        (0, 5, 4),
        (0, 5, 5),
        (0, 5, 6),
        (0, 5, 8),
        (0, 5, 10),
        (0, 5, 12),
        (0, 5, 15),
        (0, 5, 18),
        (0, 5, 20),
        (0, 5, 23),
    }
)
OLDEST: Version = min(READ)
NEWEST: Version = max(READ)
DEFAULT_VERSION = ".".join(map(str, NEWEST))

GIB_MIB = 1024  # SGLang's thresholds are written in MiB: n GiB = n × 1024


@dataclass(frozen=True, slots=True)
class Line:
    """A range of releases sharing one rule for the default ``mem_fraction_static``."""

    name: str
    first: Version
    last: Version
    rule: str

    @property
    def span(self) -> str:
        a, b = ".".join(map(str, self.first)), ".".join(map(str, self.last))
        return a if a == b else f"{a} – {b}"


LINES: tuple[Line, ...] = (
    Line("A", (0, 2, 15), (0, 4, 5), "a table by TP size (0.88 at TP 1)"),
    Line("B", (0, 4, 6), (0, 4, 6), "the TP table; above 81920 MiB (gpu − 13 GiB) / gpu"),
    Line("C", (0, 4, 7), (0, 4, 7), "the TP × PP table up to 81920 MiB, larger GPUs by memory"),
    Line("D", (0, 4, 8), (0, 5, 2), "(gpu − reserved) / gpu, reserved a tier by GPU memory"),
    Line(
        "E",
        (0, 5, 3),
        (0, 5, 19),
        "(gpu − reserved) / gpu, reserved from the chunk, graph batch sizes and TP × PP",
    ),
    Line("F", (0, 5, 20), (0, 5, 23), "as E, with larger defaults on 24 – 35 GiB GPUs"),
)

# Change points of the rules that moved independently of the fraction's line.
_TP_TABLES: tuple[tuple[Version, tuple[tuple[int, float], ...]], ...] = (
    # (TP at least, fraction), largest first; server_args.py of 0.2.15 / 0.3.6 / 0.4.0.
    ((0, 0, 0), ((16, 0.79), (8, 0.83), (4, 0.85), (2, 0.87), (1, 0.88))),
    ((0, 3, 6), ((16, 0.79), (8, 0.82), (4, 0.85), (2, 0.87), (1, 0.88))),
    ((0, 4, 0), ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))),
)
# Line E/F tiers: (below this many MiB, chunked_prefill_size, decode max bs at TP < 4, at ≥ 4).
_Tier = tuple[int | None, int, int, int]
_TIERS: tuple[tuple[Version, tuple[_Tier, ...]], ...] = (
    (
        (0, 5, 3),
        (
            (20 * GIB_MIB, 2048, 8, 8),
            (35 * GIB_MIB, 2048, 16, 80),
            (60 * GIB_MIB, 4096, 32, 160),
            (90 * GIB_MIB, 8192, 256, 512),
            (160 * GIB_MIB, 8192, 256, 512),
            (None, 16384, 512, 512),
        ),
    ),
    (
        (0, 5, 5),
        (
            (20 * GIB_MIB, 2048, 8, 8),
            (35 * GIB_MIB, 2048, 24, 80),
            (60 * GIB_MIB, 4096, 32, 160),
            (90 * GIB_MIB, 8192, 256, 512),
            (160 * GIB_MIB, 8192, 256, 512),
            (None, 16384, 512, 512),
        ),
    ),
    (
        (0, 5, 20),
        (
            (20 * GIB_MIB, 2048, 8, 8),
            (35 * GIB_MIB, 4096, 48, 160),
            (60 * GIB_MIB, 4096, 32, 160),
            (90 * GIB_MIB, 8192, 256, 512),
            (160 * GIB_MIB, 8192, 256, 512),
            (None, 16384, 512, 512),
        ),
    ),
)
# Defaults when SGLang cannot read the GPU's memory (0.4.8+): chunk 4096, graph batch 160.
_NO_GPU_CHUNK, _NO_GPU_MAX_BS = 4096, 160
_NO_GPU_FRACTION: tuple[tuple[Version, float], ...] = (((0, 0, 0), 0.88), ((0, 5, 20), 0.95))

_VLM_ADJUSTMENT = (0, 4, 9)  # adjust_mem_fraction_for_vlm
_PREFILL_GRAPH_ON = (0, 5, 10)  # piecewise / prefill CUDA graph captured by default
PREFILL_GRAPH_CONTEXT_CAP = (0, 5, 15)  # its largest size capped by --context-length
_DECODE_TERM_NEEDS_GRAPHS = (0, 5, 15)  # reserve_for_graph_mb skips disabled decode graphs
_DECODE_BS_RUNNING_CAP = (0, 5, 23)  # decode max bs lowered to --max-running-requests
_HALF_TOKENS_CAP = (0, 5, 10)  # max_num_reqs ≤ max_total_num_tokens // 2
_FLAG_CAPPED_BY_ESTIMATE = (0, 5, 10)  # --max-running-requests capped by the estimate
_FLAG_CAPPED_BY_HALF = (0, 5, 23)  # ... then by tokens // 2 instead
# ReqToTokenPool(size = max_num_reqs + spare): one spare row up to 0.4.7, none 0.4.8 - 0.5.11.
_SPARE_ROW: tuple[tuple[Version, int], ...] = (((0, 0, 0), 1), ((0, 4, 8), 0), ((0, 5, 12), 1))
# Hybrid sliding-window pool: every model with a sliding window from 0.4.10, listed
# architectures only from 0.5.8 (configs/model_config.py is_hybrid_swa_model).
_SWA_ANY = (0, 4, 10)
_SWA_LISTED: tuple[tuple[Version, frozenset[str]], ...] = (
    (
        (0, 5, 8),
        frozenset(
            {"Llama4ForConditionalGeneration", "GptOssForCausalLM", "MiMoV2FlashForCausalLM"}
        ),
    ),
    (
        (0, 5, 15),
        frozenset(
            {
                "Llama4ForConditionalGeneration",
                "GptOssForCausalLM",
                "MiMoV2FlashForCausalLM",
                "DeepseekV4ForCausalLM",
                "Step3p5ForCausalLM",
                "Gemma4ForCausalLM",
                "Gemma4ForConditionalGeneration",
                "LagunaForCausalLM",
            }
        ),
    ),
)
#: swa_full_tokens_ratio: sliding-window slots per full-attention slot.
SWA_FULL_TOKENS_RATIO = 0.8

# X.Y[.Z], a PEP 440 pre/post/dev suffix and a local part (``0.4.8.post1``, ``0.5.0rc2+cu124``).
_VERSION = re.compile(
    r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?(?:[.-]?(?:post|rc|dev|a|b)\d*)*(?:\+[a-z0-9.]+)?"
)


def _at(table: tuple[tuple[Version, object], ...], v: Version) -> object:
    """The value of a change-point table at version ``v`` (the last change at or before it)."""
    out = table[0][1]
    for since, value in table:
        if v >= since:
            out = value
    return out


@dataclass(frozen=True, slots=True)
class Release:
    """A version as modelled: its number, its line and what was assumed to place it."""

    version: Version
    line: Line
    notes: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return ".".join(map(str, self.version))

    def since(self, v: Version) -> bool:
        return self.version >= v


def release(text: str) -> Release:
    """The release ``text`` names (``0.5.6``, ``v0.4.8.post1``), placed on its line; a version
    outside the modelled range takes the nearest line, one not read takes the rules of the
    release before it, each with an assumption saying so. Unparseable: a 422 naming the field."""
    m = _VERSION.fullmatch(text.strip().lower())
    if m is None:
        raise InvalidRequest(
            f"engine_options.version {text[:40]!r} is not a release number; give one such as "
            f"{DEFAULT_VERSION!r} (SGLang releases {'.'.join(map(str, OLDEST))} to "
            f"{DEFAULT_VERSION} are modelled)",
            field="engine_options.version",
        )
    v = (int(m[1]), int(m[2]), int(m[3] or 0))
    notes: tuple[str, ...] = ()
    modelled = v
    if v < OLDEST:
        modelled = OLDEST
        notes = (f"SGLang {text} is older than the oldest modelled release; modelled as line A",)
    elif v > NEWEST:
        modelled = NEWEST
        notes = (
            f"SGLang {text} is newer than the newest modelled release {DEFAULT_VERSION}; "
            f"modelled as line {LINES[-1].name}",
        )
    line = next(ln for ln in LINES if ln.first <= modelled <= ln.last)
    if modelled == v and v not in READ:
        notes = (
            f"SGLang {text} was not among the releases read; modelled with the rules of the "
            f"nearest earlier release read (line {line.name}, {line.span})",
        )
    return Release(modelled, line, notes)


def _tier(rel: Release, gpu_mib: int) -> _Tier:
    tiers: tuple[_Tier, ...] = _at(_TIERS, rel.version)  # type: ignore[assignment]
    return next(t for t in tiers if t[0] is None or gpu_mib < t[0])


def chunked_prefill_default(rel: Release, gpu_mib: int | None) -> int:
    """``chunked_prefill_size`` when the caller sets none."""
    v = rel.version
    if v < (0, 4, 8):
        small = gpu_mib is not None and gpu_mib < 25000
        if v >= (0, 3, 6) and small:
            return 2048
        if v >= (0, 4, 7) and gpu_mib is not None and gpu_mib > 180000:
            return 16384
        return 8192
    if gpu_mib is None:
        return _NO_GPU_CHUNK
    if v < (0, 5, 3):
        return 2048 if gpu_mib < 35 * GIB_MIB else 8192 if gpu_mib < 160 * GIB_MIB else 16384
    return _tier(rel, gpu_mib)[1]


def cuda_graph_max_bs_default(rel: Release, gpu_mib: int | None, tp: int) -> int:
    """The largest decode batch SGLang captures a CUDA graph for, when the caller sets none."""
    v = rel.version
    if gpu_mib is None:
        return _NO_GPU_MAX_BS
    small = gpu_mib < 25000
    if v < (0, 3, 6):
        return 160
    if v < (0, 4, 0):
        return 4 if small else 160
    if v < (0, 4, 8):
        if small:
            return 8 if v < (0, 4, 3) or tp < 4 else 80
        if v < (0, 4, 6):
            return 160
        if v < (0, 4, 7):
            return 256 if gpu_mib > 81920 else 160
        return 512 if gpu_mib > 180000 else 256 if gpu_mib > 96 * GIB_MIB else 160
    if v < (0, 5, 3):
        if gpu_mib < 35 * GIB_MIB:
            return 8 if tp < 4 else 80
        return 512 if gpu_mib > 160000 else 256 if gpu_mib > 90 * GIB_MIB else 160
    _, _, small_tp, large_tp = _tier(rel, gpu_mib)
    return small_tp if tp < 4 else large_tp


def decode_max_bs(rel: Release, default: int, max_running_requests: int | None) -> int:
    """0.5.23 lowers the default decode graph batch to ``--max-running-requests``."""
    if max_running_requests is not None and rel.since(_DECODE_BS_RUNNING_CAP):
        return min(default, max_running_requests)
    return default


def prefill_graph_sizes(max_tokens: int) -> int:
    """How many token counts the prefill (piecewise) CUDA graph captures up to ``max_tokens``:
    4 – 32 step 4, 48 – 256 step 16, 288 – 512 step 32, 576 – 1024 step 64, 1280 – 4096 step
    256, then step 512 (``generate_prefill_cuda_graph_batch_sizes``)."""
    steps = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256))
    count = sum(len(range(a, min(b, max_tokens) + 1, s)) for a, b, s in steps)
    return count + len(range(4608, max_tokens + 1, 512))


def vlm_factor(vit_layers: int, vit_hidden: int) -> float:
    """``adjust_mem_fraction_for_vlm``: 0.95, scaled by 10 % per doubling of the vision tower's
    layers × hidden² over a ViT-L/14 (24 × 1024²), kept within [0.8, 1.05]."""
    ratio = vit_layers * vit_hidden**2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


@dataclass(frozen=True, slots=True)
class FractionInputs:
    """What SGLang's default ``mem_fraction_static`` depends on (``gpu_mib``: nvidia-smi)."""

    gpu_mib: int | None
    tp: int
    pp: int
    chunked_prefill_size: int
    decode_max_bs: int
    decode_graphs: bool
    prefill_graph_max_tokens: int
    mla: bool
    multimodal: bool
    vit_layers: int = 24
    vit_hidden: int = 1024


def prefill_graph_on(rel: Release, x: FractionInputs) -> bool:
    """Whether the prefill (piecewise) CUDA graph is captured: by default from 0.5.10, but not
    with pipeline parallelism or for multimodal models (``_handle_piecewise_cuda_graph``)."""
    return rel.since(_PREFILL_GRAPH_ON) and x.pp == 1 and not x.multimodal


def reserved_mib(rel: Release, x: FractionInputs) -> float:
    """Lines E/F: what SGLang keeps out of ``mem_fraction_static`` for activations and graphs."""
    assert x.gpu_mib is not None
    reserved = 512 + 1.5 * max(x.chunked_prefill_size, 2048) + x.tp * x.pp / 8 * 1024
    if x.decode_graphs or not rel.since(_DECODE_TERM_NEEDS_GRAPHS):
        reserved += 2 * x.decode_max_bs
    if prefill_graph_on(rel, x):
        reserved += 1.5 * 1024 if x.mla else 8 * prefill_graph_sizes(x.prefill_graph_max_tokens)
    if x.gpu_mib > 60 * GIB_MIB:
        reserved = max(reserved, 10 * 1024)
    return reserved


def _tp_table(rel: Release, size: int) -> float:
    table: tuple[tuple[int, float], ...] = _at(_TP_TABLES, rel.version)  # type: ignore[assignment]
    return next(f for at_least, f in table if size >= at_least)


def _line_d_reserved(gpu: int, ps: int) -> float:
    if gpu < 35 * GIB_MIB:
        return (2.8 + ps / 10) * 1024
    if gpu < 90 * GIB_MIB:
        return (9.5 + ps / 2) * 1024
    if gpu < 160 * GIB_MIB:
        return (12 + ps / 2) * 1024
    return 32 * 1024


def fraction_default(rel: Release, x: FractionInputs) -> float:
    """``mem_fraction_static`` as the release derives it when the caller sets none."""
    gpu, name = x.gpu_mib, rel.line.name
    ps = x.tp * x.pp
    if name == "A":
        return _tp_table(rel, x.tp)
    if name == "B":
        return _tp_table(rel, x.tp) if gpu is None or gpu <= 81920 else (gpu - 13 * 1024) / gpu
    if name == "C":
        if gpu is None:
            return _tp_table(rel, ps)
        f = _tp_table(rel, ps) if gpu <= 81920 else 0.88
        if gpu > 180000:
            return 0.79
        if gpu > 96 * GIB_MIB:
            return min(f + 48 * 1024 * (1 - f) / gpu, (gpu - 18 * 1024) / gpu)
        return f
    if gpu is None:
        f = float(_at(_NO_GPU_FRACTION, rel.version))  # type: ignore[arg-type]
    elif name == "D":
        f = round((gpu - _line_d_reserved(gpu, ps)) / gpu, 3)
    else:
        f = round((gpu - reserved_mib(rel, x)) / gpu, 3)
    if x.multimodal and rel.since(_VLM_ADJUSTMENT):
        f *= vlm_factor(x.vit_layers, x.vit_hidden)
    return f


def hybrid_swa(rel: Release, architectures: tuple[str, ...], has_sliding: bool) -> bool:
    """Whether the release gives the model a hybrid pool (sliding-window layers hold fewer
    slots): every model with sliding layers in 0.4.10 – 0.5.7, listed architectures after."""
    if not has_sliding or not rel.since(_SWA_ANY):
        return False
    if rel.version < _SWA_LISTED[0][0]:
        return True
    listed: frozenset[str] = _at(_SWA_LISTED, rel.version)  # type: ignore[assignment]
    return any(a in listed for a in architectures)


def max_num_reqs(rel: Release, tokens: int, context: int, flag: int | None) -> int:
    """The request slots SGLang sizes its req_to_token table for (``init_memory_pool``)."""
    estimated = max(2048, min(4096, int(tokens / context * 512)))
    if flag is None:
        return min(estimated, tokens // 2) if rel.since(_HALF_TOKENS_CAP) else estimated
    if rel.since(_FLAG_CAPPED_BY_HALF):
        return min(flag, tokens // 2)
    if rel.since(_FLAG_CAPPED_BY_ESTIMATE):
        return min(flag, estimated)
    return flag


def request_table_rows(rel: Release, reqs: int) -> int:
    """Rows of the req_to_token table: the request slots plus the release's spare row."""
    spare: int = _at(_SPARE_ROW, rel.version)  # type: ignore[assignment]
    return reqs + spare


def running_requests(tokens: int, flag: int | None, reqs: int) -> int:
    """``max_running_requests`` as the scheduler reports it: the flag (or half the pool's
    tokens), at most the request slots."""
    return min(flag if flag is not None else tokens // 2, reqs)
