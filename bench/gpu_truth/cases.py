"""Case list of the GPU ground-truth harness: load `cases.toml`, resolve and check each case.

A case names a workload (prefill, generate, or a training step) and a model whose Hugging Face
config fields are written inline in the case file (each with its source) or read from the
service catalog. `resolve` turns the TOML into frozen `Case` objects that travel to the worker
as JSON; `shrink` swaps the dimensions for tiny ones (for the CPU dry run) while keeping the
architecture's structure; `estimate_seconds` is the conservative H200 time guess the runner
budgets with.

Plain Python: no torch.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.gpu_truth.results_schema import KINDS, STATUSES

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DEFAULT_CASES = HERE / "cases.toml"
CATALOG_MODELS = REPO_ROOT / "service" / "catalog" / "models"

PRECISIONS = ("bf16", "bf16-mixed", "fp32")
DTYPES = ("bf16", "fp16", "fp32")
METHODS = ("full", "lora")
OPTIMIZERS = ("adamw-foreach", "adamw-fused", "adamw-forloop")
FORCE_FAILS = ("", "oom", "error", "crash", "hang")

# Fields a [[cases]] entry (or [defaults]) may set; anything else is a typo and an error.
CASE_FIELDS = {
    "id",
    "lists",
    "kind",
    "model",
    "num_hidden_layers",
    "dtype",
    "precision",
    "method",
    "lora_r",
    "lora_alpha",
    "lora_targets",
    "optimizer",
    "gradient_checkpointing",
    "attn",
    "batch",
    "seq_len",
    "new_tokens",
    "logits_to_keep",
    "steps",
    "timeout_s",
    "env",
    "requires",
    "force_fail",
    "expect",
    "notes",
}


class CaseError(ValueError):
    """The case file is malformed; names the case."""


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    model: str
    model_source: str
    config: dict[str, Any]  # Hugging Face config fields, layer override applied
    full_num_hidden_layers: int
    lists: tuple[str, ...] = ()
    dtype: str = "bf16"  # weights for inference; derived from precision for train
    precision: str = "bf16"
    method: str = ""
    lora_r: int = 16
    lora_alpha: int = 32
    lora_targets: tuple[str, ...] = ()
    optimizer: str = ""
    gradient_checkpointing: bool = False
    attn: str = "sdpa"
    batch: int = 1
    seq_len: int = 512
    new_tokens: int = 0
    logits_to_keep: int = 0
    steps: int = 2
    timeout_s: float = 120.0
    env: dict[str, str] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    force_fail: str = ""
    expect: str = "ok"
    shrunk: bool = False
    notes: str = ""

    @property
    def num_hidden_layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def model_type(self) -> str:
        return str(self.config["model_type"])

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Case:
        d = json.loads(text)
        for k in ("lists", "lora_targets", "requires"):
            d[k] = tuple(d[k])
        return cls(**d)


def _model_config(name: str, entry: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The HF config dict and its source for one [models.NAME] entry."""
    if "catalog" in entry:
        path = CATALOG_MODELS / f"{entry['catalog']}.json"
        if not path.is_file():
            raise CaseError(f"model {name}: catalog file {path} not found")
        data = json.loads(path.read_text())
        for key in ("hf_config", "config"):
            if isinstance(data.get(key), dict):
                data = data[key]
                break
        if "model_type" not in data:
            raise CaseError(f"model {name}: {path} holds no Hugging Face config fields")
        return dict(data), str(entry.get("source", f"service catalog {entry['catalog']}"))
    if not isinstance(entry.get("config"), dict):
        raise CaseError(f"model {name}: needs a [models.{name}.config] table or catalog = ID")
    if "source" not in entry:
        raise CaseError(f"model {name}: name the source of its config (source = ...)")
    return dict(entry["config"]), str(entry["source"])


def _with_layers(config: dict[str, Any], layers: int) -> dict[str, Any]:
    config = dict(config)
    config["num_hidden_layers"] = layers
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:layers]
    return config


