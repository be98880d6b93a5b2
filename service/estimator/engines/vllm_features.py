"""What vLLM's production options allocate: LoRA adapter slots, CPU weight offload, a fixed KV
pool, and the host memory each of them (and swap space, KV offload) holds.

- LoRA (``--enable-lora``; ``vllm/lora/model_manager.py: LoRAModelManager._create_lora_modules``
  and ``vllm/lora/layers/*.py: create_lora_weights``, read in 0.19): before the KV cache is
  sized, every module vLLM supports LoRA on gets ``max_loras`` stacked slots of rank
  ``max_lora_rank`` in ``lora_dtype`` (``auto``: the model's dtype): per slice, ``lora_a``
  ``[slots, rank, in]`` and ``lora_b`` ``[slots, out, rank]``. Column-parallel layers keep the
  whole input and their share of the output (a merged q/k/v or gate/up layer has one slice per
  part), row-parallel ones their share of the input and the whole output;
  ``--fully-sharded-loras`` splits the other side too (rank of ``lora_a`` for column, output of
  ``lora_b`` for row layers). Every linear layer is supported (``get_supported_lora_modules``),
  with the embedding (``lora_a`` ``[slots, vocab, rank]``, ``lora_b`` ``[slots, hidden,
  rank]``) and lm_head (``lora_a`` ``[slots, rank, hidden]``, ``lora_b`` ``[slots, vocab,
  rank]``) of models that list them in ``embedding_modules``; routed experts from 0.12
  (``FusedMoEWithLoRA``: per local expert, gate/up as two slices and down). The CPU cache
  (``max_cpu_loras``, default ``max_loras``) keeps whole adapters in each worker's host memory.
- CPU offload (``--cpu-offload-gb``; ``vllm/model_executor/offloader/uva.py`` in 0.19,
  ``models/utils.py: maybe_offload_to_cpu`` before): walking the decoder layers of the GPU's
  stage in order, parameter by parameter, weights move to pinned host memory until the GiB
  budget is reached (the last one may overshoot it); embeddings and lm_head stay. V1 reads them
  in place over UVA; V0 copies a module's offloaded parameters to the GPU for its forward, so
  the largest such layer is also held during the profiling run.
- A fixed pool: ``--kv-cache-memory-bytes`` (from 0.11; ``gpu_worker.determine_available_
  memory`` returns it and skips the budget) and ``--num-gpu-blocks-override`` (the block
  count replaced after profiling, ``kv_cache_utils``): the pool is what was asked, and what
  the rest needs must still fit the device, as vLLM itself no longer checks.
- Host memory: swap space (``--swap-space`` GiB per GPU, pinned by V0's CacheEngine; V1 does
  not allocate it) and KV offload (``--kv-offloading-size`` GiB for the whole TP × PP group,
  ``config/vllm.py: _update_kv_transfer_config``; LMCache gives each rank its share).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.estimator.model import Shard
from service.estimator.parallel import ExpertLayout, stage_layer_ranges
from service.estimator.units import GIB, bytes_per_element, cdiv

if TYPE_CHECKING:
    from service.estimator.engines.base import EngineSettings
    from service.estimator.model import Architecture, LinearModule

__all__ = [
    "KV_CONNECTORS",
    "LORA_DTYPES",
    "LoraSlots",
    "TransferCost",
    "connector_cost",
    "cpu_offload",
    "fixed_pool_bytes",
    "lora_slots",
    "stacked_lora",
    "swap_space_bytes",
]

#: KV-transfer connectors of vLLM's factory (vllm/distributed/kv_transfer/kv_connector/
#: factory.py, 0.19); those in ``_CONNECTOR_HOST`` or handled below are priced.
KV_CONNECTORS = (
    "NixlConnector",
    "P2pNcclConnector",
    "LMCacheConnectorV1",
    "LMCacheMPConnector",
    "OffloadingConnector",
    "SimpleCPUOffloadConnector",
    "MooncakeConnector",
    "MoRIIOConnector",
    "MultiConnector",
    "FlexKVConnector",
    "DecodeBenchConnector",
    "ExampleConnector",
)
# LMCache's default local CPU cache when the config names none (LMCacheEngineConfig
# max_local_cpu_size = 5.0 GiB per rank).
LMCACHE_DEFAULT_HOST = 5 * GIB
#: ``--lora-dtype`` words and the dtype each names (auto: the model's).
LORA_DTYPES = {"auto": None, "float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
# Merged layers vLLM builds from several checkpoint projections: LoRA slices per layer
# (``packed_modules_mapping``); a name not here is one slice.
_SLICES = {"qkv_proj": 3, "query_key_value": 3, "gate_up_proj": 2, "experts.gate_up_proj": 2}
_COLUMN = frozenset({Shard.COLUMN, Shard.KV_HEADS, Shard.QKV_HEADS})


@dataclass(frozen=True, slots=True)
class LoraSlots:
    """LoRA memory of one GPU of one stage: the stacked slots on the GPU, the CPU cache's
    adapters in host memory."""

    gpu_bytes: int
    host_bytes: int
    note: str


def _module_slot(
    m: LinearModule, arch: Architecture, tp: int, rank: int, fully_sharded: bool
) -> tuple[int, int]:
    """(elements of one slot on one GPU, elements of one unsharded adapter) of one instance."""
    slices = _SLICES.get(m.name, 1)
    whole = rank * m.in_features * slices + m.out_features * rank
    if m.shard in _COLUMN:
        a_rank = cdiv(rank, tp) if fully_sharded else rank
        out = m.out_features if tp == 1 else cdiv(m.out_features, tp)
        return a_rank * m.in_features * slices + out * rank, whole
    if m.shard is Shard.ROW:
        b_out = cdiv(m.out_features, tp) if fully_sharded else m.out_features
        return rank * cdiv(m.in_features, tp) * slices + b_out * rank, whole
    return whole, whole


def lora_slots(
    arch: Architecture,
    s: EngineSettings,
    *,
    tp: int,
    pp: int,
    index: int,
    act_dtype: str,
    experts: ExpertLayout | None,
    moe_lora: bool,
) -> LoraSlots | None:
    """vLLM's LoRA slots on one GPU of stage ``index`` (None without ``enable_lora``)."""
    if not s.get("enable_lora"):
        return None
    slots = int(s["max_loras"])
    return stacked_lora(
        arch,
        slots=slots,
        rank=int(s["max_lora_rank"]),
        cpu_adapters=int(s.get("max_cpu_loras") or slots),
        dtype=LORA_DTYPES.get(str(s.get("lora_dtype") or "auto")) or act_dtype,
        fully_sharded=bool(s.get("fully_sharded_loras")),
        vocab=True,
        tp=tp,
        pp=pp,
        index=index,
        experts=experts,
        moe_lora=moe_lora,
        engine="vLLM",
    )


