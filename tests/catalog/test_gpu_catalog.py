"""Tests for the GPU catalog (service/catalog/gpus.toml and its loader).

Expected figures come from outside the code under test: driver totals from the nvidia-smi,
vLLM and PyTorch readings each record cites (the H100's 81559 MiB: google/gvisor#10413), the
Kubernetes label rule from GPU Feature Discovery (re-implemented here by hand), MIG instance
counts from NVIDIA's MIG user guide, compute capabilities from NVIDIA's CUDA GPUs list.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from service.catalog.gpu_catalog import (
    AdHocGpu,
    CatalogError,
    GpuCatalog,
    GpuMatch,
    load_gpu_catalog,
)
from service.catalog.gpu_record import derived_cuda_total
from service.estimator.errors import InvalidRequest, NotFound

MIB = 2**20
GIB = 2**30

REQUIRED_IDS = (
    "t4",
    "v100-sxm2-16gb",
    "v100-sxm2-32gb",
    "a10",
    "a10g",
    "l4",
    "l40",
    "l40s",
    "rtx-4090",
    "rtx-a6000",
    "rtx-6000-ada",
    "a100-sxm4-40gb",
    "a100-pcie-40gb",
    "a100-sxm4-80gb",
    "a100-pcie-80gb",
    "h100-sxm-80gb",
    "h100-pcie-80gb",
    "h100-nvl-94gb",
    "h200-sxm-141gb",
    "h200-nvl-141gb",
    "h20",
    "b200",
    "gb200",
    "mi250x",
    "mi300x",
    "mi325x",
    "gaudi2",
    "gaudi3",
    # issue 16 section 4: the cards in real clusters and labs
    "a40",
    "l20",
    "h800-sxm-80gb",
    "h800-pcie-80gb",
    "h20-3e-141gb",
    "rtx-4090d",
    "rtx-5090",
    "rtx-pro-6000-blackwell",
    "rtx-pro-6000-blackwell-server",
    "b300",
    "mi355x",
    "radeon-pro-w7900",
    "rtx-3060-12gb",
    "rtx-3080-10gb",
    "rtx-3080-12gb",
    "rtx-3080-ti",
    "rtx-3090-ti",
    "rtx-4060-ti-16gb",
    "rtx-4070-ti-super",
    "rtx-4080",
    "rtx-4080-super",
    "rtx-5080",
    "rtx-5070-ti",
    "rtx-5060-ti-16gb",
)


@pytest.fixture(scope="module")
def catalog() -> GpuCatalog:
    return load_gpu_catalog()


def write_catalog(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "gpus.toml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


MINIMAL_GPU = """
[[gpu]]
id = "test-gpu"
name = "Test GPU"
vendor = "nvidia"
memory_mib = 1024
marketed_memory_gb = 1
memory_bandwidth_gbps = 100
bf16_tflops = 10
fp8 = false
source = "hand-written test record"
"""


# --- the embedded catalog -----------------------------------------------------------------------


def test_embedded_catalog_loads_with_enough_records(catalog: GpuCatalog) -> None:
    assert len(catalog.all()) >= len(REQUIRED_IDS)
    assert len(catalog) == len(catalog.all())


@pytest.mark.parametrize("gpu_id", REQUIRED_IDS)
def test_required_gpu_present(catalog: GpuCatalog, gpu_id: str) -> None:
    assert catalog.get(gpu_id).id == gpu_id


def test_order_is_stable(catalog: GpuCatalog) -> None:
    assert [g.id for g in catalog.all()] == [g.id for g in load_gpu_catalog().all()]


def test_h100_memory_is_the_nvidia_smi_figure(catalog: GpuCatalog) -> None:
    # nvidia-smi prints 81559 MiB on an H100 80GB HBM3; 1 MiB = 2^20 bytes.
    assert catalog.get("h100-sxm-80gb").memory_bytes == 81559 * 2**20 == 85_520_809_984


@pytest.mark.parametrize(
    ("gpu_id", "mib"),
    [
        # Each figure is the nvidia-smi reading the record cites.
        ("rtx-5090", 32607),  # noonghunna/club-3090#1322
        ("rtx-3060-12gb", 12288),  # geerlingguy/raspberry-pi-pcie-devices#790
        ("rtx-5060-ti-16gb", 16311),  # akash-network/provider-configs#87
        ("rtx-4080-super", 16376),  # utkuozdemir/nvidia_gpu_exporter capture
        ("b300", 275040),  # wdwd720/BrainIR research/phase4/GPU_BENCHMARK.md
        ("rtx-pro-6000-blackwell", 97887),  # lxc902/realtime-video-demo quantization/README.md
    ],
)
def test_new_cards_carry_their_nvidia_smi_totals(
    catalog: GpuCatalog, gpu_id: str, mib: int
) -> None:
    assert catalog.get(gpu_id).memory_bytes == mib * MIB


@pytest.mark.parametrize(
    ("gpu_id", "stand_in"), [("h20-3e-141gb", "h200-sxm-141gb"), ("h800-sxm-80gb", "h100-sxm-80gb")]
)
def test_unread_cards_take_their_siblings_reading(
    catalog: GpuCatalog, gpu_id: str, stand_in: str
) -> None:
    # No public driver reading of these boards was found: the sibling board's stands in,
    # flagged as not measured.
    gpu = catalog.get(gpu_id)
    assert gpu.memory_measured is False
    assert gpu.memory_bytes == catalog.get(stand_in).memory_bytes


def test_mi300x_memory_is_the_rocm_smi_figure(catalog: GpuCatalog) -> None:
    # rocm-smi "VRAM Total Memory (B)" on an MI300X.
    assert catalog.get("mi300x").memory_bytes == 205_822_885_888


def test_every_record_names_its_sources(catalog: GpuCatalog) -> None:
    for gpu in catalog.all():
        assert gpu.source.strip(), gpu.id
        assert gpu.memory_source and gpu.memory_source.strip(), gpu.id
        assert gpu.cuda_total_source.strip(), gpu.id
        if gpu.mig_profiles:
            assert gpu.mig_source, gpu.id


# An absolute filesystem path: a "/" that starts a word (not inside a URL or a relative
# path such as "shared/validation") followed by a directory name and another "/".
_LOCAL_PATH = re.compile(r"(?<![\w:/.~-])/[A-Za-z_][\w.-]*/")


def test_no_record_carries_a_local_path(catalog: GpuCatalog) -> None:
    for gpu in catalog.all():
        text = " ".join(str(v) for v in gpu.model_dump().values())
        assert _LOCAL_PATH.search(text) is None, (gpu.id, _LOCAL_PATH.search(text))


def test_the_local_path_check_tells_paths_from_urls() -> None:
    assert _LOCAL_PATH.search("read from /data/models/x.csv")
    assert _LOCAL_PATH.search("(/srv/share/validation)")
    assert not _LOCAL_PATH.search("https://github.com/vllm-project/vllm/issues/10511")
    assert not _LOCAL_PATH.search("shared/validation vllm_v0.19_h100.csv; 79.19 GiB")


def test_unmeasured_memory_says_so(catalog: GpuCatalog) -> None:
    unmeasured = [g for g in catalog.all() if not g.memory_measured]
    assert {"mi325x", "mi355x", "radeon-pro-w7900", "h800-pcie-80gb"} <= {g.id for g in unmeasured}
    for gpu in unmeasured:
        assert gpu.memory_source is not None
        assert "no" in gpu.memory_source.lower(), gpu.id


def test_memory_mib_and_bytes_agree(catalog: GpuCatalog) -> None:
    for gpu in catalog.all():
        if gpu.memory_mib is not None:
            assert gpu.memory_bytes == gpu.memory_mib * 1024 * 1024


def test_driver_memory_is_near_the_marketed_figure(catalog: GpuCatalog) -> None:
    # Drivers report within a few percent of the marketed size (ECC and reserved memory
    # take a little; GiB-vs-GB can add up to 7.4%).
    for gpu in catalog.all():
        ratio = gpu.memory_bytes / (gpu.marketed_memory_gb * 10**9)
        assert 0.9 < ratio < 1.1, (gpu.id, ratio)


def test_gpus_without_bf16_give_fp16(catalog: GpuCatalog) -> None:
    for gpu_id in ("t4", "v100-sxm2-16gb", "v100-sxm2-32gb"):
        gpu = catalog.get(gpu_id)
        assert gpu.bf16_tflops is None
        assert gpu.fp16_tflops is not None


def test_mig_capable_gpus_have_profiles(catalog: GpuCatalog) -> None:
    for gpu_id in (
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm-80gb",
        "h200-sxm-141gb",
        "b200",
        "rtx-pro-6000-blackwell-server",
    ):
        assert catalog.get(gpu_id).mig_profiles, gpu_id
    assert catalog.get("l40s").mig_profiles == ()


# --- the CUDA-visible total ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu_id", "expected_bytes"),
    [
        # vLLM v0.19 printed total_gib 79.19 on an H100 80GB HBM3 (llm-d-planner v0.19.0 runs).
        ("h100-sxm-80gb", round(79.19 * GIB)),
        # PyTorch: "23.69 GiB total capacity" on an RTX 3090 (ucwxb/GraphAvatar#4).
        ("rtx-3090", round(23.69 * GIB)),
        # vLLM: "total_gpu_memory (31.37GiB)" on an RTX 5090 (vllm-project/vllm#14452).
        ("rtx-5090", round(31.37 * GIB)),
        # ComfyUI "VRAM Total: 47665709056" on an L20 (Lightricks/ComfyUI-LTXVideo#520).
        ("l20", 47_665_709_056),
        # deviceQuery "(42298834944 bytes)", A100-SXM4-40GB (bottlerocket-os/bottlerocket#3873).
        ("a100-sxm4-40gb", 42_298_834_944),
        # nvidia-smi -q: Total 16376 MiB, Reserved 434 MiB (nvidia_gpu_exporter capture).
        ("rtx-4080-super", (16376 - 434) * MIB),
        # nvidia-smi -q: Total 143771 MiB, Reserved 614 MiB (nvidia_gpu_exporter capture).
        ("h200-sxm-141gb", (143771 - 614) * MIB),
        # PyTorch: "GPU 0 has a total capacity of 22.03 GiB" on an L4 (ArcInstitute/evo2#190).
        ("l4", round(22.03 * GIB)),
    ],
)
def test_cuda_totals_are_the_cited_readings(
    catalog: GpuCatalog, gpu_id: str, expected_bytes: int
) -> None:
    assert catalog.get(gpu_id).cuda_total_bytes == expected_bytes


def test_rtx_3090_is_about_23_6_gib_to_cuda(catalog: GpuCatalog) -> None:
    # Issue 16: "an RTX 3090 is 24576 MiB in nvidia-smi, about 23.6 GiB to CUDA".
    gpu = catalog.get("rtx-3090")
    assert gpu.memory_bytes == 24576 * MIB
    assert 23.5 * GIB < gpu.cuda_total_bytes < 23.75 * GIB


@pytest.mark.parametrize(
    ("gpu_id", "multiprocessors"),
    [
        # deviceQuery "(132) Multiprocessors" / "(082) ..." / "(058) ..." (thamada/nvidia-smi).
        ("h100-sxm-80gb", 132),
        ("rtx-3090", 82),
        ("l4", 58),
        # XLA's device description of an H100 PCIe: core_count 114.
        ("h100-pcie-80gb", 114),
        # A10 datasheet: 72 RT cores, one per SM.
        ("a10", 72),
    ],
)
def test_multiprocessors_are_the_cited_readings(
    catalog: GpuCatalog, gpu_id: str, multiprocessors: int
) -> None:
    gpu = catalog.get(gpu_id)
    assert gpu.multiprocessors == multiprocessors
    assert gpu.multiprocessors_source


def test_multiprocessors_are_nvidia_only_and_sourced(catalog: GpuCatalog) -> None:
    counted = [g for g in catalog.all() if g.multiprocessors is not None]
    assert len(counted) >= 35
    for gpu in counted:
        assert gpu.vendor == "nvidia" and gpu.multiprocessors_source, gpu.id
    assert catalog.get("mi300x").multiprocessors is None


def test_a10_and_a10g_runtime_totals_are_readings(catalog: GpuCatalog) -> None:
    # PyTorch "21.99 GiB total capacity" on an A10 (zai-org/CogVLM#236); "NVIDIA A10G
    # (22.06 GiB)" from get_device_properties (tungsheng/cuda-kernel-lab).
    assert catalog.get("a10").cuda_total_bytes == round(21.99 * GIB)
    assert catalog.get("a10g").cuda_total_bytes == round(22.06 * GIB)
    assert catalog.get("a10").cuda_total_measured and catalog.get("a10g").cuda_total_measured


def test_readings_are_measured_and_derivations_are_not(catalog: GpuCatalog) -> None:
    assert catalog.get("h100-sxm-80gb").cuda_total_measured
    assert catalog.get("rtx-3090").cuda_total_measured
    # A driver reserve read with nvidia-smi is a derivation, not a runtime reading.
    assert not catalog.get("h200-sxm-141gb").cuda_total_measured
    assert not catalog.get("b300").cuda_total_measured
    for gpu in catalog.all():
        if not gpu.cuda_total_measured:
            assert "derived" in gpu.cuda_total_source, gpu.id


def test_runtime_never_sees_more_than_the_driver_total(catalog: GpuCatalog) -> None:
    for gpu in catalog.all():
        assert 0 < gpu.cuda_total_bytes < gpu.memory_bytes, gpu.id


def test_derivation_rule_is_the_documented_one() -> None:
    # docs/gpus.md: hold back max(1 GiB, 1% of the driver total). Worked by hand:
    # 16384 MiB (V100 16GB): 1% is 163.84 MiB, so 1 GiB is held back -> 15360 MiB.
    assert derived_cuda_total(16384 * MIB) == 15360 * MIB
    # 183359 MiB (B200) = 192265846784 bytes; 1% = 1922658467.84, rounded up to 1922658468
    # bytes (1.79 GiB, more than 1 GiB) -> 190343188316 bytes left.
    assert derived_cuda_total(183359 * MIB) == 190_343_188_316


def test_derived_records_follow_the_rule(catalog: GpuCatalog) -> None:
    v100 = catalog.get("v100-sxm2-16gb")
    assert not v100.cuda_total_measured
    assert v100.cuda_total_bytes == (16384 - 1024) * MIB


def test_derivation_rule_holds_back_more_than_any_reading(catalog: GpuCatalog) -> None:
    # The rule stands in where nothing was read, so it must err towards a smaller budget than
    # every reading: each measured gap (driver total - runtime total) is below the rule's gap.
    checked = 0
    for gpu in catalog.all():
        if gpu.cuda_total_measured or "Reserved" in gpu.cuda_total_source:
            gap = gpu.memory_bytes - gpu.cuda_total_bytes
            rule_gap = gpu.memory_bytes - derived_cuda_total(gpu.memory_bytes)
            assert 0 < gap < rule_gap, (gpu.id, gap / MIB, rule_gap / MIB)
            checked += 1
    assert checked >= 10


def test_mig_profile_cuda_total_is_the_profile_memory(catalog: GpuCatalog) -> None:
    # nvidia-smi -q lists 0 MiB Reserved inside a MIG instance (nvidia_gpu_exporter H100/H200
    # MIG captures), so the runtime sees the whole slice.
    profile = catalog.get("h100-sxm-80gb").mig_profile("3g.40gb")
    assert profile is not None
    assert profile.cuda_total_bytes == profile.memory_bytes == 40448 * MIB


# --- capabilities -------------------------------------------------------------------------------

# NVIDIA's CUDA GPUs list (developer.nvidia.com/cuda-gpus) and the MIG user guide's "Supported
# GPUs" table, transcribed.
COMPUTE_CAPABILITY = {
    "t4": "7.5",
    "v100-sxm2-32gb": "7.0",
    "a100-sxm4-80gb": "8.0",
    "a10g": "8.6",
    "a40": "8.6",
    "rtx-3090": "8.6",
    "l4": "8.9",
    "l20": "8.9",
    "rtx-4090": "8.9",
    "h100-sxm-80gb": "9.0",
    "h20": "9.0",
    "h800-sxm-80gb": "9.0",
    "b200": "10.0",
    "b300": "10.3",
    "rtx-5090": "12.0",
    "rtx-pro-6000-blackwell-server": "12.0",
}


@pytest.mark.parametrize(("gpu_id", "capability"), sorted(COMPUTE_CAPABILITY.items()))
def test_compute_capability(catalog: GpuCatalog, gpu_id: str, capability: str) -> None:
    gpu = catalog.get(gpu_id)
    assert gpu.compute_capability == capability
    # GFD labels it as two integers, nvidia.com/gpu.compute.major and .minor.
    major, minor = gpu.compute_capability.split(".")
    assert major.isdigit() and minor.isdigit()


def test_every_shipped_record_has_its_capability_facts(catalog: GpuCatalog) -> None:
    for gpu in catalog.all():
        assert gpu.architecture is not None, gpu.id
        assert (gpu.compute_capability is not None) == (gpu.vendor == "nvidia"), gpu.id
        assert (gpu.gfx_target is not None) == (gpu.vendor == "amd"), gpu.id


def test_nvidia_precision_support_follows_the_architecture(catalog: GpuCatalog) -> None:
    # BF16 tensor cores arrived with Ampere (8.0), FP8 with Ada and Hopper (8.9, 9.0), FP4 with
    # Blackwell (10.x, 12.x): NVIDIA's architecture whitepapers.
    for gpu in catalog.all():
        if gpu.vendor != "nvidia":
            continue
        assert gpu.compute_capability is not None
        capability = tuple(int(part) for part in gpu.compute_capability.split("."))
        assert gpu.bf16 == (capability >= (8, 0)), gpu.id
        assert gpu.fp8 == (capability >= (8, 9)), gpu.id
        assert gpu.fp4 == (capability >= (10, 0)), gpu.id
        assert gpu.fp8_format == ("ocp" if gpu.fp8 else None), gpu.id


@pytest.mark.parametrize(
    ("gpu_id", "gfx", "fp8_format"),
    [
        # ROCm "GPU hardware specifications": LLVM targets. FP8 on gfx94x is the fnuz encoding.
        ("mi250x", "gfx90a", None),
        ("mi300x", "gfx942", "fnuz"),
        ("mi325x", "gfx942", "fnuz"),
        ("mi355x", "gfx950", "ocp"),
        ("radeon-pro-w7900", "gfx1100", None),
    ],
)
def test_amd_targets(catalog: GpuCatalog, gpu_id: str, gfx: str, fp8_format: str | None) -> None:
    gpu = catalog.get(gpu_id)
    assert gpu.gfx_target == gfx
    assert gpu.fp8_format == fp8_format
    assert gpu.fp8 == (fp8_format is not None)


def test_bf16_flag_matches_bf16_tflops(catalog: GpuCatalog) -> None:
    for gpu in catalog.all():
        assert gpu.bf16 == (gpu.bf16_tflops is not None), gpu.id


# --- MIG ----------------------------------------------------------------------------------------

# NVIDIA MIG user guide, "Supported MIG Profiles"
# (docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html), column "Number of
# Instances Available", transcribed per GPU family. A profile the catalog does not record is
# simply not checked; a recorded profile missing from this table fails.
MIG_GUIDE_INSTANCES: dict[str, dict[str, int]] = {
    "a100-sxm4-40gb": {
        "1g.5gb": 7,
        "1g.5gb+me": 1,
        "1g.10gb": 4,
        "2g.10gb": 3,
        "3g.20gb": 2,
        "4g.20gb": 1,
        "7g.40gb": 1,
    },
    "a100-sxm4-80gb": {
        "1g.10gb": 7,
        "1g.10gb+me": 1,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    },
    "h100-sxm-80gb": {
        "1g.10gb": 7,
        "1g.10gb+me": 1,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    },
    "h100-nvl-94gb": {
        "1g.12gb": 7,
        "1g.12gb+me": 1,
        "1g.24gb": 4,
        "2g.24gb": 3,
        "3g.47gb": 2,
        "4g.47gb": 1,
        "7g.94gb": 1,
    },
    "h200-sxm-141gb": {
        "1g.18gb": 7,
        "1g.18gb+me": 1,
        "1g.35gb": 4,
        "2g.35gb": 3,
        "3g.71gb": 2,
        "4g.71gb": 1,
        "7g.141gb": 1,
    },
    "b200": {
        "1g.23gb": 7,
        "1g.23gb+me": 1,
        "1g.45gb": 4,
        "2g.45gb": 3,
        "3g.90gb": 2,
        "4g.90gb": 1,
        "7g.180gb": 1,
    },
    "gb200": {
        "1g.23gb": 7,
        "1g.23gb+me": 1,
        "1g.47gb": 4,
        "2g.47gb": 3,
        "3g.93gb": 2,
        "4g.93gb": 1,
        "7g.186gb": 1,
    },
    "rtx-pro-6000-blackwell-server": {
        "1g.24gb": 4,
        "1g.24gb+me": 1,
        "2g.48gb": 2,
        "4g.96gb": 1,
    },
}
# Boards that share a table with one above (the guide lists them under the same profile set).
MIG_GUIDE_SAME_AS = {
    "a100-pcie-40gb": "a100-sxm4-40gb",
    "a100-pcie-80gb": "a100-sxm4-80gb",
    "h100-pcie-80gb": "h100-sxm-80gb",
    "h200-nvl-141gb": "h200-sxm-141gb",
}


def test_h100_mig_counts_from_the_guide(catalog: GpuCatalog) -> None:
    # The guide: an H100 80GB holds 7 x 1g.10gb, 3 x 2g.20gb, 2 x 3g.40gb, 1 x 4g.40gb, 1 x 7g.80gb.
    gpu = catalog.get("h100-sxm-80gb")
    counts = {p.name: p.max_instances for p in gpu.mig_profiles}
    assert (counts["1g.10gb"], counts["2g.20gb"], counts["3g.40gb"]) == (7, 3, 2)
    assert (counts["4g.40gb"], counts["7g.80gb"]) == (1, 1)


def test_every_mig_profile_count_matches_the_guide(catalog: GpuCatalog) -> None:
    checked = 0
    for gpu in catalog.all():
        if not gpu.mig_profiles:
            continue
        table = MIG_GUIDE_INSTANCES[MIG_GUIDE_SAME_AS.get(gpu.id, gpu.id)]
        for profile in gpu.mig_profiles:
            assert profile.name in table, (gpu.id, profile.name)
            assert profile.max_instances == table[profile.name], (gpu.id, profile.name)
            checked += 1
    assert checked >= 50


def test_mig_instances_never_exceed_their_gpu(catalog: GpuCatalog) -> None:
    for gpu in catalog.all():
        for profile in gpu.mig_profiles:
            assert 0 < profile.memory_bytes <= gpu.memory_bytes, (gpu.id, profile.name)
            # a profile's N instances cannot hold more memory than the whole GPU
            assert profile.memory_bytes * profile.max_instances <= gpu.memory_bytes, (
                gpu.id,
                profile.name,
            )


def test_transcribed_mig_table_respects_compute_slices() -> None:
    # A check on the transcription: N instances of an Xg profile never use more compute slices
    # than the GPU has (7 on A100/H100/H200/B200/GB200, 4 on the RTX PRO 6000).
    for gpu_id, table in MIG_GUIDE_INSTANCES.items():
        slices = max(int(name.split("g.")[0]) for name in table)
        assert slices in (4, 7), gpu_id
        for name, count in table.items():
            assert int(name.split("g.")[0]) * count <= slices, (gpu_id, name)


# --- Kubernetes labels --------------------------------------------------------------------------


def gfd_label(nvml_name: str) -> str:
    """GPU Feature Discovery's rule, written out independently of the loader."""
    kept = "".join(ch for ch in nvml_name if ch.isascii() and (ch.isalnum() or ch in "-_. "))
    return kept.replace(" ", "-")


