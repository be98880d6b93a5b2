"""The model store: models already on disk (a Hugging Face cache, a PVC), read from headers.

Plain Python (no HTTP): :mod:`.layout` finds model directories under the roots,
:mod:`.safetensors_header` and :mod:`.gguf_file` read what the files say about their tensors
(never tensor data, never the network), :mod:`.index` builds the index and :mod:`.store`
keeps it current. docs/models.md describes the layout, the limits and what is read.
"""

from service.model_store.index import ScanLimits, Skipped, StoreEntry, StoreIndex, root_paths
from service.model_store.layout import WalkLimits
from service.model_store.store import ModelStore

__all__ = [
    "ModelStore",
    "ScanLimits",
    "Skipped",
    "StoreEntry",
    "StoreIndex",
    "WalkLimits",
    "root_paths",
]
