"""Reading engine command lines: entrypoints, wrappers, flag syntax, provenance, errors."""

from __future__ import annotations

import pytest

from service.workloads.commands import format_engine_args, parse_command
from service.workloads.sources import Sourced, WorkloadError


def test_vllm_serve_with_positional_model_and_both_flag_styles() -> None:
    cmd = parse_command(
        [
            "vllm",
            "serve",
            "meta-llama/Llama-3.3-70B-Instruct",
            "-tp",
            "2",
            "--max-model-len=32k",
            "--port",
            "8000",
            "--gpu-memory-utilization",
            "0.85",
        ]
    )
    assert cmd.engine == "vllm"
    assert cmd.entrypoint == "vllm serve"
    assert cmd.model is not None
    assert cmd.model.repo_id == "meta-llama/Llama-3.3-70B-Instruct"
    assert cmd.model.source == "argv[2]"
    assert cmd.options["tensor_parallel_size"].value == 2
    assert cmd.options["tensor_parallel_size"].source == "argv[4]"
    assert cmd.options["max_model_len"].value == 32_000
    assert cmd.options["max_model_len"].source == "argv[5]"
    assert cmd.options["gpu_memory_utilization"].value == 0.85
    assert [a.text for a in cmd.ignored_args] == ["--port 8000"]
    assert cmd.ignored_args[0].source == "argv[6]"


def test_defaults_are_marked_as_such() -> None:
    cmd = parse_command("vllm serve Qwen/Qwen3-8B")
    layout = cmd.layout()
    assert {role: s.value for role, s in layout.items()} == {
        "tensor": 1,
        "pipeline": 1,
        "data": 1,
    }
    assert {s.source for s in layout.values()} == {"default"}
    tp = cmd.value("tensor_parallel_size")
    assert tp is not None and tp.source == "default"
    # gpu_memory_utilization is resolved by vLLM at start-up: no constant default to report.
    assert cmd.value("gpu_memory_utilization") is None


def test_openai_api_server_module_with_underscored_flags() -> None:
    cmd = parse_command(
        [
            "python3",
            "-u",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "Qwen/Qwen3-8B",
            "--max_model_len",
            "auto",
            "--no-enforce-eager",
            "--served-model-name",
            "qwen",
            "qwen3",
            "--dtype",
            "bfloat16",
            "--enable-lora",
            "--max-loras",
            "4",
            "--max-lora-rank",
            "64",
            "--kv-cache-dtype",
            "fp8",
            "-q",
            "fp8",
            "--kv-cache-memory-bytes",
            "20G",
            "--cpu-offload-gb",
            "4",
            "--trust-remote-code",
            "--max-num-seqs",
            "128",
            "--max-num-batched-tokens",
            "8K",
            "--block-size",
            "32",
            "-pp",
            "2",
            "-dp=2",
        ]
    )
    assert cmd.entrypoint == "python3 -m vllm.entrypoints.openai.api_server"
    assert cmd.model is not None and cmd.model.source == "argv[5]"
    expected = {
        "max_model_len": -1,
        "enforce_eager": False,
        "served_model_name": ("qwen", "qwen3"),
        "dtype": "bfloat16",
        "enable_lora": True,
        "max_loras": 4,
        "max_lora_rank": 64,
        "kv_cache_dtype": "fp8",
        "quantization": "fp8",
        "kv_cache_memory_bytes": 20 * 2**30,
        "cpu_offload_gb": 4.0,
        "trust_remote_code": True,
        "max_num_seqs": 128,
        "max_num_batched_tokens": 8 * 1024,
        "block_size": 32,
        "pipeline_parallel_size": 2,
        "data_parallel_size": 2,
    }
    assert {k: v.value for k, v in cmd.options.items()} == expected
    assert cmd.ignored_args == ()


def test_sglang_launch_server_in_a_shell_chain() -> None:
    cmd = parse_command(
        [
            "/bin/bash",
            "-lc",
            "ray start --head && exec env NCCL_DEBUG=INFO python3 -m sglang.launch_server "
            "--model-path $MODEL --tp 4 --dp-size 2 --context-length 128Ki "
            "--mem-fraction-static 0.8 --kv-cache-dtype fp8_e4m3 --chunked-prefill-size 4096 "
            "--max-running-requests 64 --quantization fp8 --dtype auto --enable-metrics "
            "--host 0.0.0.0  # start the server\n",
        ],
        env={"MODEL": "deepseek-ai/DeepSeek-V3"},
    )
    assert cmd.engine == "sglang"
    assert cmd.entrypoint == "python3 -m sglang.launch_server"
    assert cmd.model is not None
    assert cmd.model.repo_id == "deepseek-ai/DeepSeek-V3"
    assert "$MODEL from env MODEL" in cmd.model.source
    assert cmd.model.source.startswith("argv[2] word ")
    assert {k: v.value for k, v in cmd.options.items()} == {
        "tp_size": 4,
        "dp_size": 2,
        "context_length": 128 * 1024,
        "mem_fraction_static": 0.8,
        "kv_cache_dtype": "fp8_e4m3",
        "chunked_prefill_size": 4096,
        "max_running_requests": 64,
        "quantization": "fp8",
        "dtype": "auto",
    }
    assert cmd.env["NCCL_DEBUG"].value == "INFO"
    assert [a.text for a in cmd.ignored_args] == ["--enable-metrics", "--host 0.0.0.0"]
    assert cmd.layout()["tensor"].value == 4


