"""Schemas of the batch endpoint: up to 1000 estimate requests answered in order."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from service.schemas.common import STRICT_REQUEST, RequestModel, ResponseModel
from service.schemas.estimates import EstimateResponse
from service.schemas.limits import LIMITS

__all__ = ["BatchItem", "BatchRequest", "BatchResponse", "BatchResult"]


class BatchItem(RequestModel):
    """One estimate request of a batch."""

    # A plain string, checked per item: one unknown kind is a problem for that item only.
    kind: str = Field(
        min_length=1,
        max_length=40,
        description="Which estimate this item asks: `inference` or `finetune`.",
    )
    request: dict[str, Any] = Field(
        description="The body of the matching single-estimate endpoint, validated per item."
    )


class BatchRequest(RequestModel):
    model_config = ConfigDict(
        **STRICT_REQUEST,
        json_schema_extra={
            "example": {
                "items": [
                    {
                        "kind": "inference",
                        "request": {"model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "l4"},
                    },
                    {
                        "kind": "finetune",
                        "request": {"model": "meta-llama/Llama-3.2-1B", "method": "lora"},
                    },
                ]
            }
        },
    )

    items: list[BatchItem] = Field(
        min_length=1,
        max_length=LIMITS.batch_items,
        description=f"Up to {LIMITS.batch_items} estimate requests.",
    )


class BatchResult(ResponseModel):
    """One item's outcome: its estimate, or its problem document."""

    status: int = Field(description="200, or the status the item alone would have had.")
    estimate: EstimateResponse | None = Field(None, description="The answer, on success.")
    problem: dict[str, Any] | None = Field(None, description="A problem document, on failure.")


class BatchResponse(ResponseModel):
    """The items' outcomes, in order."""

    results: list[BatchResult] = Field(description="One per item, in order.")
    succeeded: int = Field(description="Items answered with status 200.")
    failed: int = Field(description="Items answered with a problem.")
