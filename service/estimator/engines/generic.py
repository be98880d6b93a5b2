"""``generic``: a plain PyTorch serving loop, charged against the driver's whole total.

Prefill then decode with a growing KV cache (transformers' DynamicCache layout), flash
attention, the logits of the last position only. A GPU holds the weights, the workload's KV
cache and the larger of the prefill and decode transients:

- prefill = KV(prompt) + max(the layers' transient, the logits);
- decode = KV(total) + DynamicCache's ``torch.cat`` copy of one layer's K + the decoded
  position's logits and sampling (calibration ``transformers.sampling_bytes_per_logit``) +
  one token's layer transient.

Option ``logits_all_positions``: the prefill computes the logits of every position (a plain
forward, or transformers before 4.45).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from service.estimator.calibration import value
from service.estimator.engines.base import Engine, EngineSettings, Option
from service.estimator.forward import prefill_transient

if TYPE_CHECKING:
    from service.estimator.engines.serving import ServingSetup, Stage

__all__ = ["GenericEngine"]

LOGITS_ALL_POSITIONS = Option(
    "logits_all_positions",
    bool,
    "generic, transformers: the prefill computes the logits of every position (a plain "
    "forward, or transformers < 4.45 generate), not only the last.",
    default=False,
)


class GenericEngine(Engine):
    name: ClassVar[str] = "generic"
    summary: ClassVar[str] = "a plain PyTorch serving loop, charged against the driver's total"
    options: ClassVar[tuple[Option, ...]] = (LOGITS_ALL_POSITIONS,)

    def logits_fp32(self, s: EngineSettings) -> bool:
        """Whether all-position prefill logits are upcast to fp32 inside the forward."""
        return False

    def first_stage_logit_rows(self, s: EngineSettings, prompt: int) -> int:
        """Rows of fp32 logits the first pipeline stage receives back (accelerate's hooks)."""
        return 0

    def sequence_cost(
        self, setup: ServingSetup, stage: Stage, seq_len: int, prompt: int
    ) -> tuple[int, int]:
        """Every workload term is proportional to the number of sequences, so a GPU holds
        ``fixed + seqs × (kv + act)``: the searches solve for the batch directly."""
        c = setup.coeffs
        s = setup.settings
        kv_pre = stage.kv.prefill_bytes(prompt)
        kv_dec = stage.kv.decode_bytes(seq_len)
        fwd = prefill_transient(c, 1, prompt)
        if stage.is_last:
            if s["logits_all_positions"]:
                per_row = c.logit_row if self.logits_fp32(s) else c.vocab * c.dtype_bytes
                logits = prompt * per_row
            else:
                logits = c.logit_row
            dec_extra = c.logit_row + c.vocab * value("transformers.sampling_bytes_per_logit")
        elif stage.index == 0:
            logits = self.first_stage_logit_rows(s, prompt) * c.vocab * 4
            dec_extra = 0
        else:
            logits = 0
            dec_extra = 0
        cat = kv_dec // (2 * (stage.kv.layers or 1))  # torch.cat: one layer's K twice
        peak_pre = kv_pre + max(fwd, logits)
        peak_dec = kv_dec + cat + dec_extra + c.per_token if seq_len > prompt else 0
        return kv_dec, int(max(peak_pre, peak_dec) - kv_dec)
