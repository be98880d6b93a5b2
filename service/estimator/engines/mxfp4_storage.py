"""How vLLM stores mxfp4 MoE experts (gpt-oss) for the kernel it picks, per TP rank.

A checkpoint's mxfp4 expert is e2m1 values (two per byte) with one e8m0 scale per 32 values and
a bf16 bias: what the weight layout prices. vLLM creates the expert parameters padded for its
kernel (``Mxfp4MoEMethod.create_weights``; v0.22.0 ``oracle/mxfp4.py:
mxfp4_round_up_hidden_size_and_intermediate_size``) and converts them after loading
(``process_weights_after_loading``), so the bytes it holds depend on the backend:

- ``marlin`` (pre-Hopper GPUs; Hopper in v0.10/v0.11 wheels, which ship no ``triton_kernels``):
  the expert width per rank padded to 128 and the hidden size to 256; weights repacked (same
  bytes), scales permuted back into e8m0 (1 byte each), biases bf16
  (``marlin_utils_fp4.py: prepare_moe_mxfp4_layer_for_marlin``).
- ``triton`` (Hopper in v0.22; v0.11.2 with ``triton_kernels`` installed): width padded to 64;
  the swizzled scales (``_swizzle_mxfp4``: rows padded to 256, the K/32 axis to 2) are kept in
  the kernel's precision config while the original scale parameters stay registered, so both
  copies are held; biases converted to fp32.
- ``flashinfer`` (SM 10.x, FlashInfer TRTLLM): width and hidden size padded to 256, biases
  fp32 (the interleaved scales' own padding is not visible in vLLM's source; taken as the
  padded shape).

:func:`mxfp4_extra_bytes` is what one rank holds beyond the checkpoint's bytes.
"""

from __future__ import annotations

from service.estimator.gpu import GpuSpec
from service.estimator.model import Architecture

__all__ = ["BACKENDS", "default_backend", "mxfp4_extra_bytes"]

BACKENDS = ("marlin", "triton", "flashinfer")


def _ru(x: int, m: int) -> int:
    return -(-x // m) * m


def default_backend(gpu: GpuSpec | None, hopper_backend: str) -> str:
    """The backend vLLM picks for gpt-oss on ``gpu`` (unknown GPU: Hopper's)."""
    cc = gpu.compute_capability if gpu is not None else (9, 0)
    if cc is None or cc < (9, 0):
        return "marlin"
    if (10, 0) <= cc < (11, 0):
        return "flashinfer"
    return hopper_backend


def _layer_bytes(e: int, i: int, h: int, backend: str) -> int:
    """Bytes of one MoE layer's experts on one rank (``i``: the rank's expert width)."""
    if backend == "checkpoint":
        return (
            e * (2 * i * h // 2 + h * i // 2)
            + e * (2 * i * h // 32 + h * i // 32)
            + (2 * e * (2 * i + h))
        )
    if backend == "marlin":
        ip, hp = _ru(i, 128), _ru(h, 256)
        values = e * (2 * ip * hp // 2 + hp * ip // 2)
        scales = e * (2 * ip * hp // 32 + hp * ip // 32)
        return values + scales + 2 * e * (2 * ip + hp)
    if backend == "triton":
        ip = _ru(i, 64)
        values = e * (2 * ip * h // 2 + h * ip // 2)
        scales = e * (2 * ip * h // 32 + h * ip // 32)
        swizzled = e * (_ru(2 * ip, 256) * _ru(h // 32, 2) + _ru(h, 256) * _ru(ip // 32, 2))
        return values + scales + swizzled + 4 * e * (2 * ip + h)
    if backend == "flashinfer":
        ip, hp = _ru(i, 256), _ru(h, 256)
        values = e * (2 * ip * hp // 2 + hp * ip // 2)
        scales = e * (2 * ip * hp // 32 + hp * ip // 32)
        return values + scales + 4 * e * (2 * ip + hp)
    raise ValueError(backend)


def mxfp4_extra_bytes(arch: Architecture, tp: int, moe_layers: int, backend: str) -> int:
    """Bytes one rank holds for ``moe_layers`` mxfp4 expert layers beyond the checkpoint's."""
    moe = arch.moe
    if moe is None or moe_layers <= 0:
        return 0
    e, h, i = moe.num_experts, arch.hidden_size, moe.expert_intermediate_size // tp
    return moe_layers * (_layer_bytes(e, i, h, backend) - _layer_bytes(e, i, h, "checkpoint"))
