"""The GPU catalog: accelerators, their driver-reported memory, their capabilities, MIG profiles.

Data lives in ``gpus.toml`` next to this module (one source of truth for a GPU's facts); this
module loads it, validates every record once at start-up against the record schema
(:mod:`.gpu_record`, which also says what the two memory totals of a GPU are) and answers
lookups in O(1). A GPU outside the catalog is an :class:`AdHocGpu`, known by its memory.

GPU naming follows NVIDIA GPU Feature Discovery: ``nvidia.com/gpu.product`` is the NVML device
name with characters outside ``[A-Za-z0-9-_. ]`` dropped and spaces turned into ``-``; with the
MIG ``single`` strategy GFD appends ``-MIG-<profile>``, and with time-slicing or MPS sharing it
appends ``-SHARED``. :meth:`GpuCatalog.resolve` accepts all of these. Field meanings and
sources: docs/gpus.md.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from service.catalog.gpu_record import GIB, MIB, Gpu, MigProfile, derived_cuda_total
from service.estimator.errors import InvalidRequest, NotFound

__all__ = [
    "AdHocGpu",
    "CatalogError",
    "GpuCatalog",
    "GpuMatch",
    "MatchedBy",
    "load_gpu_catalog",
]

VENDORS = ("nvidia", "amd", "intel")

# The largest GPU memory an ad-hoc request may describe (1 PiB): far above any accelerator, low
# enough that every figure derived from it stays an exact integer.
MAX_MEMORY_BYTES = 2**50

MatchedBy = Literal["id", "alias", "k8s_product_label", "nvml_name"]

_MIG_LABEL = re.compile(r"^(?P<parent>.+)-MIG-(?P<profile>[^-]+)$", re.IGNORECASE)
_SHARED_SUFFIX = "-shared"


class CatalogError(Exception):
    """The catalog file is missing, unreadable or holds an invalid record."""


@dataclass(frozen=True, slots=True)
class GpuMatch:
    """What a GPU reference resolved to, and how.

    ``mig_profile`` is set when the reference named one MIG slice (``id/profile`` or a GFD
    ``-MIG-<profile>`` label): a process then sees that slice, not the whole GPU. ``shared`` is
    true for a GFD ``-SHARED`` label (time-slicing or MPS replicas): several pods share the
    memory. Unpacks as ``gpu, mig_profile`` for callers written against the old tuple.
    """

    gpu: Gpu
    mig_profile: MigProfile | None
    shared: bool
    matched_by: MatchedBy
    ref: str

    def __iter__(self) -> Iterator[Any]:
        return iter((self.gpu, self.mig_profile))

    @property
    def target_id(self) -> str:
        """``id`` or ``id/profile``: the canonical spelling of what was matched."""
        if self.mig_profile is None:
            return self.gpu.id
        return f"{self.gpu.id}/{self.mig_profile.name}"

    @property
    def display_name(self) -> str:
        if self.mig_profile is None:
            return self.gpu.name
        return f"{self.gpu.name} MIG {self.mig_profile.name}"

    @property
    def memory_bytes(self) -> int:
        """The driver total of what a process gets: the MIG slice, or the whole GPU."""
        if self.mig_profile is not None:
            return self.mig_profile.memory_bytes
        return self.gpu.memory_bytes

    @property
    def cuda_total_bytes(self) -> int:
        """The runtime-visible total of what a process gets (what an engine budgets from)."""
        if self.mig_profile is not None:
            return self.mig_profile.cuda_total_bytes
        return self.gpu.cuda_total_bytes


@dataclass(frozen=True, slots=True)
class AdHocGpu:
    """A GPU outside the catalog, known only by the memory its driver reports.

    A scheduler that holds only node labels can pass GFD's ``nvidia.com/gpu.memory`` (MiB) as
    ``memory_bytes = MiB x 2^20``. Nothing else is known: no capabilities, no MIG profiles. The
    CUDA total follows the same derivation rule as unmeasured catalog records.
    """

    memory_bytes: int
    product_label: str | None = None

    def __post_init__(self) -> None:
        memory = self.memory_bytes
        if isinstance(memory, bool) or not isinstance(memory, int):
            raise InvalidRequest(
                f"gpu_memory_bytes must be an integer number of bytes, got {memory!r}",
                field="gpu_memory_bytes",
            )
        if not MIB <= memory <= MAX_MEMORY_BYTES:
            raise InvalidRequest(
                f"gpu_memory_bytes must be between {MIB} (1 MiB) and {MAX_MEMORY_BYTES} bytes, "
                f"got {memory}; give the driver's total, e.g. nvidia.com/gpu.memory MiB x 2^20",
                field="gpu_memory_bytes",
            )
        label = self.product_label
        if label is not None and (not isinstance(label, str) or not 0 < len(label.strip()) <= 200):
            raise InvalidRequest(
                "the product label must be a non-empty string of at most 200 characters",
                field="gpu",
            )

    @classmethod
    def from_memory_mib(cls, memory_mib: int, product_label: str | None = None) -> AdHocGpu:
        """From GFD's ``nvidia.com/gpu.memory`` label or an ``nvidia-smi`` total (MiB)."""
        if isinstance(memory_mib, bool) or not isinstance(memory_mib, int):
            raise InvalidRequest(
                f"the memory must be an integer number of MiB, got {memory_mib!r}",
                field="gpu_memory_bytes",
            )
        return cls(memory_mib * MIB, product_label)

    @property
    def target_id(self) -> str:
        return f"custom-{self.memory_bytes}"

    @property
    def display_name(self) -> str:
        size = f"{self.memory_bytes / GIB:.2f} GiB"
        return f"{self.product_label.strip()} ({size})" if self.product_label else f"GPU ({size})"

    @property
    def cuda_total_bytes(self) -> int:
        return derived_cuda_total(self.memory_bytes)

    @property
    def cuda_total_measured(self) -> bool:
        return False


