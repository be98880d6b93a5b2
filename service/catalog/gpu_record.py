"""The GPU catalog's record schema: one accelerator (:class:`Gpu`) and its MIG profiles
(:class:`MigProfile`) as pydantic models that validate a ``gpus.toml`` record, and the rule for
a CUDA total nobody has read (:func:`derived_cuda_total`).

Two memory totals per GPU:

* ``memory_bytes``: the total the driver reports to management tools. ``nvidia-smi`` and
  ``hl-smi`` print MiB (``memory_mib``, turned into bytes as MiB x 2^20), ``rocm-smi`` prints
  bytes. This is the figure of the HTTP contract and of GPU Feature Discovery's
  ``nvidia.com/gpu.memory`` label.
* ``cuda_total_bytes``: the total the runtime reports to a process (``cudaMemGetInfo``'s total,
  what ``torch.cuda.mem_get_info()`` returns and vLLM budgets ``gpu_memory_utilization`` from).
  It is smaller: the driver keeps back what ``nvidia-smi -q`` lists as "Reserved". Where no
  reading exists the loader derives it with :func:`derived_cuda_total` and says so.

Field meanings and sources: docs/gpus.md.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    computed_field,
    model_validator,
)

__all__ = [
    "GIB",
    "MIB",
    "Gpu",
    "MigProfile",
    "derived_cuda_total",
    "gfd_product_label",
]

MIB = 2**20
GIB = 2**30

Vendor = Literal["nvidia", "amd", "intel"]
Interconnect = Literal["nvlink", "xgmi", "roce", "pcie"]
Architecture = Literal[
    "volta",
    "turing",
    "ampere",
    "ada",
    "hopper",
    "blackwell",
    "cdna2",
    "cdna3",
    "cdna4",
    "rdna3",
    "gaudi2",
    "gaudi3",
]

_ARCH_VENDOR: dict[str, str] = {
    "volta": "nvidia",
    "turing": "nvidia",
    "ampere": "nvidia",
    "ada": "nvidia",
    "hopper": "nvidia",
    "blackwell": "nvidia",
    "cdna2": "amd",
    "cdna3": "amd",
    "cdna4": "amd",
    "rdna3": "amd",
    "gaudi2": "intel",
    "gaudi3": "intel",
}

_SLUG = r"^[a-z0-9][a-z0-9._-]*$"
_MIG_NAME = r"^[1-9]g\.[1-9][0-9]*gb(\+[a-z][a-z.]*)?$"
_GFD_DROPPED = re.compile(r"[^A-Za-z0-9\-_. ]")
_COMPUTE_CAPABILITY = r"^[0-9]{1,2}\.[0-9]$"
_GFX_TARGET = r"^gfx[0-9a-f]{3,4}$"

# The derivation rule for a CUDA total nobody has read: hold back the larger of 1 GiB and 1 % of
# the driver total. Every reading in gpus.toml holds back less (the most is 881 MiB, an A100
# 80GB), so the rule errs towards a smaller budget; tests/catalog checks that it stays so. The
# reserve is capped at a quarter of the total only so that toy devices (test catalogs) keep a
# positive total; no real accelerator comes near the cap.
DERIVED_RESERVE_FLOOR_BYTES = GIB
DERIVED_RESERVE_FRACTION = 0.01
DERIVED_RESERVE_CAP_FRACTION = 4
DERIVED_CUDA_TOTAL_SOURCE = (
    "not measured: derived as the driver total less max(1 GiB, 1% of it), a bound above every "
    "driver reserve read in this catalog (docs/gpus.md)"
)


def gfd_product_label(nvml_name: str) -> str:
    """The ``nvidia.com/gpu.product`` value GPU Feature Discovery derives from an NVML name."""
    return _GFD_DROPPED.sub("", nvml_name).replace(" ", "-")


def derived_cuda_total(memory_bytes: int) -> int:
    """The CUDA-visible total assumed for a GPU whose runtime total was never read."""
    reserve = max(DERIVED_RESERVE_FLOOR_BYTES, math.ceil(memory_bytes * DERIVED_RESERVE_FRACTION))
    return memory_bytes - min(reserve, memory_bytes // DERIVED_RESERVE_CAP_FRACTION)


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


_CUDA_INPUTS = ("cuda_total_bytes", "cuda_total_gib", "driver_reserved_mib")


def _cuda_total_from_inputs(data: Any) -> Any:
    """Fill ``cuda_total_bytes``, ``cuda_total_measured`` and ``cuda_total_source``.

    A record gives at most one of: ``cuda_total_bytes`` (an exact reading), ``cuda_total_gib``
    (as vLLM and PyTorch print it, two decimals), ``driver_reserved_mib`` (``nvidia-smi -q``'s
    "Reserved", subtracted from the driver total). A reading is measured; the reserve and the
    fallback rule are derivations.
    """
    if not isinstance(data, dict):
        return data
    given = [key for key in _CUDA_INPUTS if key in data]
    if len(given) > 1:
        raise ValueError(f"give at most one of {', '.join(_CUDA_INPUTS)} (got {given})")
    out = {
        key: value
        for key, value in data.items()
        if key not in ("cuda_total_gib", "driver_reserved_mib")
    }
    memory = data.get("memory_bytes")
    if not given:
        if "cuda_total_source" in data or "cuda_total_measured" in data:
            raise ValueError("cuda_total_source/cuda_total_measured need a cuda_total value")
        if isinstance(memory, int) and not isinstance(memory, bool) and memory > 0:
            out["cuda_total_bytes"] = derived_cuda_total(memory)
        out["cuda_total_measured"] = False
        out["cuda_total_source"] = DERIVED_CUDA_TOTAL_SOURCE
        return out
    if "cuda_total_source" not in data:
        raise ValueError(f"{given[0]} needs a cuda_total_source naming where it comes from")
    key = given[0]
    value = data[key]
    if key == "cuda_total_gib":
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"cuda_total_gib must be a positive number, got {value!r}")
        out["cuda_total_bytes"] = round(value * GIB)
        out.setdefault("cuda_total_measured", True)
    elif key == "driver_reserved_mib":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"driver_reserved_mib must be a non-negative integer, got {value!r}")
        if data.get("cuda_total_measured") is True:
            raise ValueError("a total derived from driver_reserved_mib is not a measurement")
        if isinstance(memory, int) and not isinstance(memory, bool):
            out["cuda_total_bytes"] = memory - value * MIB
        out["cuda_total_measured"] = False
    else:
        out.setdefault("cuda_total_measured", True)
    return out


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

    @computed_field(  # type: ignore[prop-decorator]
        description=(
            "the total a process on one instance sees through CUDA, bytes: the profile memory, "
            "since the driver reserves nothing inside a MIG instance (derived, not measured)"
        )
    )
    @property
    def cuda_total_bytes(self) -> int:
        return self.memory_bytes


class Gpu(BaseModel):
    """One accelerator as a scheduler sees it (the API's GPU record plus provenance)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=_SLUG, description="lowercase slug, e.g. h100-sxm-80gb")
    aliases: tuple[str, ...] = Field(default=(), description="other ids that resolve here")
    name: str = Field(min_length=1)
    vendor: Vendor
    memory_bytes: StrictInt = Field(gt=0, description="driver-reported total memory, bytes")
    memory_mib: StrictInt | None = Field(
        default=None, gt=0, description="the driver's MiB figure when it reports MiB"
    )
    memory_measured: StrictBool = Field(
        default=True, description="false when no driver reading was found (see memory_source)"
    )
    memory_source: str | None = None
    cuda_total_bytes: StrictInt = Field(
        gt=0,
        description=(
            "total memory the runtime reports to a process (cudaMemGetInfo; what vLLM calls "
            "total GPU memory), bytes; less than memory_bytes by the driver's reserve"
        ),
    )
    cuda_total_measured: StrictBool = Field(
        description="true when cuda_total_bytes was read on this GPU, false when derived"
    )
    cuda_total_source: str = Field(min_length=1, description="where cuda_total_bytes comes from")
    marketed_memory_gb: float = Field(gt=0, description="vendor figure, GB = 10^9 bytes")
    memory_bandwidth_gbps: float = Field(gt=0, description="peak memory bandwidth, GB/s")
    bf16_tflops: float | None = Field(
        default=None, gt=0, description="dense BF16 tensor TFLOPS; null if the GPU has no BF16"
    )
    fp16_tflops: float | None = Field(
        default=None, gt=0, description="dense FP16 tensor TFLOPS, given where BF16 is absent"
    )
    interconnect: Interconnect | None = Field(
        default=None,
        description=(
            "the link tensor-parallel peers exchange activations over: 'nvlink' (NVLink, "
            "through NVSwitch on SXM boards or a bridge on NVL boards), 'xgmi' (AMD Infinity "
            "Fabric), 'roce' (Gaudi's on-chip RoCE ports), 'pcie'; null where not sourced"
        ),
    )
    interconnect_bandwidth_gbps: float | None = Field(
        default=None,
        gt=0,
        le=10_000,
        description="what one GPU sends to its peers over `interconnect`, GB/s, one direction",
    )
    interconnect_source: str | None = Field(
        default=None, min_length=1, description="where the interconnect figures come from"
    )
    architecture: Architecture | None = Field(
        default=None, description="architecture family, e.g. hopper, cdna3; null if unknown"
    )
    compute_capability: str | None = Field(
        default=None,
        pattern=_COMPUTE_CAPABILITY,
        description=(
            "NVIDIA compute capability 'major.minor' as GPU Feature Discovery labels it "
            "(nvidia.com/gpu.compute.major / minor); null for AMD and Intel"
        ),
    )
    multiprocessors: StrictInt | None = Field(
        default=None,
        gt=0,
        le=1024,
        description=(
            "streaming multiprocessors of the whole GPU, as deviceQuery reports them "
            "(multi_processor_count); they size the CUDA context. Null for AMD and Intel, "
            "or where not sourced"
        ),
    )
    multiprocessors_source: str | None = Field(
        default=None, min_length=1, description="where multiprocessors comes from"
    )
    gpus_per_node: StrictInt | None = Field(
        default=None,
        gt=0,
        le=72,
        description=(
            "GPUs of this type one server (one Kubernetes node) holds, as the largest common "
            "server or cloud instance documents it: what tensor parallelism may span and "
            "what a minimum layout fills before it adds pipeline stages; null: 8, an HGX "
            "board's"
        ),
    )
    gpus_per_node_source: str | None = Field(
        default=None, min_length=1, description="where gpus_per_node comes from"
    )
    gfx_target: str | None = Field(
        default=None,
        pattern=_GFX_TARGET,
        description="AMD LLVM target (gfx942 for MI300X); null for NVIDIA and Intel",
    )
    bf16: StrictBool = Field(
        description="hardware BF16 tensor support (defaults to whether bf16_tflops is given)"
    )
    fp8: StrictBool = Field(description="hardware FP8 tensor support")
    fp8_format: Literal["ocp", "fnuz"] | None = Field(
        default=None,
        description=(
            "the FP8 encoding the tensor units take: 'ocp' (float8_e4m3fn) or 'fnuz' "
            "(float8_e4m3fnuz, AMD gfx94x); null without FP8 or where not sourced"
        ),
    )
    fp4: StrictBool = Field(default=False, description="hardware FP4 tensor support")
    nvml_name: str | None = Field(default=None, min_length=1)
    k8s_product_label: str | None = Field(default=None, min_length=1)
    mig_profiles: tuple[MigProfile, ...] = ()
    mig_source: str | None = None
    source: str = Field(min_length=1)
    notes: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _derive_fields(cls, data: Any) -> Any:
        data = _cuda_total_from_inputs(_memory_from_mib(data))
        if isinstance(data, dict) and "bf16" not in data:
            data = {**data, "bf16": data.get("bf16_tflops") is not None}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Gpu:
        for alias in self.aliases:
            if not re.match(_SLUG, alias):
                raise ValueError(f"alias {alias!r} is not a lowercase slug")
        if self.memory_mib is not None and self.memory_bytes != self.memory_mib * MIB:
            raise ValueError("memory_bytes disagrees with memory_mib")
        if self.cuda_total_bytes > self.memory_bytes:
            raise ValueError(
                f"cuda_total_bytes {self.cuda_total_bytes} exceeds the driver total "
                f"{self.memory_bytes}; the runtime never sees more than the driver reports"
            )
        if self.bf16_tflops is None and self.fp16_tflops is None:
            raise ValueError("give bf16_tflops, or fp16_tflops for a GPU without BF16")
        if self.bf16 != (self.bf16_tflops is not None):
            raise ValueError("bf16 must be true exactly when bf16_tflops is given")
        if self.fp8_format is not None and not self.fp8:
            raise ValueError("fp8_format is given but fp8 is false")
        given = (self.interconnect, self.interconnect_bandwidth_gbps, self.interconnect_source)
        if any(v is not None for v in given) and any(v is None for v in given):
            raise ValueError(
                "give interconnect, interconnect_bandwidth_gbps and interconnect_source together"
            )
        self._check_vendor_facts()
        self._check_label()
        self._check_mig()
        return self

    def _check_vendor_facts(self) -> None:
        # Capability facts are optional (null = unknown) so that an operator's own catalog file
        # keeps loading; the shipped catalog is checked for completeness by its tests.
        if self.architecture is not None and _ARCH_VENDOR[self.architecture] != self.vendor:
            raise ValueError(f"architecture {self.architecture!r} is not a {self.vendor} family")
        if self.vendor != "nvidia" and self.compute_capability is not None:
            raise ValueError("compute_capability is an NVIDIA notion; leave it out")
        if self.vendor != "nvidia" and self.multiprocessors is not None:
            raise ValueError("multiprocessors counts NVIDIA SMs; leave it out")
        if (self.multiprocessors is None) != (self.multiprocessors_source is None):
            raise ValueError("give multiprocessors together with multiprocessors_source")
        if (self.gpus_per_node is None) != (self.gpus_per_node_source is None):
            raise ValueError("give gpus_per_node together with gpus_per_node_source")
        if self.vendor != "amd" and self.gfx_target is not None:
            raise ValueError("gfx_target is an AMD notion; leave it out")

    def _check_label(self) -> None:
        if self.nvml_name is not None and self.k8s_product_label is not None:
            expected = gfd_product_label(self.nvml_name)
            if self.k8s_product_label != expected:
                raise ValueError(
                    f"k8s_product_label {self.k8s_product_label!r} does not follow the GFD rule "
                    f"for nvml_name {self.nvml_name!r} (expected {expected!r})"
                )

    def _check_mig(self) -> None:
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
            if profile.memory_bytes * profile.max_instances > self.memory_bytes:
                raise ValueError(
                    f"MIG profile {profile.name!r}: {profile.max_instances} instances of "
                    f"{profile.memory_bytes} bytes exceed the GPU's {self.memory_bytes}"
                )
        if self.mig_profiles and self.mig_source is None:
            raise ValueError("mig_profiles need a mig_source naming where the figures come from")

    def mig_profile(self, name: str) -> MigProfile | None:
        """The MIG profile of that name (case-insensitive), or None."""
        wanted = name.strip().lower()
        return next((p for p in self.mig_profiles if p.name == wanted), None)
