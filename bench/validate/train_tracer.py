"""Regenerate `data/train_tracer.jsonl`: reference-tracer training peaks over a fixed grid.

Each run executes `reference_tracer/train_peak.py` (real transformers model code
under FakeTensorMode + MemTracker: the bytes the caching allocator is asked for, i.e. what
`torch.cuda.max_memory_allocated` reports) with the project venv's python, and appends one
JSON line holding the grid point, the config it ran and the tracer's answer. CI never runs
this; it checks the estimator against the committed lines (`bench/validate/finetune.py`).

Model shapes are the public Hugging Face `config.json` fields of each model (the repo id is
given with each). The Llama shapes are read from the service's model catalog
(`service/catalog/models/llama.json`); the others are written out below, keeping only the
fields that shape memory.

Usage: `python -m bench.validate.train_tracer [--only SUBSTR] [--fresh]` (resumes by default).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.validate.paths import TRACER_DIR
from service.catalog.model_catalog import load_model_catalog

REPO = Path(__file__).resolve().parents[2]
TRACER = TRACER_DIR / "train_peak.py"
OUT = Path(__file__).resolve().parent / "data" / "train_tracer.jsonl"

_CATALOG = load_model_catalog()


def catalog_config(model: str, **overrides: object) -> dict[str, object]:
    """``model``'s config as the service's model catalog holds it, with ``overrides`` on top."""
    return {**_CATALOG.get(model).config, **overrides}


# Public config.json fields (source: the Hugging Face repo named in each key). The catalog's
# Llama-3.1-8B record leaves out rms_norm_eps; the value from its config.json is put back.
CONFIGS: dict[str, dict[str, object]] = {
    "meta-llama/Llama-3.2-1B": catalog_config("meta-llama/Llama-3.2-1B"),
    "meta-llama/Llama-3.2-3B": catalog_config("meta-llama/Llama-3.2-3B"),
    "meta-llama/Llama-3.1-8B": catalog_config("meta-llama/Llama-3.1-8B", rms_norm_eps=1e-5),
    "Qwen/Qwen2.5-0.5B": {
        "model_type": "qwen2",
        "num_hidden_layers": 24,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen2.5-1.5B": {
        "model_type": "qwen2",
        "num_hidden_layers": 28,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen2.5-7B": {
        "model_type": "qwen2",
        "num_hidden_layers": 28,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-0.6B": {
        "model_type": "qwen3",
        "num_hidden_layers": 28,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-1.7B": {
        "model_type": "qwen3",
        "num_hidden_layers": 28,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-8B": {
        "model_type": "qwen3",
        "num_hidden_layers": 36,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    },
    "google/gemma-2b": {
        "model_type": "gemma",
        "num_hidden_layers": 18,
        "hidden_size": 2048,
        "intermediate_size": 16384,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "vocab_size": 256000,
        "tie_word_embeddings": True,
        "hidden_act": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    },
    # Softcapped attention: transformers' Gemma2 has no SDPA path (`_supports_sdpa = False`),
    # so on any device without flash-attn it runs eager; the grid runs it with `eager`.
    "google/gemma-2-2b": {
        "model_type": "gemma2",
        "num_hidden_layers": 26,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "vocab_size": 256000,
        "tie_word_embeddings": True,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "query_pre_attn_scalar": 256,
        "sliding_window": 4096,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "float32",
    },
    "google/gemma-3-1b-pt": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 26,
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "vocab_size": 262144,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "query_pre_attn_scalar": 256,
        "hidden_activation": "gelu_pytorch_tanh",
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rms_norm_eps": 1e-6,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "torch_dtype": "bfloat16",
    },
    "mistralai/Mistral-7B-v0.3": {
        "model_type": "mistral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 32768,
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-5,
        "sliding_window": None,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-30B-A3B": {
        "model_type": "qwen3_moe",
        "num_hidden_layers": 48,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "torch_dtype": "bfloat16",
    },
    "mistralai/Mixtral-8x7B-v0.1": {
        "model_type": "mixtral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-5,
        "sliding_window": None,
        "torch_dtype": "bfloat16",
    },
}

# Grid points: (model, decoder layers or None for the model's own depth, seq, batch, flags).
# Flags: gc, lora, mixed, eager, fused, loss-legacy, loss-chunked. Depth is cut to 2-3 layers
# (widths, heads and vocabulary stay those of the real model) so a run takes seconds on a CPU;
# the estimator is checked against the same shallow config, and every per-layer term is still
# exercised. The first seven points are full-depth runs kept from the first data set.
GRID: list[tuple[str, int | None, int, int, tuple[str, ...]]] = [
    ("meta-llama/Llama-3.2-1B", None, 2048, 1, ()),
    ("meta-llama/Llama-3.2-1B", None, 2048, 1, ("mixed",)),
    ("meta-llama/Llama-3.2-1B", None, 4096, 2, ("gc",)),
    ("meta-llama/Llama-3.2-1B", None, 2048, 1, ("lora",)),
    ("meta-llama/Llama-3.2-1B", None, 512, 4, ("fused",)),
    ("meta-llama/Llama-3.2-1B", None, 1024, 1, ("eager",)),
    ("meta-llama/Llama-3.1-8B", None, 512, 1, ()),
    # Llama
    ("meta-llama/Llama-3.2-1B", 2, 8192, 1, ()),
    ("meta-llama/Llama-3.2-1B", 2, 2048, 4, ("mixed",)),
    ("meta-llama/Llama-3.2-1B", 2, 8192, 1, ("lora", "gc")),
    ("meta-llama/Llama-3.2-1B", 2, 2048, 2, ("lora", "mixed")),
    ("meta-llama/Llama-3.2-1B", 2, 2048, 1, ("eager", "gc")),
    ("meta-llama/Llama-3.2-3B", 2, 4096, 1, ()),
    ("meta-llama/Llama-3.2-3B", 2, 8192, 2, ("gc", "mixed")),
    ("meta-llama/Llama-3.2-3B", 2, 2048, 2, ("lora",)),
    ("meta-llama/Llama-3.2-3B", 2, 1024, 4, ("fused", "mixed")),
    ("meta-llama/Llama-3.1-8B", 2, 2048, 1, ("mixed",)),
    ("meta-llama/Llama-3.1-8B", 2, 8192, 1, ("lora", "gc")),
    ("meta-llama/Llama-3.1-8B", 2, 512, 2, ("fused",)),
    # Qwen2 / Qwen3
    ("Qwen/Qwen2.5-0.5B", 2, 4096, 2, ()),
    ("Qwen/Qwen2.5-0.5B", 2, 8192, 1, ("mixed", "gc")),
    ("Qwen/Qwen2.5-0.5B", 2, 2048, 4, ("lora",)),
    ("Qwen/Qwen2.5-1.5B", 3, 2048, 2, ("fused",)),
    ("Qwen/Qwen2.5-1.5B", 3, 8192, 1, ("lora", "gc", "mixed")),
    ("Qwen/Qwen2.5-1.5B", 3, 4096, 1, ("eager", "gc")),
    ("Qwen/Qwen2.5-7B", 2, 4096, 1, ("gc",)),
    ("Qwen/Qwen2.5-7B", 2, 1024, 2, ("lora", "fused")),
    ("Qwen/Qwen3-0.6B", 2, 2048, 2, ()),
    ("Qwen/Qwen3-0.6B", 2, 4096, 1, ("lora", "gc")),
    ("Qwen/Qwen3-0.6B", 2, 1024, 1, ("mixed", "fused")),
    ("Qwen/Qwen3-0.6B", 2, 2048, 1, ("lora", "eager")),
    ("Qwen/Qwen3-1.7B", 3, 8192, 1, ("gc",)),
    ("Qwen/Qwen3-1.7B", 3, 2048, 4, ("lora", "mixed")),
    ("Qwen/Qwen3-8B", 2, 512, 4, ("mixed",)),
    ("Qwen/Qwen3-8B", 2, 8192, 1, ("gc", "lora")),
    # Gemma (SDPA), Gemma 2 (eager: softcapping), Gemma 3
    ("google/gemma-2b", 2, 2048, 1, ()),
    ("google/gemma-2b", 2, 4096, 2, ("gc", "mixed")),
    ("google/gemma-2b", 2, 2048, 2, ("lora",)),
    ("google/gemma-2b", 2, 8192, 1, ("lora", "gc")),
    ("google/gemma-2-2b", 2, 1024, 1, ("eager",)),
    ("google/gemma-2-2b", 2, 2048, 2, ("eager", "lora")),
    ("google/gemma-2-2b", 2, 4096, 1, ("eager", "gc")),
    ("google/gemma-2-2b", 2, 512, 4, ("eager", "mixed", "fused")),
    ("google/gemma-3-1b-pt", 2, 4096, 1, ()),
    ("google/gemma-3-1b-pt", 2, 2048, 2, ("lora", "mixed")),
    # Mistral
    ("mistralai/Mistral-7B-v0.3", 2, 4096, 1, ()),
    ("mistralai/Mistral-7B-v0.3", 2, 8192, 2, ("gc",)),
    ("mistralai/Mistral-7B-v0.3", 2, 2048, 1, ("lora", "mixed")),
    ("mistralai/Mistral-7B-v0.3", 2, 1024, 4, ("fused",)),
    # MoE
    ("Qwen/Qwen3-30B-A3B", 2, 2048, 1, ()),
    ("Qwen/Qwen3-30B-A3B", 2, 8192, 1, ("gc",)),
    ("Qwen/Qwen3-30B-A3B", 2, 1024, 2, ("lora",)),
    # No mixed-precision MoE point: with fp32 expert weights under autocast, transformers
    # 5.24's grouped-mm experts fail (torch._grouped_mm takes bf16 only; autocast does not
    # cast it), so that configuration does not run at all.
    ("Qwen/Qwen3-30B-A3B", 2, 512, 4, ("fused",)),
    ("mistralai/Mixtral-8x7B-v0.1", 2, 1024, 1, ()),
    ("mistralai/Mixtral-8x7B-v0.1", 2, 4096, 2, ("gc", "fused")),
    ("mistralai/Mixtral-8x7B-v0.1", 2, 2048, 1, ("lora",)),
    # Loss paths (the harness variants above): transformers 4.44's and torchtune's chunked
    ("meta-llama/Llama-3.2-1B", 2, 4096, 1, ("loss-legacy",)),
    ("meta-llama/Llama-3.2-1B", 2, 4096, 1, ("gc", "lora", "loss-legacy")),
    ("meta-llama/Llama-3.2-1B", 2, 2048, 2, ("loss-legacy", "mixed")),
    ("Qwen/Qwen2.5-0.5B", 2, 4096, 1, ("loss-legacy",)),
    ("meta-llama/Llama-3.1-8B", 2, 8192, 1, ("gc", "lora", "loss-legacy")),
    ("meta-llama/Llama-3.2-1B", 2, 4096, 1, ("loss-chunked",)),
    ("meta-llama/Llama-3.2-1B", 2, 4096, 1, ("gc", "lora", "loss-chunked")),
    ("meta-llama/Llama-3.2-1B", 2, 2048, 2, ("loss-chunked", "mixed")),
    ("Qwen/Qwen2.5-0.5B", 2, 4096, 2, ("gc", "loss-chunked")),
]


# ---------------------------------------------------------------------------------------
# Loss-path variants. The tracer runs transformers' current loss path; the flags
# ``loss-legacy`` and ``loss-chunked`` run it with the model's forward replaced, before the
# tracer builds the model, by one that computes the loss as an older or another library does
# (written here from a reading of that library's source, named in each function):
#
# - legacy: transformers 4.44.2 ``LlamaForCausalLM.forward``: the logits are upcast to fp32 as
#   soon as lm_head returns them and the output holds them; the loss takes a contiguous copy of
#   the shifted logits and of the shifted labels and a mean cross entropy over them.
# - chunked: torchtune 0.6 ``TransformerDecoder.chunked_output`` and
#   ``CEWithChunkedOutputLoss`` (8 chunks): lm_head per chunk of the sequence, each chunk
#   upcast and its summed cross entropy taken in turn, divided by the count of labels; the
#   labels are shifted (torchtune's recipes shift labels, not logits), and the output holds no
#   logits (the recipes delete them before backward).
# ---------------------------------------------------------------------------------------

LOSS_FLAGS = {"loss-legacy": "legacy", "loss-chunked": "chunked"}
_TORCHTUNE_CHUNKS = 8


def _legacy_forward(self: Any, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
    import torch.nn.functional as F
    from transformers.modeling_outputs import CausalLMOutputWithPast

    hidden = self.model(input_ids=input_ids, **kwargs).last_hidden_state
    logits = self.lm_head(hidden).float()
    loss = None
    if labels is not None:
        shifted = logits[..., :-1, :].contiguous()
        targets = labels[..., 1:].contiguous()
        loss = F.cross_entropy(shifted.view(-1, shifted.size(-1)), targets.view(-1))
    return CausalLMOutputWithPast(loss=loss, logits=logits)


def _chunked_forward(self: Any, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
    import torch
    import torch.nn.functional as F
    from transformers.modeling_outputs import CausalLMOutputWithPast

    hidden = self.model(input_ids=input_ids, **kwargs).last_hidden_state
    chunks = [self.lm_head(part) for part in hidden.chunk(_TORCHTUNE_CHUNKS, dim=1)]
    targets = F.pad(labels[..., 1:], (0, 1), value=-100)
    total: Any = 0.0
    for logits, target in zip(chunks, targets.chunk(_TORCHTUNE_CHUNKS, dim=1), strict=True):
        total = total + F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(),
            target.reshape(-1),
            ignore_index=-100,
            reduction="sum",
        )
    del chunks
    loss = total / torch.count_nonzero(targets != -100)
    return CausalLMOutputWithPast(loss=loss, logits=None)


def _patched_tracer(loss: str, argv: list[str]) -> None:
    """Run the tracer script ``argv[0]`` with ``argv[1:]``, its models' loss path replaced."""
    import runpy
    import types

    import transformers

    forward = {"legacy": _legacy_forward, "chunked": _chunked_forward}[loss]
    original = transformers.AutoModelForCausalLM.from_config

    def from_config(*args: Any, **kwargs: Any) -> Any:
        model = original(*args, **kwargs)
        model.forward = types.MethodType(forward, model)
        return model

    transformers.AutoModelForCausalLM.from_config = from_config  # type: ignore[method-assign]
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")