def test_gfd_rule_on_known_examples() -> None:
    assert gfd_label("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert gfd_label("Tesla T4") == "Tesla-T4"


def test_nvidia_labels_follow_the_gfd_rule(catalog: GpuCatalog) -> None:
    checked = 0
    for gpu in catalog.all():
        if gpu.vendor == "nvidia" and gpu.k8s_product_label is not None:
            assert gpu.nvml_name is not None, gpu.id
            assert gpu.k8s_product_label == gfd_label(gpu.nvml_name), gpu.id
            assert re.fullmatch(r"[A-Za-z0-9\-_.]+", gpu.k8s_product_label)
            checked += 1
    assert checked >= 40


def test_cards_sharing_an_nvml_name_leave_the_larger_unlabelled(catalog: GpuCatalog) -> None:
    # The 10 GB and 12 GB RTX 3080 report the same NVML name; the label goes to the smaller
    # one, so a 12 GB node is under-counted rather than an 8/10 GB node over-counted.
    by_name: dict[str, list[str]] = {}
    for gpu in catalog.all():
        if gpu.nvml_name is not None:
            by_name.setdefault(gpu.nvml_name, []).append(gpu.id)
    assert by_name["NVIDIA GeForce RTX 3080"] == ["rtx-3080-10gb", "rtx-3080-12gb"]
    assert catalog.get("rtx-3080-12gb").k8s_product_label is None
    # 8 GB variants exist (not in the catalog) with the same names as these 12/16 GB cards.
    for gpu_id in ("rtx-3060-12gb", "rtx-4060-ti-16gb", "rtx-5060-ti-16gb"):
        assert catalog.get(gpu_id).k8s_product_label is None, gpu_id


# --- lookups ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["h100-sxm-80gb", "H100-SXM-80GB", "h100", "H100", " h100-80gb "])
def test_get_is_case_insensitive_and_knows_aliases(catalog: GpuCatalog, ref: str) -> None:
    assert catalog.get(ref).id == "h100-sxm-80gb"


def test_contains(catalog: GpuCatalog) -> None:
    assert "A100" in catalog
    assert "no-such-gpu" not in catalog


def test_unknown_id_suggests_close_ids(catalog: GpuCatalog) -> None:
    with pytest.raises(NotFound) as excinfo:
        catalog.get("h100-sxm5-80")
    assert "h100-sxm-80gb" in excinfo.value.detail
    assert excinfo.value.field == "gpu"


def test_unknown_id_without_close_match(catalog: GpuCatalog) -> None:
    with pytest.raises(NotFound, match="unknown GPU 'zzzzzzzzzz'") as excinfo:
        catalog.get("zzzzzzzzzz")
    assert "by its memory" in excinfo.value.detail  # names the way out


# --- resolve: every way a scheduler names a GPU -------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "gpu_id", "matched_by"),
    [
        ("h100-sxm-80gb", "h100-sxm-80gb", "id"),
        ("H100", "h100-sxm-80gb", "alias"),
        ("NVIDIA-H100-80GB-HBM3", "h100-sxm-80gb", "k8s_product_label"),
        ("nvidia-h100-80gb-hbm3", "h100-sxm-80gb", "k8s_product_label"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb", "nvml_name"),
        # "tesla-t4" is also an alias of t4; ids and aliases are tried first.
        ("Tesla-T4", "t4", "alias"),
        ("NVIDIA-L40S", "l40s", "k8s_product_label"),
        ("NVIDIA-GeForce-RTX-4090-D", "rtx-4090d", "k8s_product_label"),
        ("NVIDIA-B300-SXM6-AC", "b300", "k8s_product_label"),
        ("NVIDIA-GeForce-RTX-3080", "rtx-3080-10gb", "k8s_product_label"),
    ],
)
def test_resolve_whole_gpu(catalog: GpuCatalog, ref: str, gpu_id: str, matched_by: str) -> None:
    match = catalog.resolve(ref)
    assert isinstance(match, GpuMatch)
    assert (match.gpu.id, match.mig_profile, match.shared) == (gpu_id, None, False)
    assert match.matched_by == matched_by
    assert match.ref == ref
    assert match.memory_bytes == match.gpu.memory_bytes
    assert match.target_id == gpu_id


@pytest.mark.parametrize(
    ("ref", "gpu_id", "profile", "shared"),
    [
        ("H100/1g.10gb", "h100-sxm-80gb", "1g.10gb", False),
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "a100-sxm4-80gb", "1g.10gb", False),
        ("nvidia-a100-sxm4-80gb-mig-3G.40GB", "a100-sxm4-80gb", "3g.40gb", False),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED", "a100-sxm4-40gb", "1g.5gb", True),
    ],
)
def test_resolve_mig_slice(
    catalog: GpuCatalog, ref: str, gpu_id: str, profile: str, shared: bool
) -> None:
    match = catalog.resolve(ref)
    assert match.gpu.id == gpu_id
    assert match.mig_profile is not None and match.mig_profile.name == profile
    assert match.shared is shared
    assert match.target_id == f"{gpu_id}/{profile}"
    # A process gets the slice, not the GPU.
    assert match.memory_bytes == match.mig_profile.memory_bytes < match.gpu.memory_bytes
    assert match.cuda_total_bytes == match.mig_profile.cuda_total_bytes


