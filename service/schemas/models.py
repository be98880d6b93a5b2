"""The model record of API.md and how a catalog entry or posted config becomes one."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from service.schemas.common import ResponseModel


class StoreLocation(ResponseModel):
    """Where the model store found a model (never an absolute path: the root by its index)."""

    root_index: int = Field(description="Index of the root in LLMMEM_MODEL_DIRS (from 0).")
    path: str = Field(
        description="The model's directory (or GGUF file) relative to that root.",
        examples=["models--meta-llama--Llama-3.2-1B/snapshots/4e20de36"],
    )
    revision: str | None = Field(description="The hub-cache snapshot (commit), if any.")
    format: str = Field(
        description="What the weights were read from: `safetensors` headers, `gguf` tensor "
        "infos, or `config` (no weight files: bytes from the config)."
    )
    weight_bytes: int | None = Field(
        description="The checkpoint's tensor bytes, from its headers (null: no weight files)."
    )


class GgufFile(ResponseModel):
    """One file of a catalog GGUF repository."""

    id: str = Field(
        description="The id that names this file in an estimate: `<repo>:<tag>`.",
        examples=["bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"],
    )
    tag: str = Field(description="The llama-quantize preset the file was made with.")
    file: str = Field(description="The file name in the repository.")


class GgufRepository(ResponseModel):
    """A catalog GGUF repository: its base model and its files, one per preset."""

    base: str = Field(description="The catalog model whose config the files were made from.")
    mix: str = Field(
        description="`stock`: the files follow llama-quantize's presets and are priced tensor "
        "by tensor; `custom`: the publisher set its own per-tensor types, priced with the "
        "stock preset as an approximation."
    )
    imatrix: bool = Field(description="Made with an importance matrix.")
    files: list[GgufFile]


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
    source: str = Field(
        description="Where the configuration came from: a public reference, or `store` for a "
        "model found in the model store."
    )
    store: StoreLocation | None = Field(
        None, description="For a model-store model: where it was found."
    )
    gguf: GgufRepository | None = Field(
        None,
        description="For a GGUF repository: its files, each an id of its own (`<repo>:<tag>`, "
        "llama.cpp's `-hf` convention; the bare repo id is its Q4_K_M file, else Q8_0).",
    )


class ModelList(ResponseModel):
    models: list[ModelRecord]
