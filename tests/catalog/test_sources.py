"""Every source in the two catalogs names a public reference.

The project rule: a figure from elsewhere comes in with its source named as a public reference (a
repository and file, an issue or pull request, a model card, a datasheet). A file of the team's
private shared folder, a path of a build machine, a search-index id, or "several public
repositories" without one of them named is not a source. The checker is exercised on written-out
good and bad sources first, so that a broken pattern fails here rather than letting every
record through.
"""

from __future__ import annotations

import re

import pytest

from service.catalog.gpu_catalog import GpuCatalog, load_gpu_catalog
from service.catalog.model_catalog import ModelCatalog, load_model_catalog

# Private material: the shared folder's reference and validation files, absolute paths of a
# build machine, and search-index ids ("index id 0", "id 1234567": the figures here are made up).
_PRIVATE = re.compile(
    r"reference/gpus\.md|shared/(?:validation|reference)|(?:^|[\s(\[])/(?:work|root|home|srv|tmp)/"
    r"|index id|\bid \d{6,}",
    re.IGNORECASE,
)
# "Recorded in several public repositories" is a claim about sources, not a source.
_UNNAMED = re.compile(r"several public repositories|public repositories' notes", re.IGNORECASE)
# A named public reference: a URL, an issue or PR ("owner/repo#123"), or a repository file
# ("owner/repo some/path.ext").
_NAMED = re.compile(
    r"https?://\S+"
    r"|\b[\w.-]+/[\w.-]+#\d+"
    r"|\b[\w.-]+/[\w.-]+ [\w./-]+\.(?:md|py|txt|json|go|yaml|yml|toml|cc|cpp|h|ts)\b"
)


def problems(text: str | None) -> list[str]:
    """Why ``text`` fails as a source: an empty list when it is acceptable."""
    if not text:
        return []
    found = [f"private: {m.group(0).strip()!r}" for m in _PRIVATE.finditer(text)]
    if _UNNAMED.search(text) and not _NAMED.search(text):
        found.append("says 'several public repositories' without naming one")
    return found


def names_a_public_reference(text: str) -> bool:
    return bool(_NAMED.search(text))


@pytest.mark.parametrize(
    "text",
    [
        "nvidia-smi 32768 MiB on current drivers (reference/gpus.md, pasted nvidia-smi)",
        "usable GiB from nvidia-smi mig -lgip as collected in reference/gpus.md",
        "measured in shared/validation/vllm_v0.19_h100.csv",
        "copied from /home/builder/pkgs/x/litgpt/config.py",
        "a fixture (code index id 0)",
        "find_string hit id 1234567",
        "nvidia-smi memory.total 24564 MiB, as recorded in the environment notes of several "
        "public repositories",
    ],
)
def test_checker_rejects_private_and_unnamed_sources(text: str) -> None:
    assert problems(text), text


@pytest.mark.parametrize(
    "text",
    [
        "nvidia-smi 81559 MiB: google/gvisor#10413; modal-labs/modal-client#2797",
        "nvidia-smi 46068 MiB, driver 550.163.01: Kevin-Li-2025/L20-CodeForge docs/L20_RUNBOOK.md",
        "https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json (transcribed)",
        "NVIDIA H100 datasheet: 80 GB HBM3, 3.35 TB/s",
        "the figure appears in several public repositories, e.g. thamada/nvidia-smi "
        "gls/A40x10_smi.py",
    ],
)
def test_checker_accepts_public_references(text: str) -> None:
    assert problems(text) == [], text


def test_named_reference_pattern() -> None:
    assert names_a_public_reference("NVIDIA/mig-parted#120")
    assert names_a_public_reference("utkuozdemir/nvidia_gpu_exporter internal/captures/x.txt")
    assert not names_a_public_reference("pasted nvidia-smi (many)")
    assert not names_a_public_reference("NVIDIA A10 datasheet")


@pytest.fixture(scope="module")
def gpus() -> GpuCatalog:
    return load_gpu_catalog()


@pytest.fixture(scope="module")
def models() -> ModelCatalog:
    return load_model_catalog()


def test_gpu_sources_are_public(gpus: GpuCatalog) -> None:
    bad = {}
    for gpu in gpus.all():
        for field in ("memory_source", "cuda_total_source", "source", "mig_source", "notes"):
            found = problems(getattr(gpu, field))
            if found:
                bad[(gpu.id, field)] = found
    assert not bad, bad


def test_gpu_readings_name_where_they_were_read(gpus: GpuCatalog) -> None:
    # A driver total or runtime total presented as a reading cites the paste it was read from.
    for gpu in gpus.all():
        if gpu.memory_measured:
            assert gpu.memory_source and names_a_public_reference(gpu.memory_source), gpu.id
        if gpu.cuda_total_measured or "Reserved" in gpu.cuda_total_source:
            assert names_a_public_reference(gpu.cuda_total_source), gpu.id
        if gpu.mig_source:
            assert names_a_public_reference(gpu.mig_source) or "as a100" in gpu.mig_source, gpu.id


def test_model_sources_are_public(models: ModelCatalog) -> None:
    bad = {entry.id: problems(entry.source) for entry in models.all() if problems(entry.source)}
    assert not bad, bad


def test_model_sources_name_a_public_reference(models: ModelCatalog) -> None:
    for entry in models.all():
        assert names_a_public_reference(entry.source), entry.id