def test_resolve_h100_slice_memory(catalog: GpuCatalog) -> None:
    match = catalog.resolve("h100/1g.10gb")
    assert match.mig_profile is not None
    assert match.mig_profile.max_instances == 7
    # nvidia-smi mig -lgip prints 9.75 GiB for the H100 80GB 1g.10gb profile.
    assert match.memory_bytes == int(9.75 * 2**30)


def test_resolve_shared_whole_gpu(catalog: GpuCatalog) -> None:
    match = catalog.resolve("Tesla-T4-SHARED")
    assert (match.gpu.id, match.mig_profile, match.shared) == ("t4", None, True)


def test_resolve_unpacks_like_the_old_tuple(catalog: GpuCatalog) -> None:
    gpu, profile = catalog.resolve("l4")
    assert gpu.id == "l4"
    assert profile is None


@pytest.mark.parametrize(
    "ref", ["h100-sxm-80gb/1g.5gb", "NVIDIA-H100-80GB-HBM3-MIG-9g.99gb", "h100/7g.79gb"]
)
def test_unknown_profile_on_known_gpu_names_the_profiles(catalog: GpuCatalog, ref: str) -> None:
    with pytest.raises(NotFound) as excinfo:
        catalog.resolve(ref)
    detail = excinfo.value.detail
    assert "1g.10gb" in detail and "7g.80gb" in detail
    assert excinfo.value.field == "gpu"