def run_id(model: str, layers: int | None, seq: int, batch: int, flags: tuple[str, ...]) -> str:
    depth = f"@L{layers}" if layers else ""
    return f"{model}{depth}|s{seq}|b{batch}|{'+'.join(sorted(flags)) or 'base'}"


def grid_config(model: str, layers: int | None) -> dict[str, object]:
    cfg = dict(CONFIGS[model])
    if layers:
        cfg["num_hidden_layers"] = layers
    return cfg


def run_one(
    model: str, layers: int | None, seq: int, batch: int, flags: tuple[str, ...]
) -> dict[str, object]:
    cfg = grid_config(model, layers)
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = Path(tmp) / "config.json"
        cfg_path.write_text(json.dumps(cfg))
        loss = next((LOSS_FLAGS[f] for f in flags if f in LOSS_FLAGS), None)
        prefix = [sys.executable]
        if loss is not None:
            prefix += ["-m", "bench.validate.train_tracer", "--patched-tracer", loss]
        cmd = [
            *prefix,
            str(TRACER),
            "--config",
            str(cfg_path),
            "--name",
            model,
            "--seq",
            str(seq),
            "--batch",
            str(batch),
            "--attn",
            "eager" if "eager" in flags else "sdpa",
            "--optim",
            "fused" if "fused" in flags else "foreach",
        ]
        cmd += [f"--{f}" for f in ("gc", "lora", "mixed") if f in flags]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("{"))
    res = json.loads(line)
    res["args"].pop("config", None)
    return {
        "id": run_id(model, layers, seq, batch, flags),
        "model": model,
        "seq": seq,
        "batch": batch,
        "flags": sorted(flags),
        "config": cfg,
        "tracer": res,
    }


def main() -> None:
    if sys.argv[1:2] == ["--patched-tracer"]:
        _patched_tracer(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="", help="run only grid points whose id contains this")
    ap.add_argument("--fresh", action="store_true", help="discard the committed data first")
    a = ap.parse_args()
    done: set[str] = set()
    if a.fresh and OUT.exists():
        OUT.unlink()
    if OUT.exists():
        done = {json.loads(ln)["id"] for ln in OUT.read_text().splitlines() if ln.strip()}
    # LoRA runs are the slow ones under the tracer (peft's hooks): run them last.
    for model, layers, seq, batch, flags in sorted(GRID, key=lambda g: "lora" in g[4]):
        rid = run_id(model, layers, seq, batch, flags)
        if rid in done or a.only not in rid:
            continue
        t0 = time.perf_counter()
        try:
            rec = run_one(model, layers, seq, batch, flags)
        except subprocess.CalledProcessError as exc:
            print(f"{rid}: FAILED\n{exc.stderr[-2000:]}", flush=True)
            continue
        with OUT.open("a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        print(
            f"{rid}: {rec['tracer']['peak_GiB']} GiB ({time.perf_counter() - t0:.0f} s)",  # type: ignore[index]
            flush=True,
        )


if __name__ == "__main__":
    main()
