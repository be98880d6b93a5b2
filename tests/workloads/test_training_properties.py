"""Properties of the training readers over random command lines and recipes.

- No command line, however odd, raises anything but `WorkloadError` (an unsplittable script);
  every other fault is a `ReadProblem`.
- A recipe of random keys and values never raises either.
- A HF flag written in any spelling reads back the value it was written with.
"""

from __future__ import annotations

import contextlib
import json
import string

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from service.workloads.sources import Token, WorkloadError
from service.workloads.training.files import ConfigFiles
from service.workloads.training.hf_arguments import FIELDS
from service.workloads.training.launchers import find_training_command

_HEADS = [
    "trl sft",
    "torchrun --nproc_per_node 2 train.py",
    "accelerate launch --config_file a.yaml train.py",
    "deepspeed --num_gpus 2 train.py",
    "llamafactory-cli train r.yaml",
    "axolotl train r.yaml",
    "tune run lora_finetune_distributed --config r.yaml",
    "python -m axolotl.cli.train r.yaml",
    "python train.py",
]
_FLAGS = [f"--{f.name}" for f in FIELDS] + [
    "--deepspeed",
    "--fsdp",
    "--config",
    "--num_processes",
    "--nnodes",
    "--x",
    "-m",
    "--",
    "=",
]
_WORDS = st.one_of(
    st.sampled_from(_FLAGS),
    st.text(string.printable, max_size=12),
    st.sampled_from(
        ["true", "false", "auto", "gpu", "8", "-1", "1:4", "²", "9" * 40, "{", "all-linear"]
    ),
)
_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_KEYS = st.sampled_from(
    [
        "model_name_or_path",
        "finetuning_type",
        "lora_rank",
        "lora_target",
        "quantization_bit",
        "cutoff_len",
        "per_device_train_batch_size",
        "deepspeed",
        "bf16",
        "adapter",
        "lora_r",
        "micro_batch_size",
        "sequence_len",
        "fsdp",
        "fsdp_config",
        "fsdp_version",
        "optimizer",
        "model",
        "batch_size",
        "dtype",
        "tokenizer",
        "loss",
        "distributed_type",
        "num_processes",
        "mixed_precision",
        "deepspeed_config",
        "zero_optimization",
        "flash_attn",
        "base_model",
    ]
)


def _files(doc: dict[str, object]) -> ConfigFiles:
    text = yaml.safe_dump(doc)
    return ConfigFiles(
        {name: (text, name) for name in ("r.yaml", "a.yaml", "ds.json")}
        | {"ds.json": (json.dumps(doc, default=str), "ds.json")}
    )


@settings(max_examples=300, deadline=None)
@given(
    head=st.sampled_from(_HEADS),
    words=st.lists(_WORDS, max_size=10),
    doc=st.dictionaries(_KEYS, _VALUES, max_size=6),
)
def test_no_input_raises_anything_but_workload_error(
    head: str, words: list[str], doc: dict[str, object]
) -> None:
    argv = [Token(w, f"argv[{i}]") for i, w in enumerate(head.split() + words)]
    with contextlib.suppress(WorkloadError):
        find_training_command(argv, None, _files(doc))


@settings(max_examples=100, deadline=None)
@given(
    batch=st.integers(min_value=1, max_value=4096),
    dashed=st.booleans(),
    inline=st.booleans(),
)
def test_hf_flag_spellings_read_back(batch: int, dashed: bool, inline: bool) -> None:
    flag = "--per-device-train-batch-size" if dashed else "--per_device_train_batch_size"
    words = [flag + f"={batch}"] if inline else [flag, str(batch)]
    argv = [Token(w, f"argv[{i}]") for i, w in enumerate(["trl", "sft", *words])]
    found, problems = find_training_command(argv, None, ConfigFiles())
    assert found is not None and not problems
    assert found.settings["batch_size"].value == batch
