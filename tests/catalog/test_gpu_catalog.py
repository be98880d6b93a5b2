"""Tests for the GPU catalog (service/catalog/gpus.toml and its loader).

Expected figures come from outside the code under test: the H100's 81559 MiB is what
nvidia-smi prints on an H100 80GB HBM3 (google/gvisor#10413, modal-labs/modal-client#2797),
and the Kubernetes label rule is GPU Feature Discovery's, re-implemented here by hand.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from service.catalog.gpu_catalog import CatalogError, GpuCatalog, load_gpu_catalog
from service.estimator.errors import NotFound

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
    assert len(catalog.all()) >= 28
    assert len(catalog) == len(catalog.all())


@pytest.mark.parametrize("gpu_id", REQUIRED_IDS)
def test_required_gpu_present(catalog: GpuCatalog, gpu_id: str) -> None:
    assert catalog.get(gpu_id).id == gpu_id


def test_order_is_stable(catalog: GpuCatalog) -> None:
    assert [g.id for g in catalog.all()] == [g.id for g in load_gpu_catalog().all()]


def test_h100_memory_is_the_nvidia_smi_figure(catalog: GpuCatalog) -> None:
    # nvidia-smi prints 81559 MiB on an H100 80GB HBM3; 1 MiB = 2^20 bytes.
    assert catalog.get("h100-sxm-80gb").memory_bytes == 81559 * 2**20 == 85_520_809_984


def test_mi300x_memory_is_the_rocm_smi_figure(catalog: GpuCatalog) -> None:
    # rocm-smi "VRAM Total Memory (B)" on an MI300X.
    assert catalog.get("mi300x").memory_bytes == 205_822_885_888


def test_every_record_names_its_sources(catalog: GpuCatalog) -> None:
    for gpu in catalog.all():
        assert gpu.source.strip(), gpu.id
        assert gpu.memory_source and gpu.memory_source.strip(), gpu.id
        if gpu.mig_profiles:
            assert gpu.mig_source, gpu.id


def test_unmeasured_memory_says_so(catalog: GpuCatalog) -> None:
    unmeasured = [g for g in catalog.all() if not g.memory_measured]
    assert catalog.get("mi325x") in unmeasured
    for gpu in unmeasured:
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


def test_mig_profiles_fit_their_gpu(catalog: GpuCatalog) -> None:
    for gpu in catalog.all():
        for profile in gpu.mig_profiles:
            assert 0 < profile.memory_bytes <= gpu.memory_bytes, (gpu.id, profile.name)
            # a profile's N instances cannot hold more memory than the whole GPU
            if "+" not in profile.name:
                assert profile.memory_bytes * profile.max_instances <= gpu.memory_bytes


def test_mig_capable_gpus_have_profiles(catalog: GpuCatalog) -> None:
    for gpu_id in ("a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200"):
        assert catalog.get(gpu_id).mig_profiles, gpu_id
    assert catalog.get("l40s").mig_profiles == ()


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
        if gpu.vendor == "nvidia" and gpu.nvml_name is not None:
            assert gpu.k8s_product_label == gfd_label(gpu.nvml_name), gpu.id
            assert re.fullmatch(r"[A-Za-z0-9\-_.]+", gpu.k8s_product_label)
            checked += 1
    assert checked >= 20


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
    with pytest.raises(NotFound, match="unknown GPU id 'zzzzzzzzzz'"):
        catalog.get("zzzzzzzzzz")


def test_resolve_plain_id(catalog: GpuCatalog) -> None:
    gpu, profile = catalog.resolve("l4")
    assert gpu.id == "l4"
    assert profile is None


def test_resolve_mig_profile(catalog: GpuCatalog) -> None:
    gpu, profile = catalog.resolve("H100/1g.10gb")
    assert gpu.id == "h100-sxm-80gb"
    assert profile is not None
    assert profile.name == "1g.10gb"
    assert profile.max_instances == 7
    # nvidia-smi mig -lgip prints 9.75 GiB for the H100 80GB 1g.10gb profile.
    assert profile.memory_bytes == int(9.75 * 2**30)


def test_resolve_unknown_profile_lists_profiles(catalog: GpuCatalog) -> None:
    with pytest.raises(NotFound) as excinfo:
        catalog.resolve("h100-sxm-80gb/1g.5gb")
    assert "1g.10gb" in excinfo.value.detail
    assert "7g.80gb" in excinfo.value.detail


def test_resolve_profile_on_gpu_without_mig(catalog: GpuCatalog) -> None:
    with pytest.raises(NotFound, match="no MIG profiles"):
        catalog.resolve("l4/1g.6gb")


def test_resolve_unknown_gpu(catalog: GpuCatalog) -> None:
    with pytest.raises(NotFound):
        catalog.resolve("h900/1g.10gb")


# --- filters ------------------------------------------------------------------------------------


def test_filter_by_vendor(catalog: GpuCatalog) -> None:
    amd = catalog.filter(vendor="AMD")
    assert {g.id for g in amd} >= {"mi250x", "mi300x", "mi325x"}
    assert all(g.vendor == "amd" for g in amd)
    assert catalog.filter(vendor="nosuchvendor") == ()


def test_filter_by_min_memory(catalog: GpuCatalog) -> None:
    big = catalog.filter(min_memory_bytes=150 * 10**9)
    ids = {g.id for g in big}
    assert {"b200", "gb200", "mi300x", "mi325x"} <= ids
    assert "h100-sxm-80gb" not in ids
    assert all(g.memory_bytes >= 150 * 10**9 for g in big)


def test_filter_combines_criteria(catalog: GpuCatalog) -> None:
    # 160 GB: above the H200's 143771 MiB (150.8 GB), below the B200's 183359 MiB (192.3 GB).
    result = catalog.filter(vendor="nvidia", min_memory_bytes=160 * 10**9)
    assert {g.id for g in result} == {"b200", "gb200"}


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
        ("NVIDIA-A10G", "a10g"),
    ],
)
def test_filter_by_label(catalog: GpuCatalog, label: str, gpu_id: str) -> None:
    assert [g.id for g in catalog.filter(k8s_product_label=label)] == [gpu_id]


def test_filter_by_unknown_label(catalog: GpuCatalog) -> None:
    assert catalog.filter(k8s_product_label="NVIDIA-H900") == ()
    assert catalog.filter(k8s_product_label="NVIDIA-H900-MIG-1g.10gb") == ()


def test_filter_by_label_and_vendor_mismatch(catalog: GpuCatalog) -> None:
    assert catalog.filter(vendor="amd", k8s_product_label="NVIDIA-L4") == ()


# --- invalid catalogs ---------------------------------------------------------------------------


def test_minimal_catalog_loads(tmp_path: Path) -> None:
    loaded = load_gpu_catalog(write_catalog(tmp_path, MINIMAL_GPU))
    assert loaded.get("test-gpu").memory_bytes == 1024 * 2**20


def test_memory_bytes_alone_is_accepted(tmp_path: Path) -> None:
    body = MINIMAL_GPU.replace("memory_mib = 1024", "memory_bytes = 1000000000")
    assert load_gpu_catalog(write_catalog(tmp_path, body)).get("test-gpu").memory_bytes == 10**9


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
