"""The GPU catalog: accelerators, their driver-reported memory and their MIG profiles.

Data lives in ``gpus.toml`` next to this module (one source of truth for a GPU's memory); this
module validates it once at start-up and answers lookups in O(1). The memory figure of a record is
what the driver reports as total: ``nvidia-smi`` / ``hl-smi`` print MiB (``memory_mib``, turned
into bytes as MiB x 2^20), ``rocm-smi`` prints bytes (``memory_bytes``). The Kubernetes label is
the value NVIDIA GPU Feature Discovery sets for ``nvidia.com/gpu.product``: the NVML device name
with characters outside ``[A-Za-z0-9-_. ]`` dropped and spaces turned into ``-``; with the MIG
``single`` strategy GFD appends ``-MIG-<profile>``. Field meanings and sources: docs/gpus.md.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    model_validator,
)

from service.estimator.errors import NotFound

__all__ = [
    "CatalogError",
    "Gpu",
    "GpuCatalog",
    "MigProfile",
    "load_gpu_catalog",
]

MIB = 2**20
VENDORS = ("nvidia", "amd", "intel")

_SLUG = r"^[a-z0-9][a-z0-9._-]*$"
_MIG_NAME = r"^[1-9]g\.[1-9][0-9]*gb(\+[a-z][a-z.]*)?$"
_MIG_LABEL = re.compile(r"^(?P<parent>.+)-MIG-(?P<profile>[^-]+)$", re.IGNORECASE)
_GFD_DROPPED = re.compile(r"[^A-Za-z0-9\-_. ]")


class CatalogError(Exception):
    """The catalog file is missing, unreadable or holds an invalid record."""


def gfd_product_label(nvml_name: str) -> str:
    """The ``nvidia.com/gpu.product`` value GPU Feature Discovery derives from an NVML name."""
    return _GFD_DROPPED.sub("", nvml_name).replace(" ", "-")


def _memory_from_mib(data: Any) -> Any:
    """Turn a record's ``memory_mib`` into ``memory_bytes`` (exactly one of the two is allowed)."""
    if not isinstance(data, dict) or "memory_mib" not in data:
        return data
    mib = data["memory_mib"]
    if "memory_bytes" in data:
        if not (isinstance(mib, int) and data["memory_bytes"] == mib * MIB):
            raise ValueError("give exactly one of memory_mib or memory_bytes")
        return data
    if isinstance(mib, bool) or not isinstance(mib, int) or mib <= 0:
        raise ValueError(f"memory_mib must be a positive integer, got {mib!r}")
    return {**data, "memory_bytes": mib * MIB}