def stacked_lora(
    arch: Architecture,
    *,
    slots: int,
    rank: int,
    cpu_adapters: int,
    dtype: str,
    fully_sharded: bool,
    vocab: bool,
    tp: int,
    pp: int,
    index: int,
    experts: ExpertLayout | None,
    moe_lora: bool,
    engine: str,
) -> LoraSlots:
    """``slots`` stacked LoRA buffers of ``rank`` on one GPU of stage ``index`` (with the
    embedding and lm_head when ``vocab``), and ``cpu_adapters`` whole adapters in host memory."""
    size = bytes_per_element(dtype)
    layers = set(stage_layer_ranges(arch.num_layers, pp)[index])
    gpu = whole = 0
    skipped_experts = False
    for m in arch.linear_modules:
        if m.shard is Shard.VOCAB:
            if vocab and index == pp - 1:  # lm_head: [rank, hidden] and [vocab, rank]
                gpu += rank * m.in_features + m.out_features * rank
                whole += rank * m.in_features + m.out_features * rank
            continue
        on_stage = sum(1 for i in m.layers if i in layers)
        if not on_stage:
            continue
        instances = m.per_layer
        shard_tp = tp
        if m.routed:
            if not moe_lora:
                skipped_experts = True
                continue
            if experts is not None:
                instances = experts.local_experts(m.per_layer)
                shard_tp = experts.tensor
        one, full = _module_slot(m, arch, shard_tp, rank, fully_sharded)
        gpu += one * instances * on_stage
        whole += full * m.per_layer * on_stage
    if vocab and index == 0:  # the embedding: [vocab, rank] and [hidden, rank], unsharded
        emb = arch.vocab_size * rank + arch.hidden_size * rank
        gpu += emb
        whole += emb
    gpu_bytes = int(gpu * slots * size)
    host_bytes = int(whole * cpu_adapters * size)
    note = (
        f"{engine} LoRA: {slots} slots of rank {rank} in {dtype} on every supported module, "
        f"{gpu_bytes / GIB:.3f} GiB per GPU, allocated before the KV cache is sized"
    )
    if cpu_adapters:
        note += (
            f"; the CPU cache of {cpu_adapters} adapters up to {host_bytes / GIB:.3f} GiB of "
            "host memory per GPU worker"
        )
    if skipped_experts:
        note += " (routed experts take no LoRA slots here)"
    return LoraSlots(gpu_bytes, host_bytes, note)


@dataclass(frozen=True, slots=True)
class Offload:
    """Weights ``--cpu-offload-gb`` moves off one GPU of each stage."""

    per_stage: tuple[int, ...]  # bytes moved to host memory, per GPU of each stage
    largest_layer: int  # the most offloaded bytes of one decoder layer (V0's forward copy)
    note: str