def resolve(data: dict[str, Any]) -> list[Case]:
    """Checks a parsed case file and returns its cases in file order."""
    models = data.get("models", {})
    defaults = dict(data.get("defaults", {}))
    bad = set(defaults) - CASE_FIELDS
    if bad:
        raise CaseError(f"[defaults]: unknown fields {sorted(bad)}")
    cases: list[Case] = []
    seen: set[str] = set()
    for raw in data.get("cases", []):
        cid = raw.get("id")
        if not cid or cid in seen:
            raise CaseError(f"case id missing or repeated: {cid!r}")
        seen.add(cid)
        bad = set(raw) - CASE_FIELDS
        if bad:
            raise CaseError(f"case {cid}: unknown fields {sorted(bad)}")
        c = {**defaults, **raw}
        name = c.get("model")
        if name not in models:
            raise CaseError(f"case {cid}: model {name!r} is not under [models]")
        config, source = _model_config(name, models[name])
        full_layers = int(config["num_hidden_layers"])
        layers = int(c.get("num_hidden_layers", full_layers))
        if not 1 <= layers <= full_layers:
            raise CaseError(f"case {cid}: num_hidden_layers {layers} not in 1..{full_layers}")
        kind = c.get("kind")
        if kind not in KINDS:
            raise CaseError(f"case {cid}: kind {kind!r} not in {KINDS}")
        train = kind == "train"
        precision = c.get("precision", "bf16")
        if train:
            if precision not in PRECISIONS:
                raise CaseError(f"case {cid}: precision {precision!r} not in {PRECISIONS}")
            dtype = "bf16" if precision == "bf16" else "fp32"
            method = c.get("method", "full")
            optimizer = c.get("optimizer", "adamw-foreach")
            if method not in METHODS:
                raise CaseError(f"case {cid}: method {method!r} not in {METHODS}")
            if optimizer not in OPTIMIZERS:
                raise CaseError(f"case {cid}: optimizer {optimizer!r} not in {OPTIMIZERS}")
        else:
            dtype = c.get("dtype", "bf16")
            if dtype not in DTYPES:
                raise CaseError(f"case {cid}: dtype {dtype!r} not in {DTYPES}")
            precision, method, optimizer = dtype, "", ""
        new_tokens = int(c.get("new_tokens", 0)) if kind == "inference-generate" else 0
        if kind == "inference-generate" and new_tokens < 1:
            raise CaseError(f"case {cid}: a generate case needs new_tokens >= 1")
        expect = c.get("expect", "ok")
        force_fail = c.get("force_fail", "")
        if expect not in STATUSES or force_fail not in FORCE_FAILS:
            raise CaseError(f"case {cid}: bad expect {expect!r} or force_fail {force_fail!r}")
        case = Case(
            id=cid,
            kind=kind,
            model=name,
            model_source=source,
            config=_with_layers(config, layers),
            full_num_hidden_layers=full_layers,
            lists=tuple(c.get("lists", ())),
            dtype=dtype,
            precision=precision,
            method=method,
            lora_r=int(c.get("lora_r", 16)),
            lora_alpha=int(c.get("lora_alpha", 32)),
            lora_targets=tuple(c.get("lora_targets", ())) if method == "lora" else (),
            optimizer=optimizer,
            gradient_checkpointing=bool(c.get("gradient_checkpointing")),
            attn=str(c.get("attn", "sdpa")),
            batch=int(c.get("batch", 1)),
            seq_len=int(c.get("seq_len", 512)),
            new_tokens=new_tokens,
            logits_to_keep=int(c.get("logits_to_keep", 0)),
            steps=int(c.get("steps", 2)),
            timeout_s=float(c.get("timeout_s", 120)),
            env={str(k): str(v) for k, v in c.get("env", {}).items()},
            requires=tuple(c.get("requires", ())),
            force_fail=force_fail,
            expect=expect,
            notes=str(c.get("notes", "")),
        )
        if case.batch < 1 or case.seq_len < 1 or case.steps < 1:
            raise CaseError(f"case {cid}: batch, seq_len and steps must be >= 1")
        if method == "lora" and not case.lora_targets:
            raise CaseError(f"case {cid}: lora needs lora_targets")
        cases.append(case)
    return cases


def load_cases(path: str | Path = DEFAULT_CASES) -> list[Case]:
    with open(path, "rb") as f:
        return resolve(tomllib.load(f))


def select(cases: list[Case], lists: list[str], only: list[str] | None = None) -> list[Case]:
    """Cases in any of `lists` (file order), narrowed to the ids in `only` if given."""
    chosen = [c for c in cases if set(c.lists) & set(lists)]
    if only:
        unknown = set(only) - {c.id for c in cases}
        if unknown:
            raise CaseError(f"unknown case ids: {sorted(unknown)}")
        chosen = [c for c in cases if c.id in only]
    return chosen


# --- tiny shapes for the CPU dry run -------------------------------------------------------

_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")


