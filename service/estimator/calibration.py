"""The calibration register: every constant of the estimator that stands for a measured effect.

Most of the estimator is mechanism: bytes read off the architecture and the engines' own code.
What remains are a few effects no formula derives (driver state, library workspaces,
communication buffers, allocator behaviour, a kernel's scratch): each is one
:class:`Calibrated` entry below, with its value, the mechanism it stands for, how it was
obtained and the validation rows it was fitted on. Code reads the value through
:func:`value` (one place); ``make validate`` reports, for each entry, its error on the rows it
was fitted on and on rows it was not (leave one out), in docs/accuracy.md; tests pin each
value, so that changing one is a decision, not an accident.

Row ids name a file of ``bench/validate/data/measured`` (or ``bench/validate/data``) and its
row key, e.g. ``vllm_v0.19_h100:llama31-8b-tp2``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["REGISTER", "Calibrated", "overridden", "value"]

MIB = 2**20

_VLLM_H100 = "vllm_v0.19_h100"


def _rows(source: str, *keys: str) -> tuple[str, ...]:
    return tuple(f"{source}:{k}" for k in keys)


@dataclass(frozen=True)
class Calibrated:
    """One fitted or measured constant (module docstring)."""

    name: str
    value: float
    unit: str
    mechanism: str
    source: str
    fitted_on: tuple[str, ...] = ()
    applies_to: str = ""
    # Why the value stays where it is when a refit on its rows moves it (bench/validate/
    # calibration.py refits each entry; tests/validation/test_calibration_register.py asks
    # for this reason when the refit differs by more than 5 %), and the refit the reason was
    # written against: when the refit moves more than 5 % from it, the reason is stale and the
    # test fails until someone reads the new refit and decides again.
    kept_over_refit: str = ""
    refit_when_kept: float | None = None


_ENTRIES: tuple[Calibrated, ...] = (
    Calibrated(
        "cuda.context_bytes_per_resident_thread",
        2060,
        "bytes per resident thread",
        "The CUDA context per thread the GPU can hold at once (multiprocessors × max resident "
        "threads per multiprocessor): the driver reserves local memory for every such thread "
        "(the 1 KiB default stack and more), which makes the context grow with the GPU.",
        "Least squares on relative error over public measurements of a bare context (lazy "
        "module loading) on eight GPUs, 107 MiB (RTX 4060 Ti) to 612 MiB (B200): "
        "bench/validate/data/cuda_context.csv, each row with its source.",
        fitted_on=_rows(
            "cuda_context",
            "invokeai_9413_rtx3090",
            "unsloth_8669_b200",
            "unsloth_zoo_1053_rtx6000ada",
            "torchcomms_777_h100",
            "mooncake_3973_h200",
            "mooncake_3973_a800",
            "llamacpp_23604_rtxpro6000",
            "llamacpp_23604_rtx4060ti",
        ),
        applies_to="every engine's CUDA context on an NVIDIA GPU of known multiprocessors",
    ),
    Calibrated(
        "cuda.library_workspace_bytes_per_resident_thread",
        993,
        "bytes per resident thread",
        "What vLLM's profiler reports as its non-torch increase on one GPU during the first "
        "forward: device memory the driver takes while the model's kernels first run, chiefly "
        "the context's local-memory reservation growing to the largest per-thread stack a "
        "launched kernel needs (CU_LIMIT_STACK_SIZE: the driver raises the per-thread stack "
        "for a launch as needed and never lowers it; the reservation is that stack × the "
        "GPU's resident threads), and the kernel modules loaded lazily. Under PyTorch the "
        "cuBLAS workspace is not part of it: PyTorch takes that from its caching allocator "
        "(aten/src/ATen/cuda/CublasHandlePool.cpp: getNewWorkspace), inside the torch peak.",
        "The median of vLLM v0.19's non-torch figure over the single-GPU rows (H100 SXM, "
        "270,336 resident threads): 256 MiB, so 993 B per resident thread. The same campaign's "
        "pipeline-parallel rows print 0.07 GiB, which this term does not describe. Only H100 "
        "rows were fitted on (no other GPU has a campaign that separates this term); the one "
        "other GPU with a single-GPU non-torch figure in a public log is an RTX 3090 on vLLM "
        "0.6.4 (vllm-project/vllm#10517), within 3 % there (docs/accuracy.md, held out).",
        fitted_on=_rows(
            _VLLM_H100,
            "codellama-7b",
            "dsv2-lite-tp1",
            "qwen25-7b-fp8dyn",
            "gemma2-9b",
            "gemma3-12b",
            "granite31-8b",
            "llama31-8b-kvfp8",
            "llama31-8b",
            "llama31-8b-qfp8",
            "llama31-8b-fp32",
            "llama31-8b-len2048",
            "llama31-8b-len32768",
            "qwen25-7b-kvfp8",
        ),
        applies_to="every engine, every GPU: fitted on H100 SXM rows only and carried to other "
        "GPUs through their resident threads (the mechanism's scale), uncalibrated there "
        "(checked on one RTX 3090 log only); answers say so",
    ),
    Calibrated(
        "nccl.tp_group_bytes",
        1832 * MIB,
        "bytes per GPU",
        "NCCL communicators of one tensor-parallel group: per-peer, per-channel buffers, "
        "NVLink SHARP / symmetric buffers on NVSwitch boards, and vLLM's two communicators "
        "(torch's ProcessGroupNCCL and PyNccl) plus its custom all-reduce buffer.",
        "vLLM v0.19's non-torch increase at TP 2 and 4 on H100 NVSwitch boards, less the "
        "library workspace, split with nccl.tp_peer_bytes by a least-squares line over TP.",
        fitted_on=_rows(
            _VLLM_H100,
            "llama31-8b-tp2",
            "llama31-8b-tp4",
            "llama33-70b-fp8dyn-tp2",
            "llama33-70b-fp8dyn-tp4",
            "mixtral-8x7b-tp2",
            "qwen25-7b-tp2",
        ),
        applies_to="TP >= 2 (fine-tuning: data-parallel groups too); vLLM: NVSwitch boards of "
        "Hopper and later, or an unknown GPU",
    ),
    Calibrated(
        "nccl.tp_peer_bytes",
        40 * MIB,
        "bytes per GPU per extra TP peer",
        "The part of the NCCL buffers that grows with each additional peer of the group.",
        "The slope of the same least-squares line as nccl.tp_group_bytes.",
        fitted_on=_rows(
            _VLLM_H100,
            "llama31-8b-tp2",
            "llama31-8b-tp4",
            "llama33-70b-fp8dyn-tp2",
            "llama33-70b-fp8dyn-tp4",
            "mixtral-8x7b-tp2",
            "qwen25-7b-tp2",
        ),
        applies_to="TP >= 2",
    ),
    Calibrated(
        "nccl.pp_peer_bytes",
        64 * MIB,
        "bytes per GPU",
        "Point-to-point (pipeline) communicators: channel buffers for one send/recv peer each way.",
        "NCCL's default channel buffer (NCCL_BUFFSIZE, 4 MiB) times its channels in each "
        "direction, rounded; not fitted (the vLLM PP rows report 0.07 GiB non-torch in all, "
        "below the library workspace, so they cannot separate this term).",
        applies_to="PP >= 2; vLLM TP groups without NVSwitch: twice this per peer (two "
        "communicators)",
    ),
    Calibrated(
        "vllm.cuda_graph_base_bytes",
        384 * MIB,
        "bytes per GPU",
        "vLLM's CUDA-graph memory pool: the fixed part of the captured decode graphs.",
        "A line over vLLM v0.19's measured CUDA-graph memory against the decoder layers on "
        "the GPU.",
        fitted_on=(f"{_VLLM_H100}:*cudagraph_actual_gib",),
        applies_to="vLLM without enforce_eager (outside its budget before 0.20, inside from 0.20)",
        kept_over_refit="the least-squares refit (418.8 MiB + 14.9 MiB per layer) lowers the "
        "squared error that one model sets (DeepSeek-V2-Lite's MLA graphs, -48 %, a shape the "
        "line does not describe) and is worse on the other rows: mean |error| over the 31 rows "
        "10.63 % at the registered pair against 10.83 % at the refit, median 4.56 % against "
        "6.05 %. On the public logs' printed graph memory (18 rows, held out) both are far off "
        "(mean 123 % against 116 %, median 57 % against 51 %): those rows capture other graph "
        "sizes (max_num_seqs, releases 0.10 - 0.16, other GPUs) than the line was fitted on, "
        "so they do not choose between two lines that differ by a few percent. The pool sits "
        "outside vLLM's budget before 0.20 and no scored public-log KV pool is on 0.20 or "
        "later, so neither moves a scored pool",
        refit_when_kept=418.8 * MIB,
    ),
    Calibrated(
        "vllm.cuda_graph_per_layer_bytes",
        17 * MIB,
        "bytes per GPU per decoder layer",
        "The per-layer nodes of vLLM's captured decode graphs.",
        "The slope of the same line as vllm.cuda_graph_base_bytes.",
        fitted_on=(f"{_VLLM_H100}:*cudagraph_actual_gib",),
        applies_to="vLLM without enforce_eager",
        kept_over_refit="as vllm.cuda_graph_base_bytes (one line, kept together)",
        refit_when_kept=14.9 * MIB,
    ),
    Calibrated(
        "transformers.sampling_bytes_per_logit",
        16,
        "bytes per vocabulary entry",
        "transformers' generate: logits processors and sampling on the fp32 scores of the "
        "decoded position (a few vocabulary-sized copies).",
        "Set when the transformers path was first written (a few fp32 copies of the scores); "
        "the Qwen speed-benchmark rows with a 1-token prompt, where decoding sets the peak, "
        "are the ones it moves (less the rows no single program can have produced).",
        fitted_on=("qwen_transformers_inference:*input_tokens=1",),
        applies_to="transformers / generic decode",
        kept_over_refit="the rows barely move it: at 16 their mean error is 1.71 % (worst "
        "-5.7 %), refitted without each row 1.65 % (worst +8.3 %); the refit, 93.6 B, would be "
        "23 fp32 copies of the scores, more than generate's processors make, so the value "
        "the mechanism gives (four fp32 copies) is kept",
        refit_when_kept=93.58,
    ),
    Calibrated(
        "training.fragmentation_fraction",
        0.05,
        "fraction of the allocated peak",
        "PyTorch's caching allocator reserves more than it hands out (block rounding, "
        "fragmentation): reserved beyond the allocated peak of a training step.",
        "Set when the fine-tuning estimator was first written; the published rows that report "
        "reserved memory (ms-swift) are the ones it moves.",
        fitted_on=("finetune_measurements:*reserved",),
        applies_to="fine-tuning",
        kept_over_refit="conservative on purpose: the refit, 0.024, comes from one "
        "publication's first steps (ms-swift, 29 rows; out of sample 2.9 % mean against 4.0 % "
        "at 0.05), while the allocator's fragmentation grows with churn over a run (varying "
        "sequence lengths, evaluation passes) that those rows do not show; a fraction too low "
        "turns into an OOM, one too high into 2.6 % of headroom",
        refit_when_kept=0.0241,
    ),
    Calibrated(
        "training.backward_work_intermediate",
        3,
        "copies of the widest intermediate",
        "The backward working set of one layer: the gradients of the widest intermediates "
        "(gated MLP or routed experts) alive at once.",
        "Set when the fine-tuning estimator was first written, from the gated MLP's backward "
        "(the gradients of gate, up and their product). No validation row moves it: in every "
        "traced and published run the loss path's backward transient, not a recomputed "
        "layer, sets the peak.",
        applies_to="fine-tuning, when a recomputed layer's backward sets the peak",
    ),
    Calibrated(
        "training.backward_work_hidden",
        4,
        "hidden-width rows",
        "Hidden-width gradients alive in a layer's backward (residual and norm gradients).",
        "As training.backward_work_intermediate; no validation row moves it either.",
        applies_to="fine-tuning, when a recomputed layer's backward sets the peak",
    ),
)

# The fit rows of bench/validate/data/measured/performance_vllm.csv (the others are held out
# by the fixed rule of bench/validate/performance.py, held_out), per GPU class: a class's
# efficiencies are fitted on its own rows, the engine's overheads on every class's.
_PERF_HOPPER_FIT_ROWS = _rows(
    "performance_vllm",
    "gpustack_qwen3_8b_c1",
    "gpustack_qwen3_8b_c4",
    "tt_qwen25_72b_tp2_128_128",
    "tt_qwen25_72b_tp2_1024_128",
    "tt_qwen25_72b_tp2_2048_128",
    "tt_qwen25_72b_tp2_4096_128",
)
# Hopper is the only fitted class: Ampere has no closed-loop rows, Ada's rows hold no usable
# zero-load TTFT out of the fit (bench/validate/performance.py, fitted_classes): both bands.
_PERF_FIT_ROWS = _PERF_HOPPER_FIT_ROWS
# Ada's fit rows (RTX 4090): what set the band's fast end (perf.band.memory_efficiency_high).
_PERF_ADA_FIT_ROWS = _rows(
    "performance_vllm",
    "vqe_qwen25_7b_c8",
    "vqe_qwen25_7b_c32",
    "vqe_qwen25_7b_c64",
    "vqe_qwen25_7b_pc_c1",
    "vqe_qwen25_7b_pc_c8",
    "vqe_qwen25_7b_pc_c16",
    "vqe_qwen25_7b_cmpl_c1",
    "vqe_qwen25_7b_cmpl_c8",
    "vqe_qwen25_7b_cmpl_c16",
)

_PERF_ENTRIES: tuple[Calibrated, ...] = (
    Calibrated(
        "perf.vllm.hopper.memory_efficiency",
        0.753,
        "fraction of the datasheet memory bandwidth",
        "The share of a Hopper GPU's peak memory bandwidth a vLLM step streams its weights and "
        "KV cache at (kernels never reach the peak: DRAM refresh, page switches, launch tails).",
        "Least squares on relative error of ITL, output tokens/s and zero-load TTFT over the "
        "Hopper fit rows of bench/validate/data/measured/performance_vllm.csv, fitted with the "
        "three vLLM overheads on every class's fit rows (python -m bench.validate.performance "
        "--fit).",
        fitted_on=_PERF_HOPPER_FIT_ROWS,
        applies_to="vLLM on hopper GPUs (H100, H200, H20, H800), 16-bit weights",
    ),
    Calibrated(
        "perf.vllm.hopper.compute_efficiency",
        0.698,
        "fraction of the datasheet dense tensor rate",
        "The share of a Hopper GPU's dense BF16 tensor rate a vLLM prefill reaches (GEMM tile "
        "efficiency, attention kernels, the non-GEMM work of a layer).",
        "Fitted with perf.vllm.hopper.memory_efficiency (same rows, same fit).",
        fitted_on=_PERF_HOPPER_FIT_ROWS,
        applies_to="vLLM on hopper GPUs, 16-bit weights",
    ),
    Calibrated(
        "perf.vllm.step_overhead_s",
        0.00144,
        "seconds per engine step",
        "What a vLLM step costs beyond its kernels' roofline: scheduling, input preparation, "
        "sampling, detokenization and the gaps between kernel launches.",
        "Fitted in the same fit as every class's efficiencies, on every class's fit rows.",
        fitted_on=_PERF_FIT_ROWS,
        applies_to="vLLM, every GPU",
    ),
    Calibrated(
        "perf.vllm.request_overhead_s",
        0.0236,
        "seconds per request",
        "What a request's time to first token holds beyond its prefill step: HTTP, the chat "
        "template and tokenization in the API server, the hand-off to the engine core and the "
        "first token's way back.",
        "Fitted in the same fit as every class's efficiencies, on every class's fit rows.",
        fitted_on=_PERF_FIT_ROWS,
        applies_to="vLLM, every GPU",
    ),
    Calibrated(
        "perf.vllm.sequence_overhead_s",
        8.4e-05,
        "seconds per step per decoded sequence",
        "What each sequence a vLLM step decodes adds on the CPU: the output processor "
        "detokenizes its new token and the API server streams it (vllm/v1/engine/"
        "output_processor.py, OutputProcessor.process_outputs; one pass per request per step).",
        "Fitted in the same fit as every class's efficiencies, on every class's fit rows.",
        fitted_on=_PERF_FIT_ROWS,
        applies_to="vLLM, every GPU",
    ),
    Calibrated(
        "perf.band.memory_efficiency_low",
        0.4,
        "fraction of the datasheet memory bandwidth",
        "The slow end of the memory efficiency an uncalibrated answer's band spans.",
        "Not fitted: an assumed range, wide enough to hold the decode efficiencies published "
        "benchmarks imply on GPUs without rows here (docs/performance.md, Bands).",
        applies_to="answers without calibration data",
    ),
    Calibrated(
        "perf.band.memory_efficiency_high",
        0.95,
        "fraction of the datasheet memory bandwidth",
        "The fast end of the memory efficiency an uncalibrated answer's band spans.",
        "Not fitted: set (from 0.9) to a round value above the highest efficiency measured on "
        "any class, the 0.922 the RTX 4090's fit rows give (bench/validate/performance.py, "
        "own_memory_fit over the rows listed); the band's hold on the Ada rows held out of that "
        "figure is in docs/performance.md. Rows: " + ", ".join(_PERF_ADA_FIT_ROWS) + ".",
        applies_to="answers without calibration data",
    ),
    Calibrated(
        "perf.band.compute_efficiency_low",
        0.25,
        "fraction of the datasheet dense tensor rate",
        "The slow end of the compute efficiency an uncalibrated answer's band spans.",
        "Not fitted: as perf.band.memory_efficiency_low.",
        applies_to="answers without calibration data",
    ),
    Calibrated(
        "perf.band.compute_efficiency_high",
        0.8,
        "fraction of the datasheet dense tensor rate",
        "The fast end of the compute efficiency an uncalibrated answer's band spans.",
        "Not fitted: as perf.band.memory_efficiency_low.",
        applies_to="answers without calibration data",
    ),
    Calibrated(
        "perf.band.overhead_factor_low",
        0.5,
        "times the vLLM overheads",
        "The fast end of an uncalibrated answer's band takes the fitted vLLM step and request "
        "overheads times this.",
        "Not fitted: as perf.band.memory_efficiency_low.",
        applies_to="answers without calibration data",
    ),
    Calibrated(
        "perf.band.overhead_factor_high",
        2.0,
        "times the vLLM overheads",
        "The slow end of an uncalibrated answer's band takes the fitted vLLM overheads times this.",
        "Not fitted: as perf.band.memory_efficiency_low.",
        applies_to="answers without calibration data",
    ),
)

_ENTRIES = (*_ENTRIES, *_PERF_ENTRIES)

REGISTER: Mapping[str, Calibrated] = MappingProxyType({e.name: e for e in _ENTRIES})

_overrides: dict[str, float] = {}


def value(name: str) -> float:
    """The value of register entry ``name`` (or its override inside :func:`overridden`)."""
    if name in _overrides:
        return _overrides[name]
    return REGISTER[name].value


@contextmanager
def overridden(**values: float) -> Iterator[None]:
    """Validation only: evaluate with other values (leave-one-out refits). Callers must drop
    the estimator's caches around it (:func:`service.estimator.memo.clear`)."""
    names = {k.replace("__", "."): v for k, v in values.items()}
    unknown = set(names) - set(REGISTER)
    if unknown:
        raise KeyError(f"not in the register: {', '.join(sorted(unknown))}")
    saved = dict(_overrides)
    _overrides.update(names)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)