def test_mig_label_on_gpu_without_recorded_profiles(catalog: GpuCatalog) -> None:
    with pytest.raises(NotFound, match="no MIG profiles"):
        catalog.resolve("NVIDIA-H20-MIG-1g.12gb")
    with pytest.raises(NotFound, match="no MIG profiles"):
        catalog.resolve("l4/1g.6gb")


@pytest.mark.parametrize(
    "ref", ["h900/1g.10gb", "NVIDIA-H900", "NVIDIA-H900-MIG-1g.10gb", "NVIDIA-GeForce-RTX-3060"]
)
def test_resolve_unknown_gpu(catalog: GpuCatalog, ref: str) -> None:
    with pytest.raises(NotFound):
        catalog.resolve(ref)


def test_rtx_3060_is_reached_by_id_only(catalog: GpuCatalog) -> None:
    assert catalog.resolve("rtx-3060-12gb").gpu.memory_bytes == 12288 * MIB


# --- ad-hoc GPUs --------------------------------------------------------------------------------


def test_ad_hoc_gpu_from_the_gfd_memory_label() -> None:
    # nvidia.com/gpu.memory=24576 on an RTX 3090 node: MiB.
    gpu = AdHocGpu.from_memory_mib(24576, "NVIDIA-GeForce-RTX-3090")
    assert gpu.memory_bytes == 24576 * MIB == 25_769_803_776
    # Not measured, so the documented rule: 1 GiB held back on a 24 GiB card.
    assert gpu.cuda_total_bytes == (24576 - 1024) * MIB
    assert gpu.cuda_total_measured is False
    assert "NVIDIA-GeForce-RTX-3090" in gpu.display_name
    assert gpu.target_id == "custom-25769803776"


