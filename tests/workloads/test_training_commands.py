"""Trainer command lines and their real example configs (tests/workloads/data/training,
sources in SOURCES.md), read into the fine-tune fields.

Each expected value is worked out here from the trainer's own definitions, cited beside it:
transformers 5.24 ``TrainingArguments``, TRL ``_BaseConfig``/``SFTConfig``/``ModelConfig``,
accelerate ``launch.py``, DeepSpeed ``DeepSpeedZeroConfig``, LLaMA-Factory ``hparams``, axolotl
``utils/schemas``, torchtune's recipes, torch ``distributed/run.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from service.workloads.sources import Token
from service.workloads.training.files import ConfigFiles
from service.workloads.training.launchers import find_training_command
from service.workloads.training.settings import MISSING, ByModel, TrainingCommand

DATA = Path(__file__).parent / "data" / "training"


def text(name: str) -> str:
    return (DATA / name).read_text()


def read(
    command: str, files: dict[str, str] | None = None, env: dict[str, str] | None = None
) -> TrainingCommand:
    words = [Token("sh", "command"), Token("-c", "command"), Token(command, "command")]
    carried = ConfigFiles({p: (t, f"files[{p}]") for p, t in (files or {}).items()})
    found, problems = find_training_command(words, None, carried)
    assert not problems, problems
    assert found is not None
    return found


def values(command: TrainingCommand) -> dict[str, object]:
    return {name: s.value for name, s in command.settings.items()}


def test_trl_sft_with_peft_reads_every_flag_and_trl_defaults() -> None:
    found = read(
        "trl sft --model_name_or_path Qwen/Qwen2.5-7B --per_device_train_batch_size 4 "
        "--max_length 2048 --use_peft --lora_r 32 --gradient_checkpointing"
    )
    got = values(found)
    assert found.trainer == "trl"
    assert found.model is not None and found.model.repo_id == "Qwen/Qwen2.5-7B"
    assert got["method"] == "lora"  # ModelConfig.use_peft, no 4/8-bit base
    assert got["lora.rank"] == 32
    assert got["batch_size"] == 4 and got["sequence_length"] == 2048
    assert got["gradient_checkpointing"] == "full"
    # ModelConfig.dtype defaults to float32 and _BaseConfig.bf16 to true: autocast over fp32
    # weights, the LoRA base held in fp32.
    assert got["precision"] == "bf16-mixed"
    assert got["weight_format"] == "fp32"
    # TrainingArguments.optim defaults to adamw_torch_fused with torch >= 2.8: fused AdamW.
    assert got["optimizer"] == "adamw" and got["optimizer_foreach"] is False
    # attn_implementation None: transformers' SDPA.
    assert got["attention"] == "sdpa"
    # lora_target_modules None: peft's per-model-type default (q_proj, v_proj for qwen2).
    targets = found.settings["lora.target_modules"].value
    assert isinstance(targets, ByModel) and targets.resolve("qwen2", "bf16") == ("q_proj", "v_proj")
    # SFTConfig.loss_type defaults to chunked_nll: not modelled, floored at no logits at all.
    loss = found.settings["loss_implementation"]
    assert not loss.priced and loss.floor == "cut-cross-entropy"
    # trl launches accelerate, which starts one process per visible GPU by default.
    assert found.launch.name == "accelerate launch" and found.launch.nproc_per_node.value is None
    assert found.settings["lora.rank"].source == "command word 10"


def test_trl_qlora_reads_bitsandbytes_settings() -> None:
    found = read(
        "trl sft --model_name_or_path meta-llama/Llama-3.1-8B --use_peft --load_in_4bit "
        "--use_bnb_nested_quant --dtype bfloat16"
    )
    got = values(found)
    assert got["method"] == "qlora"
    assert got["weight_format"] == "nf4"  # bnb_4bit_quant_type nf4 with double quantization
    assert got["kbit_preparation"] == "none"  # bf16 load: non-quantized tensors stay bf16
    no_nested = values(read("trl sft --model_name_or_path m/x --use_peft --load_in_4bit"))
    assert no_nested["weight_format"] == "nf4-single"  # use_bnb_nested_quant defaults false
    # dtype float32 (the ModelConfig default): non-quantized tensors in fp32, as peft prepares.
    assert no_nested["kbit_preparation"] == "peft"


def test_hf_argument_spellings() -> None:
    # HfArgumentParser: --name=value, dashes for underscores, a bool's optional value, --no_x.
    found = read(
        "python train.py --model_name_or_path meta-llama/Llama-3.1-8B "
        "--per-device-train-batch-size=2 --bf16 false --fp16 --gradient_checkpointing true "
        "--optim adamw_bnb_8bit --max_seq_length 512 --dtype float32"
    )
    got = values(found)
    assert got["batch_size"] == 2 and got["sequence_length"] == 512
    assert got["precision"] == "fp16-mixed"
    assert got["gradient_checkpointing"] == "full"
    assert got["optimizer"] == "adamw-8bit"
    off = values(read("trl sft --model_name_or_path m/x --no_gradient_checkpointing"))
    assert off["gradient_checkpointing"] == "none"  # TRL's default true, turned off


def test_a_plain_script_without_trainer_flags_is_not_a_trainer() -> None:
    words = [
        Token("python3", "argv[0]"),
        Token("mnist.py", "argv[1]"),
        Token("--epochs=1", "argv[2]"),
    ]
    assert find_training_command(words, None, ConfigFiles())[0] is None


def test_a_script_leaves_its_defaults_unpriced_with_floors() -> None:
    found = read("python train.py --model_name_or_path meta-llama/Llama-3.1-8B")
    batch, length = found.settings["batch_size"], found.settings["sequence_length"]
    # TrainingArguments.per_device_train_batch_size defaults to 8, if the script parses them.
    assert batch.value == 8 and not batch.priced and batch.floor == 1
    assert not length.priced and length.floor == 1


def test_torchrun_axolotl_with_the_real_lora_8b_example() -> None:
    found = read(
        "torchrun --nproc_per_node 8 -m axolotl.cli.train config.yml",
        {"config.yml": text("axolotl_lora-8b.yml")},
    )
    got = values(found)
    assert found.trainer == "axolotl"
    assert found.launch.name == "torchrun" and found.launch.nproc_per_node.value == 8
    # adapter lora with load_in_8bit: true: LoRA on an 8-bit bitsandbytes base.
    assert got["method"] == "qlora" and got["weight_format"] == "int8"
    assert got["lora.rank"] == 32 and got["lora.target_modules"] == "all-linear"
    assert (
        got["batch_size"] == 2 and got["sequence_length"] == 4096
    )  # micro_batch_size, sequence_len
    assert got["gradient_checkpointing"] == "full"
    assert got["optimizer"] == "adamw-8bit"  # adamw_bnb_8bit
    assert got["attention"] == "flash"  # attn_implementation flash_attention_2
    assert got["precision"] == "bf16-mixed"  # bf16: auto, LoRA under autocast
    assert found.settings["batch_size"].source == "config.yml micro_batch_size"
    # lora_modules_to_save (embed_tokens, lm_head) is read and not priced; it only adds memory.
    saved = next(o for o in found.options if o.name == "lora_modules_to_save")
    assert not saved.priced and not saved.lowers


def test_axolotl_fft_with_fsdp_and_liger() -> None:
    found = read("axolotl train fft.yaml", {"fft.yaml": text("axolotl_fft-8b-liger-fsdp.yaml")})
    got = values(found)
    assert got["method"] == "full"
    # fsdp [full_shard, auto_wrap], no version: axolotl pins FSDP1; FULL_SHARD is ZeRO stage 3;
    # fsdp_offload_params true offloads parameters (and with them the optimizer step).
    assert got["zero_stage"] == 3 and got["sharding_implementation"] == "deepspeed"
    assert got["offload_parameters"] is True and got["offload_optimizer"] is True
    assert got["loss_implementation"] == "liger"  # liger_fused_linear_cross_entropy
    assert got["precision"] == "bf16-mixed"  # sharded mixed precision keeps fp32 masters


def test_llamafactory_lora_example() -> None:
    found = read(
        "llamafactory-cli train examples/train_lora/qwen3_lora_sft.yaml",
        {"examples/train_lora/qwen3_lora_sft.yaml": text("lf_qwen3_lora_sft.yaml")},
    )
    got = values(found)
    assert found.model is not None and found.model.repo_id == "Qwen/Qwen3-4B-Instruct-2507"
    assert got["method"] == "lora" and got["lora.rank"] == 8
    assert got["lora.target_modules"] == "all-linear"  # lora_target: all
    assert got["sequence_length"] == 2048 and got["batch_size"] == 1
    assert got["gradient_checkpointing"] == "full"  # disable_gradient_checkpointing false
    assert got["weight_format"] == "bf16" and got["precision"] == "bf16-mixed"
    assert got["attention"] == "sdpa"  # flash_attn auto: transformers' choice
    # NPROC_PER_NODE unset: one process per visible GPU.
    assert found.launch.nproc_per_node.value is None


def test_llamafactory_qlora_and_overrides() -> None:
    found = read(
        "llamafactory-cli train q.yaml cutoff_len=4096 per_device_train_batch_size=2",
        {"q.yaml": text("lf_qwen3_lora_sft_otfq.yaml")},
    )
    got = values(found)
    # quantization_bit 4, bnb, nf4, double_quantization defaults true.
    assert got["method"] == "qlora" and got["weight_format"] == "nf4"
    assert got["kbit_preparation"] == "none"
    assert got["sequence_length"] == 4096 and got["batch_size"] == 2
    assert found.settings["sequence_length"].source == "command word 3"


def test_llamafactory_full_with_zero3_and_an_unknown_config() -> None:
    files = {
        "full.yaml": text("lf_qwen3_full_sft.yaml"),
        "examples/deepspeed/ds_z3_config.json": text("lf_ds_z3_config.json"),
    }
    got = values(read("llamafactory-cli train full.yaml", files))
    assert got["method"] == "full" and got["zero_stage"] == 3
    assert got["precision"] == "bf16-mixed"
    del files["examples/deepspeed/ds_z3_config.json"]
    found = read("llamafactory-cli train full.yaml", files)
    stage = found.settings["zero_stage"]
    # Not carried: priced unsharded, with ZeRO-3 and full offload as the floor.
    assert stage.value == 0 and not stage.priced and stage.floor == 3
    assert [c.read_from for c in found.configs if c.role == "deepspeed"] == [None]


def test_deepspeed_offload_config() -> None:
    found = read(
        "deepspeed --num_gpus 4 train.py --model_name_or_path m/x --deepspeed ds.json --bf16",
        {"ds.json": text("lf_ds_z3_offload_config.json")},
    )
    got = values(found)
    assert found.launch.nproc_per_node.value == 4
    assert got["zero_stage"] == 3
    assert got["offload_optimizer"] is True and got["offload_parameters"] is True
    z2 = values(
        read(
            "torchrun train.py --model_name_or_path m/x --deepspeed z2.json",
            {"z2.json": text("lf_ds_z2_config.json")},
        )
    )
    assert z2["zero_stage"] == 2 and z2["offload_optimizer"] is False


def test_accelerate_launch_with_its_fsdp_template() -> None:
    found = read(
        "accelerate launch --config_file fsdp.yaml train.py --model_name_or_path "
        "meta-llama/Llama-3.1-8B",
        {"fsdp.yaml": text("accelerate_fsdp.yaml")},
    )
    got = values(found)
    assert found.launch.nproc_per_node.value == 2  # num_processes: 2
    # distributed_type FSDP, fsdp_version unset (the plugin's default, 1), FULL_SHARD.
    assert got["zero_stage"] == 3 and got["sharding_implementation"] == "deepspeed"
    assert got["precision"] == "bf16-mixed"  # mixed_precision bf16 over a sharded model
    flag = values(
        read(
            "accelerate launch --config_file fsdp.yaml --num_processes 8 train.py "
            "--model_name_or_path m/x",
            {"fsdp.yaml": text("accelerate_fsdp.yaml")},
        )
    )
    assert flag["zero_stage"] == 3
    missing = read("accelerate launch --config_file fsdp.yaml train.py --model_name_or_path m/x")
    assert missing.settings["zero_stage"].floor == 3
    assert missing.configs[0].read_from is None


def test_trl_bundled_accelerate_configs_match_their_published_files() -> None:
    for name in ("zero3", "fsdp2"):
        bundled = values(read(f"trl sft --model_name_or_path m/x --accelerate_config {name}"))
        posted = values(
            read(
                f"trl sft --model_name_or_path m/x --config_file {name}.yaml",
                {f"{name}.yaml": text(f"trl_{name}.yaml")},
            )
        )
        assert bundled == posted
    assert (
        values(read("trl sft --model_name_or_path m/x --accelerate_config fsdp2"))[
            "sharding_implementation"
        ]
        == "fsdp2"
    )


def test_torchtune_lora_distributed() -> None:
    found = read(
        "tune run --nproc_per_node 2 lora_finetune_distributed --config llama3_1/8B_lora",
        {"llama3_1/8B_lora": text("torchtune_8B_lora.yaml")},
    )
    got = values(found)
    assert found.model is not None and found.model.repo_id == "meta-llama/Llama-3.1-8B"
    assert got["method"] == "lora" and got["lora.rank"] == 8
    # lora_attn_modules [q_proj, v_proj, output_proj] + apply_lora_to_mlp (w1, w2, w3).
    assert set(got["lora.target_modules"]) == {  # type: ignore[arg-type]
        "q_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }
    assert got["precision"] == "bf16" and got["batch_size"] == 2
    assert got["zero_stage"] == 3 and got["sharding_implementation"] == "fsdp2"
    assert found.launch.nproc_per_node.value == 2
    # tokenizer.max_seq_len null: samples keep their length; floored at one token.
    assert found.settings["sequence_length"].floor == 1


def test_torchtune_qlora_single_device() -> None:
    found = read(
        "tune run lora_finetune_single_device --config q.yaml batch_size=4",
        {"q.yaml": text("torchtune_8B_qlora_single_device.yaml")},
    )
    got = values(found)
    assert got["method"] == "qlora" and got["weight_format"] == "nf4"
    assert got["gradient_checkpointing"] == "full" and got["batch_size"] == 4
    assert found.launch.nproc_per_node.value == 1 and "zero_stage" not in got


def test_torchrun_reads_the_operators_environment() -> None:
    words = [
        Token("torchrun", "argv[0]"),
        Token("train.py", "argv[1]"),
        Token("--model_name_or_path", "argv[2]"),
        Token("m/x", "argv[3]"),
    ]
    from service.workloads.sources import Sourced

    env = {"PET_NNODES": Sourced("4", "x"), "PET_NPROC_PER_NODE": Sourced("gpu", "y")}
    found, _ = find_training_command(words, env, ConfigFiles())
    assert found is not None
    assert found.launch.nnodes.value == 4 and found.launch.nproc_per_node.value is None


def test_unknown_files_are_named_and_the_missing_sentinel_is_kept() -> None:
    found = read("trl sft --model_name_or_path m/x --config cfg.yaml")
    assert any("cfg.yaml" in note for note in found.notes)
    assert found.settings["method"].floor is MISSING


@pytest.mark.parametrize("bad", ["{", "a: [1, 2", "- just\n- a list"])
def test_unparsable_files_are_problems(bad: str) -> None:
    words = [Token("sh", "c"), Token("-c", "c"), Token("llamafactory-cli train x.yaml", "command")]
    _, problems = find_training_command(
        words, None, ConfigFiles({"x.yaml": (bad, "files[x.yaml]")})
    )
    assert problems and "x.yaml" in problems[0].field


def test_yaml_aliases_are_refused() -> None:
    bomb = "a: &a [1, 2]\nb: [*a, *a]\n"
    words = [Token("sh", "c"), Token("-c", "c"), Token("llamafactory-cli train x.yaml", "command")]
    _, problems = find_training_command(words, None, ConfigFiles({"x.yaml": (bomb, "f")}))
    assert problems and "aliases" in problems[0].detail


def test_a_deepspeed_precision_the_trainer_flags_contradict_is_a_problem() -> None:
    # axolotl deepspeed_configs/zero3_bf16.json sets bf16.enabled true; a script run without
    # --bf16 makes the HF Trainer refuse the mismatch (integrations/deepspeed.py fill_match).
    words = [
        Token("sh", "c"),
        Token("-c", "c"),
        Token("torchrun train.py --model_name_or_path m/x --deepspeed z3.json", "command"),
    ]
    files = ConfigFiles({"z3.json": (text("axolotl_zero3_bf16.json"), "files[z3.json]")})
    _, problems = find_training_command(words, None, files)
    assert [p.field for p in problems] == ["z3.json bf16.enabled"]
    words[2] = Token(f"{words[2].text} --bf16", "command")
    assert find_training_command(words, None, files)[1] == []


@pytest.mark.parametrize(
    "command",
    [
        "python -m vllm.entrypoints.openai.api_server --model m/x --dtype bfloat16",
        "python3 -m sglang.launch_server --model-path m/x --dtype bfloat16",
        "python serve.py --dtype bfloat16 --bf16",
    ],
)
def test_serving_and_other_scripts_are_no_trainers(command: str) -> None:
    words = [Token("sh", "c"), Token("-c", "c"), Token(command, "command")]
    assert find_training_command(words, None, ConfigFiles())[0] is None
