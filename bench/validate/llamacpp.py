"""The llama.cpp engine against the buffer sizes llama.cpp printed in public logs.

``data/public_logs_llamacpp.csv`` holds context-creation logs from public issues and pull
requests (each row names its URL). A row is compared where its excerpt pins the model's shape
and the context settings; the shape is a catalog config or the hyper-parameters the log itself
prints, and :data:`CASES` says which and why. Compared, per row: the CPU and GPU model buffers,
the KV cache (all devices together: ``KV self size``) and the compute buffers (the GPU's and
the host's), each as llama.cpp prints it (MiB, two decimals). Rows that cannot be compared are
listed with the reason (:data:`NOT_COMPARED`).
"""

from __future__ import annotations

import csv
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.catalog.model_catalog import load_model_catalog
from service.estimator.engines import EngineContext, get_engine
from service.estimator.engines.llamacpp import (
    LlamaCppEngine,
    gguf_weights_for_preset,
    gguf_weights_from_architecture,
)
from service.estimator.model import Architecture, read_config

DATA = Path(__file__).resolve().parent / "data" / "public_logs_llamacpp.csv"
MIB = 2**20


@dataclass(frozen=True)
class Case:
    """How one row is re-estimated: the model (a catalog id or a config), why that shape, the
    llama.cpp options of the run, and what the row's figures are compared with."""

    model: str | dict[str, Any]
    why: str
    options: dict[str, Any]
    # The GGUF type every matrix has, when the log states it (None: the model buffers are not
    # compared, the per-tensor mix of the file being unknown).
    weight_format: str | None = None
    # The llama-quantize preset of the file, priced tensor by tensor by its rule
    # (service/estimator/gguf_quant.py); ``why`` says how the row pins it.
    preset: str | None = None
    # The printed compute buffer's device holds the output layer (its logits term counts).
    output_on_device: bool = True
    # Figures shown but kept out of the bound, with the reason.
    excluded: dict[str, str] = field(default_factory=dict)


# n_outputs_max = the micro-batch: every build before mid-2026 reserved logits for all of it.
_OLD = {"n_parallel": 1, "n_outputs_max": 1 << 20}

CASES: dict[str, Case] = {
    "l_logdetective106_2k": Case(
        "mistralai/Mistral-7B-Instruct-v0.2",
        "32 layers, 8 KV heads × 128, rope base 1e6 and a 32000 vocabulary (0.12 MiB output "
        "buffer) as printed: the Mistral-7B-Instruct-v0.2 shape",
        {**_OLD, "n_ctx": 2048, "n_batch": 512, "n_ubatch": 512, "flash_attn": False},
    ),
    "l_logdetective106_32k": Case(
        "mistralai/Mistral-7B-Instruct-v0.2",
        "the same run at -c 32768",
        {**_OLD, "n_ctx": 32768, "n_batch": 512, "n_ubatch": 512, "flash_attn": False},
    ),
    "l_9016": Case(
        "meta-llama/Meta-Llama-3-8B",
        "named in the issue; the file's preset is not in the excerpt: 281.81 MiB is the "
        "token_embd of Q4_0, Q4_K_S, Q4_K_M or IQ4_NL, and of the 19 modelled presets only "
        "Q4_0 gives the 4155.99 MiB on the GPU, so the row checks the offload and padding of "
        "a Q4_0 file more than the preset rule",
        {**_OLD, "n_ctx": 8192, "flash_attn": False},
        preset="Q4_0",
    ),
    "l_pr6122": Case(
        "CohereForAI/c4ai-command-r-v01",
        "40 layers, rope base 8e6 and 5120 MiB of f16 KV at 4096 cells (40 × 8192 × 2 × 2 B "
        "per cell: no GQA): the Command-R v01 shape",
        {**_OLD, "n_ctx": 4096, "flash_attn": False},
        output_on_device=False,
        # 1640.62 MiB on the CPU is the tied 256000 × 8192 embedding in Q6_K, as every K-quant
        # preset writes it; of the 19 presets only Q4_K_S gives the 19423.91 MiB the two GPUs
        # print together (Q4_K bulk, Q5_K for the first 4 attn_v and 5 ffn_down).
        preset="Q4_K_S",
        excluded={
            "gpu_compute": "pipeline parallelism (n_copies = 4) keeps 4 copies of the split "
            "inputs: not modelled"
        },
    ),
    "l_pr8035": Case(
        "meta-llama/Meta-Llama-3-70B",
        "80 layers, rope base 500000 (the 70B class); its model buffers (21285 MiB for 78 "
        "layers, about 2.1 bits a weight) are an IQ2-class file, a preset not modelled",
        {**_OLD, "n_ctx": 8192, "flash_attn": False},
        output_on_device=False,
    ),
    "l_18258": Case(
        "Qwen/Qwen3-0.6B",
        "28 layers, 8 KV heads × 128, rope base 1e6 as printed; E = 1024 from the host "
        "compute buffer (41.51 MiB = E·512·4 + 20224·512·4 B): the Qwen3-0.6B shape",
        {
            **_OLD,
            "n_ctx": 20224,
            "n_batch": 20224,
            "cache_type_k": "q8_0",
            "cache_type_v": "q8_0",
            "flash_attn": True,
        },
    ),
    "l_10547": Case(
        "Qwen/Qwen2.5-3B",
        "36 layers and 2 KV heads × 128 (144 MiB of f16 KV at 4096 cells), a draft model: the "
        "Qwen2.5-3B shape (assumed; the excerpt does not name it)",
        {**_OLD, "n_ctx": 4096, "flash_attn": True},
    ),
    "l_cpp944": Case(
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "num_hidden_layers": 48,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
            "torch_dtype": "float16",
        },
        "48 layers, n_ff 14336 and 10.73 B parameters as printed, the Llama-2 tokenizer "
        "(32000): 4096 wide with 8 KV heads is the only shape with that count (SOLAR-10.7B)",
        {"n_ctx": 4096},
        weight_format="gguf-q6_k",
    ),
}

