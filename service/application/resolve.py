"""Turn what a request names (a catalog id, a posted config, a GPU ref) into domain values.

A posted config is parsed on every request (cheap next to reading its JSON) and what follows
is cached on the parsed architecture, so equal configs share entries whatever their bytes,
and no cache holds a request's raw body.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from service.catalog.gpu_catalog import AdHocGpu, GpuCatalog, GpuMatch
from service.catalog.gpu_record import derived_cuda_total
from service.catalog.model_catalog import ModelCatalog, NameMatch
from service.estimator.answer import ModelResolution, ModelSpec
from service.estimator.checkpoint import CheckpointWeights
from service.estimator.engines.llamacpp import gguf_weights_for_preset
from service.estimator.errors import EstimatorError, InvalidRequest
from service.estimator.gpu import DEFAULT_GPUS_PER_NODE, GpuPerformance, GpuSpec
from service.estimator.memo import memoized
from service.estimator.model import Architecture, ParameterCounts, read_config
from service.estimator.speculative import METHODS, Speculative
from service.model_store import StoreEntry, StoreIndex
from service.schemas.estimates import ModelSelector, SpeculativeOptions

__all__ = ["ad_hoc_gpu", "resolve_gpu", "resolve_model", "resolve_speculative"]

#: Compute slices of a MIG-capable GPU (the "Ng" of a profile counts them; MIG user guide).
MIG_COMPUTE_SLICES = 7


def resolve_model(
    body: ModelSelector, catalog: ModelCatalog, store: StoreIndex | None = None
) -> ModelSpec:
    if body.model is not None:
        return _named_model(body.model, catalog, store)
    if body.hf_config is not None:
        name = body.hf_config.get("_name_or_path")
        label = name.split("/")[-1][:100] if isinstance(name, str) and name else None
        return _posted_model(read_config(body.hf_config), label)
    assert body.parameter_count is not None  # the schema enforces exactly one
    active = body.active_parameter_count
    return ModelSpec.from_count(int(body.parameter_count), int(active) if active else None)


def _named_model(name: str, catalog: ModelCatalog, store: StoreIndex | None) -> ModelSpec:
    """The exact routes first (the store's files, a catalog id or alias, a catalog GGUF
    file), then the alias rules; NotFound names what was tried."""
    # A store model shadows a catalog entry of the same id.
    found = store.get(name) if store is not None else None
    if found is not None:
        return _store_model(found, ModelResolution(name, found.id, "store"))
    gguf = catalog.gguf_file(name)
    if gguf is not None:
        entry, tag, file = gguf
        resolution = ModelResolution(name, f"{entry.id}:{tag}", "catalog-gguf", f"gguf-{tag}")
        return _gguf_model(
            entry.architecture,
            entry.counts,
            entry.id,
            tag,
            file,
            resolution,
            imatrix=entry.gguf.imatrix if entry.gguf else False,
            own_output=entry.gguf.own_output if entry.gguf else False,
            mix=entry.gguf.mix if entry.gguf else "stock",
            base=entry.base,
        )
    if name in catalog:
        entry = catalog.get(name)
        return ModelSpec(
            entry.id.split("/")[-1],
            entry.id,
            entry.counts.total,
            entry.counts.active,
            entry.dtype,
            entry.architecture,
            resolution=ModelResolution(name, entry.id, "catalog"),
        )
    match = catalog.resolve_name(name)
    if match is None:
        catalog.get(name)  # NotFound, with the catalog's closest names
        raise AssertionError("unreachable")  # pragma: no cover
    return _matched_model(match, catalog, store)


def _store_model(found: StoreEntry, resolution: ModelResolution) -> ModelSpec:
    return ModelSpec(
        found.id.split("/")[-1],
        found.id,
        found.counts.total,
        found.counts.active,
        found.dtype,
        found.architecture,
        checkpoint=found.checkpoint,
        notes=(f"model from the store (root {found.root_index}: {found.path})", *found.notes),
        resolution=resolution,
    )


def _matched_model(match: NameMatch, catalog: ModelCatalog, store: StoreIndex | None) -> ModelSpec:
    """A name the alias rules read: the catalog model it names, in the format it names."""
    entry = match.entry
    reasons = tuple(step.text() for step in match.steps)
    resolution = ModelResolution(match.requested, entry.id, "rules", match.format_name, reasons)
    guess = (
        f"model {match.requested[:120]!r} is not a catalog id: read as {entry.id}"
        + (f" in {match.format_name}" if match.format_name else "")
        + " by the alias rules (a guess from the name: a model-store copy or an exact catalog "
        "id is priced from its own files); " + "; ".join(reasons)
    )
    if match.gguf_tag is not None:
        assert match.gguf_tag is not None
        file = match.gguf_file or f"{entry.id.split('/')[-1]}-{match.gguf_tag}.gguf"
        return _gguf_model(
            entry.architecture,
            entry.counts,
            entry.id,
            match.gguf_tag,
            file,
            resolution,
            imatrix=match.gguf_imatrix,
            own_output=False,
            mix=match.gguf_mix,
            base=entry.id,
            guess=guess,
        )
    if not match.config_overrides and store is not None:
        # The same weights: the store's copy of the model it names is exact.
        stored = store.get(entry.id)
        if stored is not None:
            return _store_model(stored, dataclasses.replace(resolution, route="store"))
    arch, counts = catalog.copy_model(match)
    return ModelSpec(
        match.requested.split("/")[-1][:100],
        entry.id if not match.config_overrides else None,
        counts.total,
        counts.active,
        arch.dtype,
        arch,
        notes=(guess,),
        resolution=resolution,
    )


# In the estimator's one byte-budgeted cache: a preset's tensor list is large.
_preset_weights = memoized(gguf_weights_for_preset)


def _gguf_model(
    arch: Architecture,
    counts: ParameterCounts,
    repo: str,
    tag: str,
    file: str,
    resolution: ModelResolution,
    *,
    imatrix: bool,
    own_output: bool,
    mix: str,
    base: str | None,
    guess: str | None = None,
) -> ModelSpec:
    """A GGUF file: the base's shape, the tensors the preset's rule types."""
    weights = _preset_weights(arch, tag, imatrix=imatrix, own_output=own_output)
    notes = [guess] if guess else []
    notes.append(
        f"GGUF file {file} of {repo}, priced as llama-quantize {tag} makes it from {base}'s "
        f"config: {weights.total_bytes} bytes of tensors, each in the type llama.cpp's preset "
        f"rule gives it (src/llama-quant.cpp){'' if imatrix else ', no importance matrix'}"
    )
    if mix != "stock":
        notes.append(
            f"approximate: {repo.split('/')[0]} sets some tensor types by its own overrides, "
            "not the stock preset; put the file in the model store for its exact bytes"
        )
    checkpoint = CheckpointWeights("gguf", (("text", weights.total_bytes),), gguf=weights)
    return ModelSpec(
        f"{repo.split('/')[-1]}:{tag}",
        f"{repo}:{tag}" if guess is None else None,
        counts.total,
        counts.active,
        arch.dtype,
        arch,
        checkpoint=checkpoint,
        notes=tuple(notes),
        resolution=resolution,
    )


def resolve_speculative(
    options: SpeculativeOptions | None, catalog: ModelCatalog, store: StoreIndex | None = None
) -> Speculative | None:
    """The drafter a request names: a posted config, a catalog or store model; an EAGLE or
    MTP head that is not found is derived from the target (the estimator says so), a draft
    model that is not found is refused, naming the field."""
    if options is None:
        return None
    draft: Architecture | None = None
    label = options.model
    if options.hf_config is not None:
        try:
            draft = read_config(options.hf_config)
        except EstimatorError as exc:
            raise InvalidRequest(exc.detail, field="speculative.hf_config") from None
        label = label or f"posted {draft.model_type}"
    elif options.model is not None:
        try:
            draft = _named_model(options.model, catalog, store).architecture
        except EstimatorError as exc:
            if METHODS.get(options.method):
                raise InvalidRequest(
                    f"draft model {options.model[:100]!r}: {exc.detail}; post its config.json "
                    "as speculative.hf_config",
                    field="speculative.model",
                ) from None
    return Speculative(
        method=options.method,
        num_tokens=options.num_speculative_tokens,
        draft=draft,
        draft_tp=options.draft_tensor_parallel_size,
        label=label,
    )


@memoized
def _posted_model(arch: Architecture, label: str | None) -> ModelSpec:
    return ModelSpec.from_architecture(label or f"posted {arch.model_type}", None, arch)


@lru_cache(maxsize=512)
def resolve_gpu(catalog: GpuCatalog, ref: str) -> GpuSpec:
    """A catalog GPU (id, alias, GFD label, ``id/profile``) as the estimator judges it."""
    match = catalog.resolve(ref)
    gpu = match.gpu
    cc = None
    if gpu.compute_capability:
        major, _, minor = gpu.compute_capability.partition(".")
        cc = (int(major), int(minor or 0))
    return GpuSpec(
        ref=match.target_id,
        name=match.display_name,
        total_bytes=match.cuda_total_bytes,
        compute_capability=cc,
        bf16=gpu.bf16,
        fp8=gpu.fp8,
        mig_profile=match.mig_profile.name if match.mig_profile else None,
        mig_max_instances=match.mig_profile.max_instances if match.mig_profile else None,
        shared=match.shared,
        driver_total_bytes=None if match.mig_profile else gpu.memory_bytes,
        vendor=gpu.vendor,
        # a MIG slice holds a share of them, not published per profile
        multiprocessors=None if match.mig_profile else gpu.multiprocessors,
        gpus_per_node=gpu.gpus_per_node or DEFAULT_GPUS_PER_NODE,
        performance=_performance(match),
    )


def _performance(match: GpuMatch) -> GpuPerformance:
    """The catalog's datasheet peaks as the performance model reads them. A MIG slice gets
    its share: compute by its slices of the seven (the ``Ng`` of the profile name), bandwidth
    by its share of the memory (a memory slice brings its memory controllers)."""
    gpu, profile = match.gpu, match.mig_profile
    flops = (gpu.bf16_tflops or gpu.fp16_tflops or 0.0) * 1e12
    bandwidth = gpu.memory_bandwidth_gbps * 1e9
    share = None
    if profile is not None:
        share = int(profile.name.split("g.", 1)[0]) / MIG_COMPUTE_SLICES
        flops *= share
        bandwidth *= profile.memory_bytes / gpu.memory_bytes
    link = gpu.interconnect_bandwidth_gbps
    return GpuPerformance(
        memory_bytes_per_s=bandwidth,
        tensor_flops_per_s=flops,
        architecture=gpu.architecture,
        interconnect=gpu.interconnect,
        interconnect_bytes_per_s=None if link is None else link * 1e9,
        mig_share=share,
    )


def ad_hoc_gpu(memory_bytes: int) -> GpuSpec:
    """A GPU known only by the total its driver reports (e.g. GFD's nvidia.com/gpu.memory):
    its CUDA total by the catalog's derivation rule; capabilities unknown, so not checked."""
    spec = AdHocGpu(memory_bytes)
    return GpuSpec(
        ref=f"memory:{memory_bytes}",
        name=f"a GPU of {memory_bytes / 2**30:.2f} GiB",
        total_bytes=derived_cuda_total(spec.memory_bytes),
        driver_total_bytes=spec.memory_bytes,
    )