@pytest.mark.parametrize("memory", [0, -1, 512, 2**51, True, 1.5e9, "24GB"])
def test_ad_hoc_gpu_rejects_bad_memory(memory: object) -> None:
    with pytest.raises(InvalidRequest) as excinfo:
        AdHocGpu(memory)  # type: ignore[arg-type]
    assert excinfo.value.field == "gpu_memory_bytes"


def test_ad_hoc_gpu_rejects_empty_label() -> None:
    with pytest.raises(InvalidRequest):
        AdHocGpu(GIB, "   ")


# --- filters ------------------------------------------------------------------------------------


def test_filter_by_vendor(catalog: GpuCatalog) -> None:
    amd = catalog.filter(vendor="AMD")
    assert {g.id for g in amd} >= {"mi250x", "mi300x", "mi325x", "mi355x", "radeon-pro-w7900"}
    assert all(g.vendor == "amd" for g in amd)
    assert catalog.filter(vendor="nosuchvendor") == ()


def test_filter_by_min_memory(catalog: GpuCatalog) -> None:
    big = catalog.filter(min_memory_bytes=150 * 10**9)
    ids = {g.id for g in big}
    assert {"b200", "gb200", "b300", "mi300x", "mi325x", "mi355x"} <= ids
    assert "h100-sxm-80gb" not in ids
    assert all(g.memory_bytes >= 150 * 10**9 for g in big)


