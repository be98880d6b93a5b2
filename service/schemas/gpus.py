"""Response bodies of the GPU routes (GET /v1/gpus and /v1/gpus/{gpu_id})."""

from __future__ import annotations

from pydantic import Field

from service.catalog.gpu_catalog import MatchedBy
from service.catalog.gpu_record import Gpu, MigProfile
from service.schemas.common import ResponseModel


class GpuLabelMatch(ResponseModel):
    """What a `k8s_product_label` query matched: the GPU, and the MIG slice if it named one."""

    gpu_id: str = Field(description="Catalog id of the GPU the label names.")
    matched_by: MatchedBy = Field(
        description="How the label matched: a GFD product label or an NVML device name."
    )
    mig_profile: MigProfile | None = Field(
        description=(
            "The MIG profile of a `-MIG-<profile>` label (one process sees this slice, not the "
            "whole GPU); null for a whole-GPU label."
        )
    )
    shared: bool = Field(
        description="True for a GFD `-SHARED` label: time-slicing or MPS replicas share the GPU."
    )


class GpuList(ResponseModel):
    gpus: list[Gpu] = Field(description="GPU records, in catalog order.")
    match: GpuLabelMatch | None = Field(
        default=None,
        description=(
            "Present when `k8s_product_label` named a catalog GPU: which GPU and MIG profile it "
            "matched. The other filters may still leave `gpus` empty."
        ),
    )
