"""Data-parallel sharding of training state: ZeRO stages 1-3 / FSDP, and CPU offload.

Follows DeepSpeed ZeRO (Rajbhandari et al., 2020) and its defaults as Hugging Face's
integration sets them (``"auto"``): stage 1 partitions optimizer states (with the fp32 master
copy under mixed precision), stage 2 also gradients, stage 3 also parameters. FSDP
``FULL_SHARD`` behaves as stage 3, ``SHARD_GRAD_OP`` as stage 2.

Buffers the sharded stages need on each GPU:

- stage ≥ 2: a gradient reduce bucket of ``hidden_size²`` elements (HF ``reduce_bucket_size``
  auto) in the gradient dtype;
- stage 3: the gathered parameters of the layer being computed and of the one prefetched
  (two decoder layers' parameters in the compute dtype; HF sets the prefetch bucket to
  ``0.9·hidden²``, below one layer of any real model), plus the same reduce bucket.

``sharding_implementation: fsdp2`` (PyTorch's ``fully_shard``, zero_stage 3 only; read from
torch 2.13 ``distributed/fsdp/_fully_shard/``: ``_fsdp_state.py``, ``_fsdp_param_group.py``,
``_fsdp_collectives.py``), wrapped per decoder layer and at the root as the HF/accelerate
FSDP2 recipes do: parameters, gradients and optimizer states are sharded (each tensor padded
to a multiple of the world size along its first dimension); a decoder layer's parameters are
all-gathered into one flat buffer for its forward and again for its backward, and freed
after; the root module's own parameters (embeddings, lm_head, final norm) are all-gathered at
the first forward and not resharded until after backward (``post_forward_mesh_info = None``
for the root: "for training, the parameters would be all-gathered immediately for
backward"). The reference tracer's per-rank peaks (bench/validate/data/fsdp_tracer.jsonl)
hold exactly one gathered layer besides the root at the forward's end and the start of
backward; on a GPU the next layer's all-gather can be issued before the current one is freed,
which this does not count.

Late in backward FSDP2 holds more at once (:func:`fsdp2_late_backward`), which is the step's
peak when checkpointing has made the activations small and the sharded gradients are a large
share (few ranks): in the backward of the second decoder layer (layer 1) the layers after it
already hold their sharded gradients; layer 1's parameters are unsharded and its gradients
are being written unsharded; ``_backward_prefetch`` has issued layer 0's all-gather (the
output buffer held until layer 0's ``wait_for_unshard`` copies it out); the reduce-scatter
input of layer 2's gradients is still held (``reduce_scatter_max_input_buffers`` 1: a
post-backward frees the oldest buffer only when the next one is appended); and the root's
gradients (lm_head, or the tied embedding, and the final norm) stay unsharded until the
root's post-backward at the very end (``_root_post_backward_final_callback``: the root's
forward inputs need no gradient). Layer 0's backward drops the prefetch buffer and adds one
layer's gradient shard, which is less, so layer 1 is the late peak.

CPU offload (ZeRO-Offload / ZeRO-Infinity to CPU): ``offload_optimizer`` moves the states and
the master copy, and the fp32 gradient partition the CPU optimizer reads, to host memory; the
update runs on the CPU (no GPU update transient). ``offload_parameters`` (stage 3 only) moves
the parameter shards too; the GPU keeps the gathered-layer buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.errors import InvalidRequest
from service.estimator.units import cdiv

__all__ = [
    "SHARDING_IMPLEMENTATIONS",
    "LateBackward",
    "ShardedState",
    "Sharding",
    "fsdp2_late_backward",
    "shard_state",
    "validate_sharding",
]

SHARDING_IMPLEMENTATIONS: tuple[str, ...] = ("deepspeed", "fsdp2")


@dataclass(frozen=True, slots=True)
class Sharding:
    dp: int  # data-parallel degree (gpu_count / (tp × pp))
    zero_stage: int
    offload_optimizer: bool
    offload_parameters: bool
    implementation: str = "deepspeed"


@dataclass(frozen=True, slots=True)
class ShardedState:
    """Per-GPU persistent bytes after sharding, and host bytes (whole job)."""

    weights: int
    gradients: int
    optimizer_states: int
    update_temp: int
    buffers: int  # gathered-parameter and reduce buckets (transient, counted at peak)
    cpu_bytes: int


def validate_sharding(gpu_count: int, sharding: Sharding) -> None:
    if sharding.zero_stage not in (0, 1, 2, 3):
        raise InvalidRequest(
            f"zero_stage must be one of 0, 1, 2, 3; got {sharding.zero_stage}", field="zero_stage"
        )
    offload = sharding.offload_optimizer or sharding.offload_parameters
    if sharding.zero_stage > 0 and sharding.dp == 1 and not offload:
        raise InvalidRequest(
            f"zero_stage {sharding.zero_stage} shards state across data-parallel GPUs, and this "
            f"job has one (gpu_count {gpu_count}); use zero_stage 0, more GPUs, or CPU offload",
            field="zero_stage",
        )
    if sharding.offload_optimizer and sharding.zero_stage == 0:
        raise InvalidRequest(
            "offload_optimizer needs zero_stage 1, 2 or 3", field="offload_optimizer"
        )
    if sharding.offload_parameters and sharding.zero_stage != 3:
        raise InvalidRequest("offload_parameters needs zero_stage 3", field="offload_parameters")
    if sharding.implementation not in SHARDING_IMPLEMENTATIONS:
        raise InvalidRequest(
            f"sharding_implementation must be one of {', '.join(SHARDING_IMPLEMENTATIONS)}; "
            f"got {str(sharding.implementation)[:40]!r}",
            field="sharding_implementation",
        )
    if sharding.implementation == "fsdp2" and sharding.zero_stage not in (0, 3):
        raise InvalidRequest(
            "sharding_implementation fsdp2 (fully_shard) shards parameters, gradients and "
            "optimizer states together: use zero_stage 3, or deepspeed for stages 1 and 2",
            field="sharding_implementation",
        )


@dataclass(frozen=True, slots=True)
class LateBackward:
    """FSDP2's per-GPU bytes in the backward of the second decoder layer, besides the
    sharded weights, the optimizer states and the activations."""

    gathered: int  # the root's parameters, layer 1's, and layer 0's all-gather buffer
    gradients: int  # sharded gradients of the later layers, unsharded ones, the RS input


def fsdp2_late_backward(
    dp: int,
    *,
    root_param_bytes: int,
    layer_param_bytes: int,
    done_layer_grad_bytes: int,
    current_layer_grad_bytes: int,
    previous_layer_grad_bytes: int,
    root_grad_bytes: int,
) -> LateBackward:
    """What ``fully_shard`` holds in the backward of layer 1 (module docstring): gathered
    parameters (the root, layer 1, layer 0's prefetched all-gather output), gradients
    (``done_layer_grad_bytes``, the unsharded gradients of layers 2 and later, sharded over
    ``dp``; layer 1's being written; layer 2's reduce-scatter input; the root's unsharded
    gradients that exist before the embedding's backward)."""
    return LateBackward(
        gathered=root_param_bytes + 2 * layer_param_bytes,
        gradients=cdiv(done_layer_grad_bytes, dp)
        + current_layer_grad_bytes
        + previous_layer_grad_bytes
        + root_grad_bytes,
    )


def shard_state(
    sharding: Sharding,
    *,
    weights: int,
    trainable_weights: int,
    gradients: int,
    optimizer_states: int,
    update_temp: int,
    layer_param_bytes: int,
    bucket_bytes: int,
    decoder_layer_bytes: int = 0,
    root_param_bytes: int = 0,
) -> ShardedState:
    """Per-GPU bytes of one model-parallel rank's state under ``plan``.

    ``weights`` all parameter bytes the rank holds (frozen ones included); only
    ``trainable_weights`` of them are sharded by stage 3 together with the frozen ones (ZeRO-3
    partitions every parameter). ``optimizer_states`` includes a master copy if any.
    ``decoder_layer_bytes`` / ``root_param_bytes`` (fsdp2): the largest decoder layer's and
    the root module's own parameters, as gathered.
    """
    dp = sharding.dp
    stage = sharding.zero_stage
    cpu = 0
    w, g, s, temp, buf = weights, gradients, optimizer_states, update_temp, 0
    if stage >= 1:
        s = cdiv(optimizer_states, dp)
        temp = cdiv(update_temp, dp)
    if stage >= 2:
        g = cdiv(gradients, dp)
        buf += min(bucket_bytes, gradients)
    if stage == 3 and sharding.implementation == "fsdp2":
        # fully_shard: the root's parameters gathered through forward and backward, one
        # decoder layer's flat all-gather buffer; gradients reduce-scattered per layer.
        w = cdiv(weights, dp)
        buf = root_param_bytes + decoder_layer_bytes
    elif stage == 3:
        w = cdiv(weights, dp)
        buf += min(2 * layer_param_bytes, weights)
    if sharding.offload_optimizer:
        cpu += optimizer_states + (gradients if stage < 2 else g * dp)
        s = 0
        temp = 0
        g = min(bucket_bytes, gradients)  # 16-bit gradient buckets stream to the host
    if sharding.offload_parameters:
        cpu += weights
        w = 0
    del trainable_weights
    return ShardedState(w, g, s, temp, buf, cpu)