def test_filter_combines_criteria(catalog: GpuCatalog) -> None:
    # 160 GB: above the H200's 143771 MiB (150.8 GB), below the B200's 183359 MiB (192.3 GB).
    result = catalog.filter(vendor="nvidia", min_memory_bytes=160 * 10**9)
    assert {g.id for g in result} == {"b200", "gb200", "b300"}


def test_filter_without_criteria_returns_everything(catalog: GpuCatalog) -> None:
    assert catalog.filter() == catalog.all()


@pytest.mark.parametrize(
    ("label", "gpu_id"),
    [
        ("NVIDIA-H100-80GB-HBM3", "h100-sxm-80gb"),
        ("nvidia-h100-80gb-hbm3", "h100-sxm-80gb"),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "h100-sxm-80gb"),
        ("NVIDIA-A100-SXM4-40GB-MIG-3g.20gb", "a100-sxm4-40gb"),
        ("Tesla-T4", "t4"),
        ("Tesla-T4-SHARED", "t4"),
        ("NVIDIA-A10G", "a10g"),
        ("NVIDIA-L20", "l20"),
    ],
)
def test_filter_by_label(catalog: GpuCatalog, label: str, gpu_id: str) -> None:
    assert [g.id for g in catalog.filter(k8s_product_label=label)] == [gpu_id]


