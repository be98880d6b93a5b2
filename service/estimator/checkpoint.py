"""What a checkpoint's own files say about its weights: exact bytes, read from their headers.

A model found in the model store (``service/model_store``) carries a :class:`CheckpointWeights`
next to its architecture: the bytes every tensor occupies in the files, summed by component
(the language model, a vision tower, multi-token-prediction heads), read from the safetensors
headers (``data_offsets``) or the GGUF tensor infos. Packed quantized tensors are counted as
stored, with their scales, zero points and index tensors.

:func:`scale_to_checkpoint` is how the estimator uses them when the config-derived count
disagrees: each stage's config-derived placement of the language model is scaled by the
ratio of the header bytes to the config-derived bytes (one ratio for the whole text model,
so tensor parallelism and pipeline stages keep their config-derived proportions, the vision
tower counted with it when the engine loads it). A GGUF file also keeps its bytes per
repeating layer (:class:`GgufWeights`), which the llama.cpp engine places by offloaded layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.units import GIB

__all__ = ["CheckpointWeights", "GgufWeights", "scale_to_checkpoint"]

# Components a checkpoint's tensors are counted under.
TEXT, VISION, MTP = "text", "vision", "mtp"


@dataclass(frozen=True, slots=True)
class GgufWeights:
    """A GGUF file's tensors as llama.cpp loads them, in bytes.

    ``layers[i]`` is every tensor of repeating layer ``blk.i``; ``*_cuda`` the same tensors as
    the CUDA backend allocates them (``ggml_backend_cuda_buffer_type_get_alloc_size``: a
    quantized tensor whose rows are not a multiple of 512 gets one padded row, every tensor
    is aligned to 128 bytes). ``output`` is 0 when the file has no ``output.weight`` (tied:
    llama.cpp then duplicates ``token_embd`` onto the output device). ``output_norm`` holds
    every other tensor outside the layers (the final norm, rope factors).
    """

    file_type: str
    layers: tuple[int, ...]
    layers_cuda: tuple[int, ...]
    token_embd: int
    token_embd_cuda: int
    output: int
    output_cuda: int
    output_norm: int
    output_norm_cuda: int
    types: tuple[tuple[str, int], ...] = ()  # tensors per ggml type, for the assumptions

    @property
    def total_bytes(self) -> int:
        return sum(self.layers) + self.token_embd + self.output + self.output_norm


@dataclass(frozen=True, slots=True)
class CheckpointWeights:
    """Bytes of a checkpoint's tensors by component, as its files store them."""

    format: str  # "safetensors" | "gguf"
    components: tuple[tuple[str, int], ...]
    gguf: GgufWeights | None = None

    @property
    def total_bytes(self) -> int:
        return sum(b for _, b in self.components)

    def component(self, name: str) -> int:
        return sum(b for n, b in self.components if n == name)


def scale_to_checkpoint(
    per_stage: tuple[int, ...],
    extras: tuple[int, ...],
    config_bytes: int,
    checkpoint: CheckpointWeights,
    *,
    with_vision: bool,
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """``per_stage`` with the weights scaled to the bytes the checkpoint's headers give.

    ``extras[i]`` is what stage ``i`` holds beside the weights (engine buffers, not scaled);
    ``config_bytes`` the config-derived bytes of one whole copy of what is loaded (the vision
    tower included when ``with_vision``). Returns the new per-stage bytes and the assumption
    lines that say what changed (nothing to scale when the two agree).
    """
    loaded = checkpoint.component(TEXT) + (checkpoint.component(VISION) if with_vision else 0)
    notes: list[str] = []
    mtp = checkpoint.component(MTP)
    if mtp:
        notes.append(
            f"the checkpoint also stores {mtp} bytes of multi-token-prediction (draft) layers, "
            "not loaded unless speculative decoding uses them"
        )
    if not loaded or not config_bytes or loaded == config_bytes:
        return per_stage, tuple(notes)
    ratio = loaded / config_bytes
    notes.insert(
        0,
        f"weights from the checkpoint's {checkpoint.format} headers: {loaded} bytes "
        f"({loaded / GIB:.3f} GiB) where the config-derived count gives {config_bytes} bytes "
        f"({config_bytes / GIB:.3f} GiB); each GPU's config-derived share scaled by "
        f"{ratio:.4f}",
    )
    out = tuple(round((b - x) * ratio) + x for b, x in zip(per_stage, extras, strict=True))
    return out, tuple(notes)