class GpuCatalog:
    """Validated GPUs with O(1) lookup by id, alias, Kubernetes label and NVML name."""

    def __init__(self, gpus: Iterable[Gpu]) -> None:
        self._gpus = tuple(gpus)
        self._by_key: dict[str, Gpu] = {}
        self._by_label: dict[str, Gpu] = {}
        self._by_nvml: dict[str, Gpu] = {}
        for gpu in self._gpus:
            for key in (gpu.id, *gpu.aliases):
                folded = key.lower()
                other = self._by_key.get(folded)
                if other is not None:
                    raise CatalogError(
                        f"duplicate GPU id or alias {key!r}: used by {other.id!r} and {gpu.id!r}"
                    )
                self._by_key[folded] = gpu
            if gpu.k8s_product_label is not None:
                folded = gpu.k8s_product_label.lower()
                other = self._by_label.get(folded)
                if other is not None:
                    raise CatalogError(
                        f"duplicate k8s_product_label {gpu.k8s_product_label!r}: used by "
                        f"{other.id!r} and {gpu.id!r}"
                    )
                self._by_label[folded] = gpu
                # A name maps where its label maps; records that share an NVML name with a
                # labelled one (a 12 GB variant of a 10 GB card) are reached by id only.
                if gpu.nvml_name is not None:
                    self._by_nvml[gpu.nvml_name.lower()] = gpu

    def __len__(self) -> int:
        return len(self._gpus)

    def __iter__(self) -> Iterator[Gpu]:
        return iter(self._gpus)

    def __contains__(self, gpu_id: object) -> bool:
        return isinstance(gpu_id, str) and gpu_id.strip().lower() in self._by_key

    def all(self) -> tuple[Gpu, ...]:
        """Every GPU, in the order of the catalog file."""
        return self._gpus

    def get(self, gpu_id: str) -> Gpu:
        """The GPU with this id or alias (case-insensitive); NotFound with suggestions if none."""
        gpu = self._by_key.get(gpu_id.strip().lower())
        if gpu is None:
            raise NotFound(self._unknown_detail(gpu_id), field="gpu")
        return gpu

    def resolve(self, ref: str) -> GpuMatch:
        """Resolve any way a scheduler names a GPU.

        Accepted, case-insensitively: a catalog id or alias (``h100``), ``id/mig-profile``
        (``h100/1g.10gb``), a GFD ``nvidia.com/gpu.product`` value (``NVIDIA-H100-80GB-HBM3``),
        its MIG single-strategy form (``NVIDIA-H100-80GB-HBM3-MIG-1g.10gb``), either with GFD's
        ``-SHARED`` suffix, and the NVML device name (``NVIDIA H100 80GB HBM3``). A MIG profile
        the GPU does not have is NotFound naming the profiles it has; it never falls back to
        the whole GPU.
        """
        text = ref.strip()
        gpu_ref, slash, profile_ref = text.partition("/")
        if slash:
            gpu = self.get(gpu_ref)
            matched_by: MatchedBy = "id" if gpu.id == gpu_ref.strip().lower() else "alias"
            return GpuMatch(gpu, self._profile(gpu, profile_ref, text), False, matched_by, ref)
        folded = text.lower()
        by_key = self._by_key.get(folded)
        if by_key is not None:
            return GpuMatch(by_key, None, False, "id" if by_key.id == folded else "alias", ref)
        match = self._match_label(text, ref)
        if match is None:
            raise NotFound(self._unknown_detail(text), field="gpu")
        return match

    def filter(
        self,
        vendor: str | None = None,
        min_memory_bytes: int | None = None,
        k8s_product_label: str | None = None,
    ) -> tuple[Gpu, ...]:
        """GPUs matching every given criterion, in catalog order.

        ``k8s_product_label`` matches case-insensitively, in any form :meth:`resolve` accepts
        for labels; a label naming no catalog GPU matches nothing, and a MIG label with a
        profile the GPU lacks is NotFound.
        """
        if k8s_product_label is not None:
            match = self.match_label(k8s_product_label)
            candidates: tuple[Gpu, ...] = (match.gpu,) if match is not None else ()
        else:
            candidates = self._gpus
        wanted_vendor = vendor.strip().lower() if vendor is not None else None
        return tuple(
            gpu
            for gpu in candidates
            if (wanted_vendor is None or gpu.vendor == wanted_vendor)
            and (min_memory_bytes is None or gpu.memory_bytes >= min_memory_bytes)
        )

    def match_label(self, label: str) -> GpuMatch | None:
        """Resolve a GFD product label (or NVML name); None when it names no catalog GPU."""
        return self._match_label(label.strip(), label)

    def _match_label(self, text: str, ref: str) -> GpuMatch | None:
        shared = text.lower().endswith(_SHARED_SUFFIX)
        base = text[: -len(_SHARED_SUFFIX)] if shared else text
        folded = base.lower()
        gpu = self._by_label.get(folded)
        if gpu is not None:
            return GpuMatch(gpu, None, shared, "k8s_product_label", ref)
        gpu = self._by_nvml.get(folded)
        if gpu is not None:
            return GpuMatch(gpu, None, shared, "nvml_name", ref)
        mig = _MIG_LABEL.match(base)
        if mig is None:
            return None
        gpu = self._by_label.get(mig["parent"].lower())
        if gpu is None:
            return None
        profile = self._profile(gpu, mig["profile"], text)
        return GpuMatch(gpu, profile, shared, "k8s_product_label", ref)

    @staticmethod
    def _profile(gpu: Gpu, profile_ref: str, ref: str) -> MigProfile:
        profile = gpu.mig_profile(profile_ref)
        if profile is not None:
            return profile
        if gpu.mig_profiles:
            known = ", ".join(p.name for p in gpu.mig_profiles)
            detail = (
                f"{ref!r}: GPU {gpu.id!r} has no MIG profile {profile_ref.strip()!r}; "
                f"its profiles are: {known}"
            )
        else:
            detail = f"{ref!r}: GPU {gpu.id!r} has no MIG profiles in the catalog"
        raise NotFound(detail, field="gpu")

    def _unknown_detail(self, gpu_id: str) -> str:
        close = difflib.get_close_matches(gpu_id.strip().lower(), self._by_key, n=5, cutoff=0.5)
        # Report canonical ids, not the aliases that happened to match.
        suggestions = list(dict.fromkeys(self._by_key[key].id for key in close))
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        return (
            f"unknown GPU {gpu_id!r}{hint} (GET /v1/gpus lists every id and "
            "k8s_product_label; a GPU outside the catalog can be given by its memory)"
        )