def test_filter_by_unknown_label(catalog: GpuCatalog) -> None:
    assert catalog.filter(k8s_product_label="NVIDIA-H900") == ()
    assert catalog.filter(k8s_product_label="NVIDIA-H900-MIG-1g.10gb") == ()


def test_filter_by_label_with_unknown_profile_is_an_error(catalog: GpuCatalog) -> None:
    # Never the parent GPU for a profile that does not exist.
    with pytest.raises(NotFound, match="its profiles are"):
        catalog.filter(k8s_product_label="NVIDIA-H100-80GB-HBM3-MIG-9g.99gb")


def test_filter_by_label_and_vendor_mismatch(catalog: GpuCatalog) -> None:
    assert catalog.filter(vendor="amd", k8s_product_label="NVIDIA-L4") == ()


# --- invalid catalogs ---------------------------------------------------------------------------


def test_minimal_catalog_loads(tmp_path: Path) -> None:
    loaded = load_gpu_catalog(write_catalog(tmp_path, MINIMAL_GPU))
    gpu = loaded.get("test-gpu")
    assert gpu.memory_bytes == 1024 * 2**20
    # Unknown capability facts stay unknown; bf16 follows bf16_tflops; the CUDA total is derived.
    assert (gpu.architecture, gpu.compute_capability, gpu.bf16, gpu.fp4) == (
        None,
        None,
        True,
        False,
    )
    assert not gpu.cuda_total_measured
    assert gpu.cuda_total_bytes == derived_cuda_total(1024 * MIB)


def test_memory_bytes_alone_is_accepted(tmp_path: Path) -> None:
    body = MINIMAL_GPU.replace("memory_mib = 1024", "memory_bytes = 1000000000")
    assert load_gpu_catalog(write_catalog(tmp_path, body)).get("test-gpu").memory_bytes == 10**9


def _with(extra: str) -> str:
    return MINIMAL_GPU.replace('source = "hand-written test record"', extra + '\nsource = "t"')


def test_cuda_total_gib_is_read_as_printed(tmp_path: Path) -> None:
    body = _with('cuda_total_gib = 79.19\ncuda_total_source = "a vLLM log"').replace(
        "memory_mib = 1024", "memory_mib = 81559"
    )
    gpu = load_gpu_catalog(write_catalog(tmp_path, body)).get("test-gpu")
    assert gpu.cuda_total_bytes == round(79.19 * 2**30)
    assert gpu.cuda_total_measured
    assert gpu.cuda_total_source == "a vLLM log"


