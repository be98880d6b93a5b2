"""``transformers``: ``model.generate`` with DynamicCache, as ``torch.cuda.max_memory_allocated``
sees it (no CUDA context: the allocator's figure), on top of the generic loop.

What differs from :mod:`.generic`:

- pipeline "parallelism" is accelerate's ``device_map``: layers on consecutive GPUs, no NCCL
  (tensors move with copies); accelerate's hooks move the model's outputs back to the input
  device, so the first GPU receives an fp32 copy of the prefill logits;
- GPTQ 4-bit runs on exllama v2 (AutoGPTQ / optimum), whose per-GPU scratch is the largest
  quantized layer dequantized to fp16 plus its fp32 output for ``EXLLAMA_MAX_INPUT_LENGTH``
  (2048) input tokens, the size its ``exllama_set_max_input_length`` default reserves;
- checkpoints whose kernels the GPU lacks are dequantized to bf16 at load: fine-grained fp8
  below compute capability 8.9 (``FineGrainedFP8HfQuantizer.validate_environment``), mxfp4
  below 7.5 (``Mxfp4HfQuantizer``): their weights then take 2 bytes each;
- options for older releases: ``logits_fp32_upcast`` (before 4.45 the all-position logits are
  upcast to fp32 inside the forward) and ``rope_cache_per_layer`` (before 4.40 every layer keeps
  cos and sin caches of ``max_position_embeddings`` rows in the model dtype).
"""

from __future__ import annotations

from typing import ClassVar

from service.estimator.engines.base import (
    DtypeChoice,
    EngineSettings,
    Option,
    StageArgs,
    StageBuild,
)
from service.estimator.engines.generic import LOGITS_ALL_POSITIONS, GenericEngine
from service.estimator.engines.overhead import OverheadTerms, framework_overhead
from service.estimator.formats import WeightFormat
from service.estimator.gpu import GpuSpec
from service.estimator.model import Architecture
from service.estimator.units import GIB, MIB
from service.estimator.weights import Placement

__all__ = ["EXLLAMA_MAX_INPUT_LENGTH", "TransformersEngine", "exllama_scratch_bytes"]

# exllama v2 (AutoGPTQ / optimum) sizes its per-device scratch for this many input tokens.
EXLLAMA_MAX_INPUT_LENGTH = 2048
# Below these compute capabilities transformers dequantizes the checkpoint to bf16 at load.
_NATIVE_CAPABILITY = {
    "fp8-block": (8, 9),
    "fp8-tensor": (8, 9),
    "fp8-channel": (8, 9),
    "mx": (7, 5),
}


def exllama_scratch_bytes(arch: Architecture, tp: int) -> int:
    """exllama v2's per-GPU scratch: the largest quantized layer dequantized to fp16
    (in × out × 2) plus its fp32 output for 2048 input tokens (out × 2048 × 4)."""
    best = 0
    for m in arch.linear_modules:
        if m.component in ("lm_head", "router"):
            continue
        best = max(
            best,
            m.in_features * m.out_features // tp * 2
            + m.out_features * EXLLAMA_MAX_INPUT_LENGTH * 4,
        )
    return best + 256


def rope_cache_bytes_per_layer(arch: Architecture, dtype_bytes: float) -> int:
    """A cos and a sin cache of ``max_position_embeddings`` rows (transformers < 4.40)."""
    return int(2 * (arch.max_position_embeddings or 0) * arch.rope_dim * dtype_bytes)


class TransformersEngine(GenericEngine):
    name: ClassVar[str] = "transformers"
    summary: ClassVar[str] = "transformers generate with DynamicCache (allocator peak)"
    options: ClassVar[tuple[Option, ...]] = (
        LOGITS_ALL_POSITIONS,
        Option(
            "logits_fp32_upcast",
            bool,
            "transformers: the all-position prefill logits are upcast to fp32 inside the "
            "forward (transformers < 4.45).",
            default=False,
        ),
        Option(
            "rope_cache_per_layer",
            bool,
            "transformers: every layer keeps cos/sin caches of max_position_embeddings rows "
            "(transformers < 4.40).",
            default=False,
        ),
    )

    def logits_fp32(self, s: EngineSettings) -> bool:
        return bool(s["logits_fp32_upcast"])

    def resolve_dtype(
        self,
        arch: Architecture,
        fmt: WeightFormat,
        s: EngineSettings,
        gpu: GpuSpec | None,
        named: bool = False,
    ) -> DtypeChoice:
        choice = super().resolve_dtype(arch, fmt, s, gpu, named)
        needed = _NATIVE_CAPABILITY.get(fmt.kind)
        cc = gpu.compute_capability if gpu is not None else None
        if needed is None or cc is None or cc >= needed:
            return choice
        note = (
            f"{fmt.name} needs compute capability {needed[0]}.{needed[1]} in transformers; the "
            f"GPU has {cc[0]}.{cc[1]}, so the checkpoint is dequantized to bf16 at load"
        )
        return DtypeChoice("bf16", "bf16", (*choice.notes, note), choice.unsupported)

    def first_stage_logit_rows(self, s: EngineSettings, prompt: int) -> int:
        return prompt if s["logits_all_positions"] else 1

    def placement(self, arch: Architecture, s: EngineSettings, act_bytes: float) -> Placement:
        if not s["rope_cache_per_layer"]:
            return Placement()
        per_layer = rope_cache_bytes_per_layer(arch, act_bytes)
        note = f"per-layer rotary caches (transformers < 4.40): {per_layer / MIB:.1f} MiB per layer"
        return Placement(extra_per_layer=per_layer, extra_notes=(note,))

    def overheads(
        self, s: EngineSettings, tp: int, pp: int, layers_on_gpu: int, gpu: GpuSpec | None
    ) -> tuple[OverheadTerms, OverheadTerms]:
        # device_map pipeline stages exchange tensors by copies, not NCCL.
        return framework_overhead(tp, pp, uses_nccl=tp > 1, gpu=gpu), OverheadTerms()

    def stage(self, args: StageArgs) -> StageBuild:
        if args.weight_format_kind == "gptq" and args.weight_format_bits == 4:
            scratch = exllama_scratch_bytes(args.arch, args.tp)
            note = f"GPTQ 4-bit exllama v2 scratch buffer {scratch / GIB:.3f} GiB per GPU"
            return StageBuild(fixed_activation=scratch, notes=(note,))
        return StageBuild()