def test_sglang_serve_positional_and_model_alias() -> None:
    cmd = parse_command("sglang serve Qwen/Qwen3-8B --tp-size 2")
    assert cmd.model is not None and cmd.model.repo_id == "Qwen/Qwen3-8B"
    cmd = parse_command("python -m sglang.launch_server --model Qwen/Qwen3-8B")
    assert cmd.model is not None and cmd.model.repo_id == "Qwen/Qwen3-8B"


def test_string_with_assignments_exports_and_line_continuations() -> None:
    script = (
        "export TP=4\n"
        "MODEL_ID=meta-llama/Llama-3.1-8B\n"
        'HF_HOME=/data vllm serve "$MODEL_ID" \\\n'
        "  --tensor-parallel-size $TP --max-model-len ${MAX_LEN:-16k}"
    )
    cmd = parse_command(script)
    assert cmd.model is not None and cmd.model.repo_id == "meta-llama/Llama-3.1-8B"
    assert cmd.options["tensor_parallel_size"].value == 4
    assert "$TP from" in cmd.options["tensor_parallel_size"].source
    assert cmd.options["max_model_len"].value == 16_000
    assert "$MAX_LEN unset" in cmd.options["max_model_len"].source
    assert cmd.env["HF_HOME"].value == "/data"


def test_prefix_assignment_does_not_reach_its_own_words() -> None:
    # POSIX expands the words before the prefix assignment takes effect for the command.
    cmd = parse_command('MODEL_ID=org/m vllm serve "$MODEL_ID"')
    assert cmd.model is not None and cmd.model.scheme == "unresolved"
    assert cmd.env["MODEL_ID"].value == "org/m"


def test_nested_shells_and_init_wrappers() -> None:
    cmd = parse_command(
        ["tini", "--", "sh", "-c", "bash -c 'exec vllm serve org/m --enforce-eager'"]
    )
    assert cmd.model is not None and cmd.model.repo_id == "org/m"
    assert cmd.options["enforce_eager"].value is True
    cmd = parse_command(["uv", "run", "--frozen", "vllm", "serve", "org/m", "-tp", "8"])
    assert cmd.options["tensor_parallel_size"].value == 8


def test_single_quotes_stop_expansion_and_double_quotes_keep_words_together() -> None:
    cmd = parse_command(
        ["sh", "-c", "vllm serve '$NAME' --served-model-name \"$ALIAS\""],
        env={"NAME": "org/a", "ALIAS": "my model"},
    )
    assert cmd.model is not None and cmd.model.given == "$NAME"
    assert cmd.model.scheme == "unresolved"
    assert cmd.options["served_model_name"].value == ("my model",)


def test_unquoted_variable_splits_into_flags() -> None:
    cmd = parse_command(
        ["sh", "-c", "vllm serve org/m $EXTRA_ARGS"],
        env={"EXTRA_ARGS": "-tp 2 --max-model-len 4K"},
    )
    assert cmd.options["tensor_parallel_size"].value == 2
    assert cmd.options["max_model_len"].value == 4096
    assert "$EXTRA_ARGS" in cmd.options["max_model_len"].source


def test_vllm_serve_model_flag_form_and_positional_after_flags() -> None:
    cmd = parse_command("vllm serve -tp 2 --model org/m")
    assert cmd.model is not None and cmd.model.given == "org/m"
    cmd = parse_command("vllm serve --enable-prefix-caching org/m")
    assert cmd.model is not None and cmd.model.given == "org/m"
    assert [a.text for a in cmd.ignored_args] == ["--enable-prefix-caching"]


def test_negative_and_boolean_forms() -> None:
    cmd = parse_command(
        "vllm serve org/m --max-model-len -1 --enforce-eager --no-trust-remote-code"
    )
    assert cmd.options["max_model_len"].value == -1
    assert cmd.options["enforce_eager"].value is True
    assert cmd.options["trust_remote_code"].value is False