def cpu_offload(
    budget_gib: float, layer_tensors: tuple[tuple[int, ...], ...], pp: int, num_layers: int
) -> Offload | None:
    """Per stage, the decoder-layer parameters offloaded in order until ``budget_gib`` GiB
    (each GPU worker offloads its own share)."""
    budget = int(budget_gib * GIB)
    if budget <= 0:
        return None
    moved: list[int] = []
    largest = 0
    for stage in stage_layer_ranges(num_layers, pp):
        total = 0
        for i in stage:
            in_layer = 0
            for tensor in layer_tensors[i]:
                if total >= budget:
                    break
                total += tensor
                in_layer += tensor
            largest = max(largest, in_layer)
            if total >= budget:
                break
        moved.append(total)
    note = (
        f"--cpu-offload-gb {budget_gib:g}: {max(moved) / GIB:.2f} GiB of decoder-layer weights "
        "per GPU in pinned host memory (whole parameters, in layer order, until the budget)"
    )
    return Offload(tuple(moved), largest, note)


def fixed_pool_bytes(s: EngineSettings, block_bytes: int) -> tuple[int, str] | None:
    """A KV pool the caller fixed, and what fixed it (None: the budget sizes it)."""
    memory = s.get("kv_cache_memory_bytes")
    if memory:
        return int(memory), (
            f"--kv-cache-memory-bytes: a KV pool of {int(memory) / GIB:.2f} GiB per GPU; "
            "gpu_memory_utilization is ignored and what the rest needs must fit the device"
        )
    blocks = s.get("num_gpu_blocks_override")
    if blocks:
        pool = int(blocks) * block_bytes
        return pool, (
            f"--num-gpu-blocks-override {int(blocks)}: a KV pool of {pool / GIB:.2f} GiB per "
            "GPU whatever the budget leaves"
        )
    return None


def swap_space_bytes(s: EngineSettings, v1: bool) -> int:
    """Pinned host memory V0's CacheEngine takes for swapped-out blocks (V1: none)."""
    if v1:
        return 0
    return int(float(s.get("swap_space") or 0) * GIB)


@dataclass(frozen=True, slots=True)
class TransferCost:
    """What a KV-transfer connector holds per GPU: GPU buffers beside the budget, host
    memory, and what was not priced."""

    gpu_outside: int = 0
    host: int = 0
    host_is_pool: bool = False  # a host mirror of the whole KV pool (NIXL's host buffer)
    note: str = ""
    unpriced: tuple[str, ...] = ()


def connector_cost(s: EngineSettings, tp: int, pp: int) -> TransferCost:
    """The connector's buffers (``--kv-transfer-config``), from each connector's code:
    NixlConnector registers the KV cache itself for transfers and, with ``kv_buffer_device``
    cpu, keeps a pinned host copy of it (``nixl_connector.py``, ``use_host_buffer``);
    P2pNcclConnector's send store grows up to ``kv_buffer_size`` bytes of GPU memory after the
    pool is sized (``p2p_nccl_engine.py``); LMCache keeps ``max_local_cpu_size`` of host
    memory per rank; the offloading connectors ``cpu_bytes_to_use`` for the TP × PP group."""
    name = s.get("kv_connector")
    if not name:
        return TransferCost()
    host = s.get("kv_connector_host_bytes")
    role = s.get("kv_role") or "kv_both"
    if name == "NixlConnector":
        if s.get("kv_buffer_device") == "cpu":
            return TransferCost(
                host_is_pool=True,
                note=f"NixlConnector ({role}) with host buffers: a pinned copy of the KV pool "
                "in host memory per GPU",
            )
        return TransferCost(
            note=f"NixlConnector ({role}): transfers straight from the KV cache, no buffer"
        )
    if name == "P2pNcclConnector":
        size = int(float(s.get("kv_buffer_size") or 1e9))
        return TransferCost(
            gpu_outside=size,
            note=f"P2pNcclConnector ({role}): its GPU send store grows to {size / GIB:.2f} GiB "
            "beside the budget",
        )
    if name in ("LMCacheConnectorV1", "LMCacheMPConnector"):
        per_gpu = int(host) if host else LMCACHE_DEFAULT_HOST
        return TransferCost(
            host=per_gpu,
            note=f"{name} ({role}): {per_gpu / GIB:.2f} GiB of host KV cache per GPU",
        )
    if name in ("OffloadingConnector", "SimpleCPUOffloadConnector"):
        per_gpu = int(host) // (tp * pp) if host else 0
        return TransferCost(
            host=per_gpu,
            note=f"{name}: {per_gpu / GIB:.2f} GiB of host memory per GPU for offloaded blocks",
        )
    return TransferCost(
        note=f"{name} ({role}) is read but its buffers are not priced",
        unpriced=(f"--kv-transfer-config {name}: its transfer buffers",),
    )