def shrink(case: Case) -> Case:
    """The same case with tiny dimensions: the architecture's switches (model_type, tied
    embeddings, sliding windows, softcapping, MoE routing, rope type) stay, the sizes go."""
    cfg = dict(case.config)
    heads = int(cfg.get("num_attention_heads", 4))
    kv = int(cfg.get("num_key_value_heads", heads))
    cfg.update(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=4 if kv == heads else 2,
        intermediate_size=128,
        vocab_size=512,
    )
    if "head_dim" in cfg:
        cfg["head_dim"] = 16
    if "moe_intermediate_size" in cfg:
        cfg["moe_intermediate_size"] = 32
    for key in _EXPERT_COUNTS:
        if key in cfg:
            cfg[key] = 4
    if "num_experts_per_tok" in cfg:
        cfg["num_experts_per_tok"] = min(int(cfg["num_experts_per_tok"]), 2)
    if cfg.get("sliding_window"):
        cfg["sliding_window"] = min(int(cfg["sliding_window"]), 16)
    if "query_pre_attn_scalar" in cfg:
        cfg["query_pre_attn_scalar"] = 16
    for key in ("bos_token_id", "eos_token_id"):
        if isinstance(cfg.get(key), int) and cfg[key] >= 512:
            cfg[key] = 0
    # a config class's default pad id (Phi3's is 32000) must fit in the tiny vocabulary
    if not isinstance(cfg.get("pad_token_id"), int) or cfg["pad_token_id"] >= 512:
        cfg["pad_token_id"] = 0
    cfg = _with_layers(cfg, min(case.num_hidden_layers, 2))
    expect = case.expect if case.force_fail else "ok"
    return replace(
        case,
        config=cfg,
        batch=min(case.batch, 2),
        seq_len=min(case.seq_len, 48),
        new_tokens=min(case.new_tokens, 4) if case.new_tokens else 0,
        steps=min(case.steps, 2),
        timeout_s=min(case.timeout_s, 120.0),
        expect=expect,
        shrunk=True,
    )


# --- time estimate on one H200 -------------------------------------------------------------

# Conservative guesses, to be replaced by the measured wall_s of the first GPU run:
STARTUP_S = 12.0  # python + import torch/transformers(/peft) + CUDA context, per process
BUILD_S_PER_GB = 0.3  # random init on the device plus Python per module, per GB of weights
TFLOPS_FWD = 200e12  # effective bf16 FLOP/s of an HF eager forward (peak ~790)
TFLOPS_TRAIN = 150e12  # same for forward + backward
DECODE_S_PER_LAYER = 0.0006  # HF eager decode is launch-bound: s per layer per new token
OPT_BYTES_PER_S = 1.0e12  # AdamW touches ~16 bytes/param (bf16) at well under peak bandwidth


def approx_params(config: dict[str, Any]) -> tuple[float, float]:
    """(total, active per token) parameters from common config fields; for time only."""
    h = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config.get("num_attention_heads", 1))
    kv = int(config.get("num_key_value_heads", heads))
    hd = int(config.get("head_dim") or h // heads)
    vocab = int(config.get("vocab_size", 32000))
    attn = h * hd * (2 * heads + 2 * kv)
    experts = next((int(config[k]) for k in _EXPERT_COUNTS if config.get(k)), 0)
    if experts:
        inter = int(config.get("moe_intermediate_size") or config["intermediate_size"])
        per_tok = int(config.get("num_experts_per_tok", 1))
        mlp_total, mlp_active = 3 * h * inter * experts, 3 * h * inter * per_tok
    else:
        mlp_total = mlp_active = 3 * h * int(config["intermediate_size"])
    embed = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return (layers * (attn + mlp_total) + embed, layers * (attn + mlp_active) + embed)


def estimate_seconds(case: Case) -> float:
    """Seconds one case should take on an H200, process start included (conservative)."""
    total, active = approx_params(case.config)
    weight_bytes = total * (2 if case.dtype in ("bf16", "fp16") else 4)
    tokens = case.batch * case.seq_len
    t = STARTUP_S + 1.0 + BUILD_S_PER_GB * weight_bytes / 1e9
    if case.kind == "train":
        trainable = total if case.method == "full" else total * 0.01
        per_step = 6 * active * tokens / TFLOPS_TRAIN
        if case.gradient_checkpointing:
            per_step *= 4 / 3
        per_step += 16 * trainable / OPT_BYTES_PER_S + 0.5
        t += case.steps * per_step + 2.0
    else:
        t += 2 * active * tokens / TFLOPS_FWD + 1.0
        if case.kind == "inference-generate":
            t += case.new_tokens * (case.num_hidden_layers * DECODE_S_PER_LAYER + 0.005)
    return t