def test_last_occurrence_wins_as_in_argparse() -> None:
    cmd = parse_command("vllm serve org/m -tp 2 --tensor-parallel-size 4")
    assert cmd.options["tensor_parallel_size"].value == 4
    assert cmd.options["tensor_parallel_size"].source == "command word 6"


def test_sglang_ignores_what_its_parser_lacks() -> None:
    cmd = parse_command(
        "python -m sglang.launch_server --model-path org/m --tp_size 2 --no-trust-remote-code"
    )
    assert "tp_size" not in cmd.options
    assert [a.text for a in cmd.ignored_args] == ["--tp_size 2", "--no-trust-remote-code"]


def test_several_engines_in_one_script_reads_the_first() -> None:
    cmd = parse_command("vllm serve org/a --port 8001 & vllm serve org/b --port 8002; wait")
    assert cmd.model is not None and cmd.model.given == "org/a"
    assert cmd.notes and "2 engine processes" in cmd.notes[0]


def test_config_file_is_noted() -> None:
    cmd = parse_command("vllm serve org/m --config /etc/vllm.yaml")
    assert any("--config" in note for note in cmd.notes)


@pytest.mark.parametrize(
    ("command", "field", "names"),
    [
        ("vllm serve org/m --tensor-parallel-size two", "command word 4", "--tensor-parallel-size"),
        ("vllm serve org/m --gpu-memory-utilization 1.5", "command word 4", "at most 1"),
        ("vllm serve org/m --dtype fp8", "command word 4", "--dtype"),
        ("vllm serve org/m --max-model-len", "command word 3", "expects a value"),
        ("vllm serve org/m --max-model-len --port 1", "command word 3", "expects a value"),
        ("vllm serve org/m --enforce-eager=true", "command word 3", "takes no value"),
        ("vllm serve org/m --max-model-len 1.5K", "command word 4", "binary suffix"),
        (
            "python -m sglang.launch_server --model-path m --context-length 8m",
            "command word 6",
            "SGLang",
        ),
    ],
)
def test_bad_values_name_the_flag_and_its_position(command: str, field: str, names: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_command(command)
    assert caught.value.problem.field == field
    assert names in caught.value.problem.detail


def test_unresolved_variable_in_a_value_says_so() -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_command(["sh", "-c", "vllm serve org/m -tp $TP"])
    assert caught.value.problem.fix is not None and "variable" in caught.value.problem.fix


@pytest.mark.parametrize(
    "command",
    [
        "",
        "   ",
        "python train.py --epochs 3",
        "sh -c 'echo hi'",
        "sh run.sh",
        ["nginx", "-g", "daemon off;"],
        [],
    ],
)
def test_no_engine_is_a_clear_error(command: str | list[str]) -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_command(command)
    assert caught.value.problem.field in ("command", "argv")


def test_unbalanced_quote_is_a_clear_error() -> None:
    with pytest.raises(WorkloadError, match="cannot be split"):
        parse_command("vllm serve 'org/m")


def test_format_engine_args_writes_what_the_engine_reads() -> None:
    argv = format_engine_args(
        "vllm",
        {"tensor_parallel_size": 2, "enforce_eager": False, "gpu_memory_utilization": 0.9},
    )
    assert argv == [
        "--tensor-parallel-size",
        "2",
        "--no-enforce-eager",
        "--gpu-memory-utilization",
        "0.9",
    ]
    assert format_engine_args("sglang", {"enable_lora": False, "tp_size": 2}) == ["--tp-size", "2"]
    with pytest.raises(TypeError):
        format_engine_args("vllm", {"tensor_parallel_size": True})
    with pytest.raises(KeyError):
        format_engine_args("vllm", {"tp_size": 2})


def test_engine_environment_switches_are_read_with_their_source() -> None:
    cmd = parse_command("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve org/m --max-model-len 200k")
    allow = cmd.options["allow_long_max_model_len"]
    assert allow.value is True
    assert allow.source == "env VLLM_ALLOW_LONG_MAX_MODEL_LEN (command word 0)"
    assert parse_command("vllm serve org/m").value("allow_long_max_model_len") == Sourced(
        False, "default"
    )
    # SGLang's EnvBool reads "yes" as true; vLLM's reader only "1" and "true".
    cmd = parse_command(
        "python -m sglang.launch_server --model-path m",
        env={
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "yes",
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "yes",
        },
    )
    assert cmd.options["allow_overwrite_longer_context_len"] == Sourced(
        True, "env SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
    )
    assert "allow_long_max_model_len" not in cmd.options
    cmd = parse_command("vllm serve org/m", env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "yes"})
    assert cmd.options["allow_long_max_model_len"].value is False