def test_driver_reserve_gives_a_derived_total(tmp_path: Path) -> None:
    body = _with('driver_reserved_mib = 100\ncuda_total_source = "nvidia-smi -q"')
    gpu = load_gpu_catalog(write_catalog(tmp_path, body)).get("test-gpu")
    assert gpu.cuda_total_bytes == (1024 - 100) * MIB
    assert not gpu.cuda_total_measured


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (MINIMAL_GPU + MINIMAL_GPU, "duplicate GPU id or alias 'test-gpu'"),
        (
            MINIMAL_GPU.replace('id = "test-gpu"', 'id = "a"\naliases = ["b"]')
            + MINIMAL_GPU.replace('id = "test-gpu"', 'id = "b"'),
            "duplicate GPU id or alias 'b': used by 'a' and 'b'",
        ),
        (
            MINIMAL_GPU.replace('id = "test-gpu"', 'id = "a"\naliases = ["shared"]')
            + MINIMAL_GPU.replace('id = "test-gpu"', 'id = "b"\naliases = ["shared"]'),
            "duplicate GPU id or alias 'shared'",
        ),
        (
            MINIMAL_GPU.replace('id = "test-gpu"', 'id = "a"\naliases = ["Shared"]'),
            "alias 'Shared' is not a lowercase slug",
        ),
        (MINIMAL_GPU.replace('vendor = "nvidia"', 'vendor = "nvdia"'), "unknown vendor 'nvdia'"),
        (MINIMAL_GPU.replace("memory_mib = 1024", "memory_mib = 0"), "memory_mib"),
        (MINIMAL_GPU.replace("memory_mib = 1024", "memory_mib = -3"), "memory_mib"),
        (
            MINIMAL_GPU.replace("memory_bandwidth_gbps = 100", "memory_bandwidth_gbps = 0"),
            "memory_bandwidth_gbps",
        ),
        (MINIMAL_GPU.replace("bf16_tflops = 10", "bf16_tflops = -1"), "bf16_tflops"),
        (
            MINIMAL_GPU.replace("marketed_memory_gb = 1", "marketed_memory_gb = 0"),
            "marketed_memory_gb",
        ),
        (
            MINIMAL_GPU.replace("memory_mib = 1024", "memory_mib = 1024\nmemory_bytes = 5"),
            "exactly one of memory_mib or memory_bytes",
        ),
        (MINIMAL_GPU.replace("memory_mib = 1024\n", ""), "memory_bytes"),
        (MINIMAL_GPU.replace('source = "hand-written test record"', ""), "source"),
        (MINIMAL_GPU.replace('id = "test-gpu"', 'id = "Test GPU"'), "id"),
        (MINIMAL_GPU + 'colour = "green"\n', "colour"),
        (MINIMAL_GPU.replace("fp8 = false", 'fp8 = "no"'), "fp8"),
        ("version = 1\n" + MINIMAL_GPU, "unknown top-level keys"),
        ("", "no [[gpu]] records"),
        ("[[gpu\n", "cannot read GPU catalog"),
        # capability facts
        (_with('architecture = "cdna3"'), "architecture 'cdna3' is not a nvidia family"),
        (_with('architecture = "pascal"'), "architecture"),
        (_with('gfx_target = "gfx942"'), "gfx_target is an AMD notion"),
        (_with('compute_capability = "9"'), "compute_capability"),
        (_with("bf16 = false"), "bf16 must be true exactly when bf16_tflops is given"),
        (_with('fp8_format = "ocp"'), "fp8_format is given but fp8 is false"),
        (_with('fp8_format = "e5m2"'), "fp8_format"),
        (_with("multiprocessors = 132"), "give multiprocessors together with"),
        (_with('multiprocessors_source = "x"'), "give multiprocessors together with"),
        (_with('multiprocessors = 0\nmultiprocessors_source = "x"'), "multiprocessors"),
        (
            _with('multiprocessors = 304\nmultiprocessors_source = "x"').replace(
                'vendor = "nvidia"', 'vendor = "amd"'
            ),
            "multiprocessors counts NVIDIA SMs",
        ),
        # CUDA totals
        (
            _with('cuda_total_gib = 0.9\ncuda_total_bytes = 5\ncuda_total_source = "x"'),
            "give at most one of",
        ),
        (_with("cuda_total_gib = 0.9"), "cuda_total_gib needs a cuda_total_source"),
        (_with('cuda_total_source = "x"'), "need a cuda_total value"),
        (_with('cuda_total_gib = 2.0\ncuda_total_source = "x"'), "exceeds the driver total"),
        (
            _with('cuda_total_gib = -1\ncuda_total_source = "x"'),
            "cuda_total_gib must be a positive number",
        ),
        (
            _with('driver_reserved_mib = 10\ncuda_total_measured = true\ncuda_total_source = "x"'),
            "not a measurement",
        ),
    ],
)
def test_invalid_catalog_raises(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(CatalogError, match=re.escape(message)):
        load_gpu_catalog(write_catalog(tmp_path, body))


def test_duplicate_labels_rejected(tmp_path: Path) -> None:
    record = MINIMAL_GPU.replace(
        'vendor = "nvidia"', 'vendor = "nvidia"\nk8s_product_label = "NVIDIA-Test"'
    )
    body = record + record.replace('id = "test-gpu"', 'id = "other-gpu"').replace(
        "NVIDIA-Test", "nvidia-test"
    )
    with pytest.raises(CatalogError, match="duplicate k8s_product_label 'nvidia-test'"):
        load_gpu_catalog(write_catalog(tmp_path, body))


def test_label_must_follow_nvml_name(tmp_path: Path) -> None:
    body = MINIMAL_GPU.replace(
        'vendor = "nvidia"',
        'vendor = "nvidia"\nnvml_name = "NVIDIA Test (rev 2)"\nk8s_product_label = "NVIDIA Test"',
    )
    with pytest.raises(CatalogError, match="does not follow the GFD rule"):
        load_gpu_catalog(write_catalog(tmp_path, body))


MIG_TAIL = """
mig_source = "hand-written"

  [[gpu.mig_profiles]]
  name = "1g.1gb"
  memory_mib = {mib}
  max_instances = {count}
"""


def test_mig_profile_loads(tmp_path: Path) -> None:
    loaded = load_gpu_catalog(
        write_catalog(tmp_path, MINIMAL_GPU + MIG_TAIL.format(mib=512, count=2))
    )
    _, profile = loaded.resolve("test-gpu/1g.1gb")
    assert profile is not None and profile.memory_bytes == 512 * 2**20


def test_mig_memory_above_gpu_rejected(tmp_path: Path) -> None:
    body = MINIMAL_GPU + MIG_TAIL.format(mib=2048, count=1)
    with pytest.raises(CatalogError, match=r"MIG profile '1g\.1gb' has .* more than the GPU's"):
        load_gpu_catalog(write_catalog(tmp_path, body))


def test_mig_instances_above_gpu_rejected(tmp_path: Path) -> None:
    # 3 x 512 MiB do not fit in a 1024 MiB GPU.
    body = MINIMAL_GPU + MIG_TAIL.format(mib=512, count=3)
    with pytest.raises(CatalogError, match=r"3 instances of .* exceed the GPU's"):
        load_gpu_catalog(write_catalog(tmp_path, body))


def test_mig_non_positive_instances_rejected(tmp_path: Path) -> None:
    body = MINIMAL_GPU + MIG_TAIL.format(mib=512, count=0)
    with pytest.raises(CatalogError, match="max_instances"):
        load_gpu_catalog(write_catalog(tmp_path, body))


def test_mig_bad_name_rejected(tmp_path: Path) -> None:
    body = (MINIMAL_GPU + MIG_TAIL.format(mib=512, count=1)).replace("1g.1gb", "one-gig")
    with pytest.raises(CatalogError, match="name"):
        load_gpu_catalog(write_catalog(tmp_path, body))


def test_mig_duplicate_profile_rejected(tmp_path: Path) -> None:
    body = (
        MINIMAL_GPU
        + MIG_TAIL.format(mib=512, count=1)
        + textwrap.dedent(
            """
        [[gpu.mig_profiles]]
        name = "1g.1gb"
        memory_mib = 256
        max_instances = 1
        """
        )
    )
    with pytest.raises(CatalogError, match="listed twice"):
        load_gpu_catalog(write_catalog(tmp_path, body))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read GPU catalog"):
        load_gpu_catalog(tmp_path / "absent.toml")


def test_error_names_the_record(tmp_path: Path) -> None:
    body = MINIMAL_GPU + MINIMAL_GPU.replace('id = "test-gpu"', 'id = "second"').replace(
        "bf16_tflops = 10", "bf16_tflops = 0"
    )
    with pytest.raises(CatalogError, match=r"gpu #2 \('second'\).*bf16_tflops"):
        load_gpu_catalog(write_catalog(tmp_path, body))


def test_derivation_rule_on_small_and_large_devices() -> None:
    # 100 GiB: 1% is exactly 1 GiB. 200 GiB: 1% is 2 GiB.
    assert derived_cuda_total(100 * GIB) == 99 * GIB
    assert derived_cuda_total(200 * GIB) == 198 * GIB
    # A toy 1024 MiB device (test catalogs) keeps three quarters rather than nothing.
    assert derived_cuda_total(1024 * MIB) == 768 * MIB
    assert derived_cuda_total(MIB) == MIB - MIB // 4