def _record_label(index: int, record: Any) -> str:
    if isinstance(record, dict) and isinstance(record.get("id"), str):
        return f"gpu #{index + 1} ({record['id']!r})"
    return f"gpu #{index + 1}"


def _format_validation_error(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(piece) for piece in item["loc"]) or "record"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def _parse_records(document: dict[str, Any], origin: str) -> list[Gpu]:
    unknown = set(document) - {"gpu"}
    if unknown:
        raise CatalogError(f"{origin}: unknown top-level keys {sorted(unknown)}")
    records = document.get("gpu")
    if not isinstance(records, list) or not records:
        raise CatalogError(f"{origin}: no [[gpu]] records")
    gpus = []
    for index, record in enumerate(records):
        label = _record_label(index, record)
        if isinstance(record, dict) and "memory_mib" in record and "memory_bytes" in record:
            raise CatalogError(f"{origin}: {label}: give exactly one of memory_mib or memory_bytes")
        vendor = record.get("vendor") if isinstance(record, dict) else None
        if isinstance(vendor, str) and vendor not in VENDORS:
            raise CatalogError(
                f"{origin}: {label}: unknown vendor {vendor!r} "
                f"(expected one of {', '.join(VENDORS)})"
            )
        try:
            gpus.append(Gpu.model_validate(record))
        except ValidationError as error:
            raise CatalogError(f"{origin}: {label}: {_format_validation_error(error)}") from None
    return gpus


def load_gpu_catalog(path: Path | None = None) -> GpuCatalog:
    """Read and validate a GPU catalog; by default the ``gpus.toml`` shipped with this package."""
    try:
        if path is None:
            origin = "gpus.toml"
            raw = resources.files(__package__).joinpath("gpus.toml").read_bytes()
        else:
            origin = str(path)
            raw = Path(path).read_bytes()
        document = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise CatalogError(f"cannot read GPU catalog {origin}: {error}") from error
    try:
        return GpuCatalog(_parse_records(document, origin))
    except CatalogError as error:
        if str(error).startswith(origin):
            raise
        raise CatalogError(f"{origin}: {error}") from None
