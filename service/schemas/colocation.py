"""Request and response of ``POST /v1/estimate/colocated``: several engines on one GPU."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from service.schemas.common import STRICT_REQUEST, RequestModel, ResponseModel
from service.schemas.estimates import (
    GPU_DESCRIPTION,
    GPU_MEMORY_DESCRIPTION,
    MAX_GPU_MEMORY,
    MIN_GPU_MEMORY,
    EstimateResponse,
    InferenceRequestBody,
)
from service.schemas.limits import LIMITS

#: At most this many engines on one GPU in one request (the limit table).
MAX_TENANTS = LIMITS.colocated_workloads
Sharing = Literal["time-slicing", "mps"]


class ColocatedRequest(RequestModel):
    """Several inference workloads on one GPU, judged together."""

    model_config = ConfigDict(
        **STRICT_REQUEST,
        json_schema_extra={
            "examples": [
                {
                    "gpu": "h100-sxm-80gb",
                    "sharing": "time-slicing",
                    "workloads": [
                        {
                            "model": "meta-llama/Llama-3.1-8B-Instruct",
                            "engine": "vllm",
                            "engine_options": {
                                "gpu_memory_utilization": 0.45,
                                "max_model_len": 8192,
                            },
                        },
                        {
                            "model": "Qwen/Qwen2.5-7B-Instruct",
                            "engine": "vllm",
                            "engine_options": {
                                "gpu_memory_utilization": 0.45,
                                "max_model_len": 8192,
                            },
                        },
                    ],
                }
            ]
        },
    )

    gpu: str | None = Field(None, min_length=1, max_length=200, description=GPU_DESCRIPTION)
    gpu_memory_bytes: int | None = Field(
        None, ge=MIN_GPU_MEMORY, le=MAX_GPU_MEMORY, description=GPU_MEMORY_DESCRIPTION
    )
    sharing: Sharing = Field(
        "time-slicing",
        description="`time-slicing`: processes share the memory with no isolation (several "
        "engines in one pod, Kubernetes time-slicing); `mps`: each client is capped at its "
        "pinned device-memory limit.",
    )
    mps_memory_limit_bytes: int | None = Field(
        None,
        ge=MIN_GPU_MEMORY,
        le=MAX_GPU_MEMORY,
        description="`mps`: each client's pinned limit (default: the GPU's memory over the "
        "workloads, as the NVIDIA device plugin divides it over its replicas).",
    )
    workloads: list[InferenceRequestBody] = Field(
        min_length=1,
        max_length=MAX_TENANTS,
        description="The engines on the GPU, each an `/v1/estimate/inference` body without a "
        "GPU of its own.",
    )

    @model_validator(mode="after")
    def _one_gpu(self) -> ColocatedRequest:
        if (self.gpu is None) == (self.gpu_memory_bytes is None):
            raise ValueError("name the GPU with exactly one of `gpu` or `gpu_memory_bytes`")
        for i, w in enumerate(self.workloads):
            if w.gpu is not None or w.gpu_memory_bytes is not None or w.gpu_count is not None:
                raise ValueError(
                    f"workloads[{i}] names a GPU: the request's `gpu` is the one they share"
                )
            if w.tensor_parallel_size * w.pipeline_parallel_size * w.data_parallel_size > 1:
                raise ValueError(f"workloads[{i}] spans several GPUs; each runs on this one")
        return self


class TenantOut(ResponseModel):
    """One engine on the shared GPU."""

    sees_bytes: int = Field(description="The device memory the engine sees when it starts.")
    held_bytes: int = Field(
        description="What it holds on the GPU: its whole budget and what lives beside it "
        "(vLLM, SGLang), or what its workload needs."
    )
    fits: bool = Field(description="Whether it fits the memory it sees.")
    estimate: EstimateResponse = Field(description="Its estimate on the memory it sees.")


class ColocatedResponse(ResponseModel):
    """The engines together on one GPU."""

    gpu: str = Field(description="The GPU shared.")
    gpu_bytes: int = Field(description="Its memory as a CUDA process sees it.")
    sharing: Sharing = Field(description="How it is shared.")
    held_bytes: int = Field(description="What the engines hold together.")
    headroom_bytes: int = Field(description="gpu_bytes − held_bytes (negative: over).")
    fits: bool = Field(description="Every engine fits what it sees, and together they fit.")
    reason_detail: str = Field(description="Why not (empty when it fits).")
    workloads: list[TenantOut] = Field(description="Each engine, in start order as given.")
    assumptions: list[str] = Field(description="How the sharing was judged.")
    summary: str = Field(description="One line for a person (GB = 10^9 bytes).")
