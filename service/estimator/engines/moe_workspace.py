"""vLLM's fused-MoE buffers per forward, by release line (per TP rank, bytes).

Symbols: ``M`` tokens reaching the layer, ``k`` experts per token, ``H`` hidden size, ``I`` the
expert intermediate size on one rank, ``E`` experts, ``d`` activation bytes.

- ``separate`` (v0.6.4 ``fused_moe/fused_moe.py: fused_experts``): three caches, gate_up output
  ``M·k·2I``, activation ``M·k·I`` and down output ``M·k·H``: ``M·k·d·(3I + H)``.
- ``shared`` (v0.8.5, v0.10.1 ``fused_experts_impl``): the gate_up and down outputs share one
  buffer, ``M·k·d·(max(2I, H) + I)``, the result written in place.
- ``shared+out`` (v0.11.2): as ``shared`` plus an ``M·H·d`` output, since the in-place path is
  disabled under torch 2.9, which that release pins.
- ``workspace`` (v0.22.0, v0.34.0 ``TritonExperts.workspace_shapes`` with
  ``vllm/v1/worker/workspace.py``): ``max(M·k·max(I, H), M·H)`` and ``M·k·max(2I, H)`` elements
  taken from a workspace manager that keeps its buffer after the forward (so it is still held
  when the profiling run samples), plus an ``M·H·d`` output.

Every path also holds the router logits (``M·E·d``), ``topk_weights`` and ``topk_ids``
(``M·k·8``). The routed path works in chunks of ``VLLM_FUSED_MOE_CHUNK_SIZE`` tokens
(``vllm/envs.py``): 32768 up to v0.11, 16384 in v0.12 - v0.17; from v0.18 the modular kernel
takes the whole batch (the line's ``moe_chunk_tokens``). The workspace manager of
``workspace`` exists from v0.14.
A checkpoint whose MoE runs with dynamic fp8/int8 activations also quantizes the layer input
(``M·H`` bytes + ``M·4`` scales) and the activation before the down GEMM (``M·k·I`` + scales),
``moe_kernel_quantize_input`` in ``fused_experts_impl``.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.model import Architecture

__all__ = ["CHUNK_TOKENS", "MoeBuffers", "moe_buffers"]

# VLLM_FUSED_MOE_CHUNK_SIZE's default (vllm/envs.py, v0.6.4 - v0.11.2).
CHUNK_TOKENS = 32768


@dataclass(frozen=True, slots=True)
class MoeBuffers:
    """One MoE layer's buffers at ``tokens`` tokens: ``transient`` is freed after the layer,
    ``persistent`` (the workspace manager's buffer) stays allocated."""

    transient: float
    persistent: float

    @property
    def total(self) -> float:
        return self.transient + self.persistent


def moe_buffers(
    arch: Architecture,
    tp: int,
    tokens: int,
    dtype_bytes: float,
    scheme: str,
    chunk: int | None = CHUNK_TOKENS,
    quantized_activations: bool = False,
) -> MoeBuffers:
    """The fused-MoE buffers of one MoE layer of ``arch`` on one TP rank (zero without MoE);
    the routed path works ``chunk`` tokens at a time (None: the whole batch)."""
    moe = arch.moe
    if moe is None:
        return MoeBuffers(0.0, 0.0)
    d, h, k, e = dtype_bytes, arch.hidden_size, moe.experts_per_token, moe.num_experts
    i = moe.expert_intermediate_size / tp
    m = tokens if chunk is None else min(tokens, chunk)
    router = tokens * e * d + tokens * k * 8
    persistent = 0.0
    if scheme == "separate":
        routed = m * k * d * (3 * i + h)
    elif scheme == "shared":
        routed = m * k * d * (max(2 * i, h) + i)
    elif scheme == "shared+out":
        routed = m * k * d * (max(2 * i, h) + i) + m * h * d
    elif scheme == "workspace":
        persistent = max(m * k * max(i, h), m * h) * d + m * k * max(2 * i, h) * d
        routed = m * h * d
    else:
        raise ValueError(scheme)
    quant = m * (h + 4) + m * k * (i + 4) if quantized_activations else 0.0
    shared = 3 * moe.shared_expert_intermediate_size / tp * tokens * d
    return MoeBuffers(router + routed + quant + shared, persistent)