NOT_COMPARED: dict[str, str] = {
    "l_13661": "split mode row; model not in the excerpt",
    "l_pr12449": "partial offload (98 splits) of a model not in the excerpt",
    "l_27953": "hybrid model (Qwen3.8-Flash-Next) whose shape is not in the excerpt",
    "l_pr15860": "memory breakdown of a model not in the excerpt",
    "l_24608": "--fit projection, model not in the excerpt",
    "l_pr25465": "--fit projection with a speculative context",
    "l_pr22673": "--fit projection, model not in the excerpt",
    "l_pr16653": "--fit projection",
    "l_ollama16031": "model not in the excerpt (--fit)",
    "l_cpp1944": "refusal without n_ctx",
    "l_ollama6860": "refusal; model not in the excerpt",
    "l_ollama3418": "refusal; model not in the excerpt",
    "l_jamepeng1": "n_ctx not in the excerpt",
    "l_ik344": "fork (ik_llama.cpp)",
    "l_ik333": "fork (ik_llama.cpp)",
    "l_llamafile552": "fork (llamafile)",
    "l_kobold724": "fork (koboldcpp)",
    "l_ikpr2295": "fork (ik_llama.cpp)",
}


@dataclass(frozen=True)
class Comparison:
    row_id: str
    figure: str
    printed_mib: float
    estimated_bytes: int
    excluded: str | None = None

    @property
    def estimated_mib(self) -> float:
        return self.estimated_bytes / MIB

    @property
    def error(self) -> float:
        return (self.estimated_mib - self.printed_mib) / self.printed_mib


def rows() -> list[dict[str, str]]:
    with DATA.open(newline="") as f:
        return list(csv.DictReader(f))


def _numbers(cell: str) -> list[float]:
    """The MiB figures of a cell, device labels dropped (``1536.00 (CUDA0) / 3584.00``)."""
    return [float(x) for x in re.findall(r"(?<![\w.])(\d+\.\d+)", cell)]


def _arch(model: str | dict[str, Any]) -> Architecture:
    if isinstance(model, dict):
        return read_config(model)
    return load_model_catalog().get(model).architecture


