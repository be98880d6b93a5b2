"""How a workload names its model: a Hugging Face id, a storage URI or a local path.

The estimator can resolve a Hugging Face repository id. A manifest may instead give
``hf://org/name`` (KServe's storage initializer downloads it; an optional ``:revision``
follows the name), ``s3://``, ``gs://``, ``pvc://``, ``oci://``, ``https://`` or a path inside
the container such as ``/mnt/models``, where the id is not known from the manifest alone. The
reference keeps the text as written, its scheme and, where the text determines it, the Hugging
Face id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["ModelRef", "ModelScheme", "model_ref"]

ModelScheme = Literal[
    "hf_id", "hf", "s3", "gs", "azure", "pvc", "oci", "http", "local", "unresolved", "other"
]

_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_SCHEMES: dict[str, ModelScheme] = {
    "hf": "hf",
    "s3": "s3",
    "gs": "gs",
    "gcs": "gs",
    "pvc": "pvc",
    "oci": "oci",
    "http": "http",
    "https": "http",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
}
_UNRESOLVED = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*|\([A-Za-z_][A-Za-z0-9_]*\)|[A-Za-z_])")


@dataclass(frozen=True)
class ModelRef:
    """A model as a workload names it."""

    given: str
    """The text as written in the command line or manifest."""
    scheme: ModelScheme
    """``hf_id`` a bare Hugging Face id; ``hf`` an ``hf://`` URI; ``local`` a path in the
    container; ``unresolved`` a shell or Kubernetes variable the reader could not expand."""
    source: str
    repo_id: str | None = None
    """The Hugging Face repository id where the text determines it, else None."""
    revision: str | None = None


def model_ref(given: str, source: str) -> ModelRef:
    """Classify a model reference; never raises."""
    text = given.strip()
    if _UNRESOLVED.search(text):
        return ModelRef(given, "unresolved", source)
    if "://" in text:
        scheme_name, rest = text.split("://", 1)
        scheme = _SCHEMES.get(scheme_name.lower(), "other")
        if scheme == "hf":
            repo, _, revision = rest.strip("/").partition(":")
            return ModelRef(given, "hf", source, repo_id=repo or None, revision=revision or None)
        return ModelRef(given, scheme, source)
    if text.startswith(("/", "./", "../", "~")) or text in (".", ".."):
        return ModelRef(given, "local", source)
    if _HF_ID.match(text):
        return ModelRef(given, "hf_id", source, repo_id=text)
    return ModelRef(given, "other", source)