class MigProfile(BaseModel):
    """One MIG GPU-instance profile: usable memory as ``nvidia-smi mig -lgip`` reports it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_MIG_NAME, description="profile name, e.g. 1g.10gb")
    memory_bytes: StrictInt = Field(gt=0, description="memory usable by one instance, bytes")
    max_instances: StrictInt = Field(gt=0, le=8, description="instances that fit on one GPU")

    @model_validator(mode="before")
    @classmethod
    def _mib_to_bytes(cls, data: Any) -> Any:
        data = _memory_from_mib(data)
        if isinstance(data, dict) and "memory_mib" in data:
            data = {k: v for k, v in data.items() if k != "memory_mib"}
        return data


class Gpu(BaseModel):
    """One accelerator as a scheduler sees it (the API's GPU record plus provenance)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=_SLUG, description="lowercase slug, e.g. h100-sxm-80gb")
    aliases: tuple[str, ...] = Field(default=(), description="other ids that resolve here")
    name: str = Field(min_length=1)
    vendor: Literal["nvidia", "amd", "intel"]
    memory_bytes: StrictInt = Field(gt=0, description="driver-reported total memory, bytes")
    memory_mib: StrictInt | None = Field(
        default=None, gt=0, description="the driver's MiB figure when it reports MiB"
    )
    memory_measured: StrictBool = Field(
        default=True, description="false when no driver reading was found (see memory_source)"
    )
    memory_source: str | None = None
    marketed_memory_gb: float = Field(gt=0, description="vendor figure, GB = 10^9 bytes")
    memory_bandwidth_gbps: float = Field(gt=0, description="peak memory bandwidth, GB/s")
    bf16_tflops: float | None = Field(
        default=None, gt=0, description="dense BF16 tensor TFLOPS; null if the GPU has no BF16"
    )
    fp16_tflops: float | None = Field(
        default=None, gt=0, description="dense FP16 tensor TFLOPS, given where BF16 is absent"
    )
    fp8: StrictBool = Field(description="hardware FP8 tensor support")
    nvml_name: str | None = Field(default=None, min_length=1)
    k8s_product_label: str | None = Field(default=None, min_length=1)
    mig_profiles: tuple[MigProfile, ...] = ()
    mig_source: str | None = None
    source: str = Field(min_length=1)
    notes: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _mib_to_bytes(cls, data: Any) -> Any:
        return _memory_from_mib(data)

    @model_validator(mode="after")
    def _consistent(self) -> Gpu:
        for alias in self.aliases:
            if not re.match(_SLUG, alias):
                raise ValueError(f"alias {alias!r} is not a lowercase slug")
        if self.memory_mib is not None and self.memory_bytes != self.memory_mib * MIB:
            raise ValueError("memory_bytes disagrees with memory_mib")
        if self.bf16_tflops is None and self.fp16_tflops is None:
            raise ValueError("give bf16_tflops, or fp16_tflops for a GPU without BF16")
        if self.nvml_name is not None and self.k8s_product_label is not None:
            expected = gfd_product_label(self.nvml_name)
            if self.k8s_product_label != expected:
                raise ValueError(
                    f"k8s_product_label {self.k8s_product_label!r} does not follow the GFD rule "
                    f"for nvml_name {self.nvml_name!r} (expected {expected!r})"
                )
        seen: set[str] = set()
        for profile in self.mig_profiles:
            if profile.name in seen:
                raise ValueError(f"MIG profile {profile.name!r} listed twice")
            seen.add(profile.name)
            if profile.memory_bytes > self.memory_bytes:
                raise ValueError(
                    f"MIG profile {profile.name!r} has {profile.memory_bytes} bytes, more than "
                    f"the GPU's {self.memory_bytes}"
                )
        if self.mig_profiles and self.mig_source is None:
            raise ValueError("mig_profiles need a mig_source naming where the figures come from")
        return self

    def mig_profile(self, name: str) -> MigProfile | None:
        """The MIG profile of that name (case-insensitive), or None."""
        wanted = name.strip().lower()
        return next((p for p in self.mig_profiles if p.name == wanted), None)


class GpuCatalog:
    """Validated GPUs with O(1) lookup by id, alias and Kubernetes label."""

    def __init__(self, gpus: Iterable[Gpu]) -> None:
        self._gpus = tuple(gpus)
        self._by_key: dict[str, Gpu] = {}
        self._by_label: dict[str, Gpu] = {}
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

    def resolve(self, ref: str) -> tuple[Gpu, MigProfile | None]:
        """Resolve ``id`` or ``id/mig-profile`` (e.g. ``h100-sxm-80gb/1g.10gb``)."""
        gpu_ref, sep, profile_ref = ref.strip().partition("/")
        gpu = self.get(gpu_ref)
        if not sep:
            return gpu, None
        profile = gpu.mig_profile(profile_ref)
        if profile is None:
            if gpu.mig_profiles:
                known = ", ".join(p.name for p in gpu.mig_profiles)
                detail = (
                    f"GPU {gpu.id!r} has no MIG profile {profile_ref!r}; its profiles are: {known}"
                )
            else:
                detail = f"GPU {gpu.id!r} has no MIG profiles in the catalog"
            raise NotFound(detail, field="gpu")
        return gpu, profile

    def filter(
        self,
        vendor: str | None = None,
        min_memory_bytes: int | None = None,
        k8s_product_label: str | None = None,
    ) -> tuple[Gpu, ...]:
        """GPUs matching every given criterion, in catalog order.

        ``k8s_product_label`` matches case-insensitively; a MIG label
        (``NVIDIA-H100-80GB-HBM3-MIG-1g.10gb``) finds its parent GPU.
        """
        if k8s_product_label is not None:
            gpu = self._gpu_for_label(k8s_product_label)
            candidates: tuple[Gpu, ...] = (gpu,) if gpu is not None else ()
        else:
            candidates = self._gpus
        wanted_vendor = vendor.strip().lower() if vendor is not None else None
        return tuple(
            gpu
            for gpu in candidates
            if (wanted_vendor is None or gpu.vendor == wanted_vendor)
            and (min_memory_bytes is None or gpu.memory_bytes >= min_memory_bytes)
        )

    def _gpu_for_label(self, label: str) -> Gpu | None:
        folded = label.strip().lower()
        gpu = self._by_label.get(folded)
        if gpu is not None:
            return gpu
        match = _MIG_LABEL.match(label.strip())
        if match is None:
            return None
        return self._by_label.get(match["parent"].lower())

    def _unknown_detail(self, gpu_id: str) -> str:
        close = difflib.get_close_matches(gpu_id.strip().lower(), self._by_key, n=5, cutoff=0.5)
        # Report canonical ids, not the aliases that happened to match.
        suggestions = list(dict.fromkeys(self._by_key[key].id for key in close))
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        return f"unknown GPU id {gpu_id!r}{hint} (GET /v1/gpus lists every id)"


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