def compare(row: dict[str, str], case: Case) -> list[Comparison]:
    engine = get_engine("llama.cpp")
    assert isinstance(engine, LlamaCppEngine)
    arch = _arch(case.model)
    s = engine.resolve(case.options, EngineContext(arch, None))
    out: list[Comparison] = []

    def add(figure: str, cell: str, estimated: int, total: bool = False) -> None:
        values = _numbers(cell)
        if values:
            printed = sum(values) if total else values[0]
            out.append(
                Comparison(row["row_id"], figure, printed, estimated, case.excluded.get(figure))
            )

    kv = sum(engine.layer_kv_bytes(arch, s, i) for i in range(arch.num_layers))
    if row["kv_self_size_mib"]:
        add("kv_cache", row["kv_self_size_mib"], kv)
    elif row["kv_buffer_mib"]:
        add("kv_cache", row["kv_buffer_mib"], kv, total=True)
    if row["gpu_compute_buffer_mib"]:
        compute = engine.compute_bytes(arch, s, case.output_on_device)
        add("gpu_compute", row["gpu_compute_buffer_mib"], compute)
    if row["host_compute_buffer_mib"]:
        add("host_compute", row["host_compute_buffer_mib"], engine.host_compute_bytes(arch, s))
    g = None
    if case.weight_format is not None:
        g = gguf_weights_from_architecture(arch, case.weight_format)
    elif case.preset is not None:
        g = gguf_weights_for_preset(arch, case.preset, imatrix=False)
    if g is not None:
        # Every layer and the output offloaded: the CPU holds the token embedding; the GPUs
        # (summed: the layer split by free memory is not modelled) the rest.
        add("cpu_model", row["cpu_model_buffer_mib"], g.token_embd)
        gpu = sum(g.layers_cuda) + (g.output_cuda or g.token_embd_cuda) + g.output_norm_cuda
        add("gpu_model", row["gpu_model_buffer_mib"], gpu, total=True)
    return out


def results() -> list[Comparison]:
    out: list[Comparison] = []
    for row in rows():
        case = CASES.get(row["row_id"])
        if case is not None:
            out.extend(compare(row, case))
    return out


def report() -> str:
    comps = results()
    counted = [c for c in comps if c.excluded is None]
    lines = [
        "## llama.cpp",
        "",
        "The llama.cpp engine against the buffer sizes llama.cpp printed in public logs "
        "(bench/validate/data/public_logs_llamacpp.csv, each row with its URL; "
        "bench/validate/llamacpp.py says which model shape each row is read with and why). "
        "Figures in MiB as printed (two decimals); error = (estimate - printed) / printed. "
        "Model buffers are compared where the log states the file's type, or where one "
        "llama-quantize preset, priced tensor by tensor by its rule, is the only one that "
        "gives the printed buffers (the row's model shape says which and why; the GPU model "
        "buffers of several GPUs are summed).",
        "",
        "| row | figure | printed MiB | estimate MiB | error |",
        "|---|---|---:|---:|---:|",
    ]
    for c in comps:
        note = f" (not in the bound: {c.excluded})" if c.excluded else ""
        lines.append(
            f"| {c.row_id} | {c.figure} | {c.printed_mib:.2f} | {c.estimated_mib:.2f} | "
            f"{c.error:+.2%}{note} |"
        )
    errors = [abs(c.error) for c in counted]
    lines += [
        "",
        f"{len(counted)} figures from {len({c.row_id for c in counted})} logs: max |error| "
        f"{max(errors):.2%}, median {statistics.median(errors):.2%}. By figure (max |error|): "
        + ", ".join(
            f"{name} {max(abs(c.error) for c in counted if c.figure == name):.2%}"
            for name in dict.fromkeys(c.figure for c in counted)
        )
        + ".",
        "",
        "Rows not compared:",
        "",
    ]
    for row_id, why in NOT_COMPARED.items():
        lines.append(f"- {row_id}: {why}")
    lines.append("")
    lines.append("Model shapes:")
    lines.append("")
    for row_id, case in CASES.items():
        name = case.model if isinstance(case.model, str) else "the printed hyper-parameters"
        lines.append(f"- {row_id}: {name}; {case.why}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(report())
