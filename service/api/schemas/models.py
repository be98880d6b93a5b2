"""The model record of API.md and how a catalog entry or posted config becomes one."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from service.api.schemas.common import ResponseModel


class ModelRecord(ResponseModel):
    id: str = Field(description="Hugging Face repo id.", examples=["meta-llama/Llama-3.1-8B"])
    aliases: list[str] = Field(default_factory=list, description="Other ids that resolve here.")
    model_type: str = Field(description="The config's `model_type` (the family).")
    parameter_count: int = Field(description="Total parameters, as transformers instantiates.")
    active_parameter_count: int = Field(description="Parameters used per token (MoE); = total.")
    parameters_by_component: dict[str, int] = Field(
        description="Parameters by component: embeddings, attention, mlp, experts, ..."
    )
    dtype: str = Field(description="The checkpoint's own dtype.")
    max_position_embeddings: int | None = None
    architecture: dict[str, Any] = Field(description="The normalized fields the estimator uses.")
    source: str = Field(description="Where the configuration came from.")


class ModelList(ResponseModel):
    models: list[ModelRecord]
