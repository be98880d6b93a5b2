"""SGLang's defaults per release line, each worked by hand from the release's own rule.

Sources (public repository sgl-project/sglang at the release's tag):
- line A - D: ``python/sglang/srt/server_args.py``, ``ServerArgs.__post_init__``;
- line E: ``server_args.py``, ``ServerArgs._handle_gpu_memory_settings``;
- line F: ``python/sglang/srt/arg_groups/memory_hook.py``, ``handle_gpu_memory_settings``,
  ``reserve_for_graph_mb`` and ``adjust_mem_fraction_for_vlm``;
- ``cuda_graph_hook.generate_prefill_cuda_graph_batch_sizes`` (the prefill graph's sizes),
  ``model_executor/model_runner.py`` ``init_memory_pool`` (request slots, req_to_token rows).

GPU memory is nvidia-smi's memory.total in MiB: H100 81559, H200 143771, B200 183359,
RTX 4090 24564, A100-40GB 40960 (service/catalog/gpus.toml).
"""

from __future__ import annotations

import pytest

from service.estimator.engines import sglang_versions as sv
from service.estimator.errors import InvalidRequest

H100, H200, B200, RTX4090, A100_40 = 81559, 143771, 183359, 24564, 40960


def _inputs(
    gpu: int | None,
    tp: int = 1,
    pp: int = 1,
    chunk: int = 8192,
    bs: int = 256,
    graph_tokens: int | None = None,
    mla: bool = False,
    multimodal: bool = False,
    layers: int = 24,
    hidden: int = 1024,
) -> sv.FractionInputs:
    return sv.FractionInputs(
        gpu_mib=gpu,
        tp=tp,
        pp=pp,
        chunked_prefill_size=chunk,
        decode_max_bs=bs,
        decode_graphs=True,
        prefill_graph_max_tokens=chunk if graph_tokens is None else graph_tokens,
        mla=mla,
        multimodal=multimodal,
        vit_layers=layers,
        vit_hidden=hidden,
    )


def _fraction(version: str, x: sv.FractionInputs) -> float:
    return sv.fraction_default(sv.release(version), x)


# ---- versions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "modelled"),
    [
        ("0.2.15", "A", (0, 2, 15)),
        ("0.4.5", "A", (0, 4, 5)),
        ("0.4.6", "B", (0, 4, 6)),
        ("0.4.7", "C", (0, 4, 7)),
        ("v0.4.8.post1", "D", (0, 4, 8)),
        ("0.5.5.post3", "E", (0, 5, 5)),
        ("0.5.2", "D", (0, 5, 2)),
        ("0.5.3", "E", (0, 5, 3)),
        ("0.5.18", "E", (0, 5, 18)),
        ("0.5.20", "F", (0, 5, 20)),
        ("0.5.23", "F", (0, 5, 23)),
    ],
)
def test_release_lines(text: str, line: str, modelled: tuple[int, int, int]) -> None:
    rel = sv.release(text)
    assert (rel.line.name, rel.version, rel.notes) == (line, modelled, ())


def test_versions_not_read_or_outside_say_so() -> None:
    unread = sv.release("0.5.9")
    assert unread.line.name == "E" and "not among the releases read" in unread.notes[0]
    old = sv.release("0.1.18")
    assert old.line.name == "A" and old.version == (0, 2, 15) and "older" in old.notes[0]
    new = sv.release("0.6.1")
    assert new.line.name == "F" and new.version == (0, 5, 23) and "newer" in new.notes[0]


@pytest.mark.parametrize("text", ["latest", "", "0", "five", "0.5.x"])
def test_unparseable_version_names_the_field(text: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        sv.release(text)
    assert e.value.field == "engine_options.version"


def test_default_version_is_the_newest_modelled() -> None:
    assert sv.DEFAULT_VERSION == "0.5.23"
    assert sv.release(sv.DEFAULT_VERSION).line is sv.LINES[-1]


# ---- mem_fraction_static, line by line ----------------------------------------------------


@pytest.mark.parametrize(
    ("version", "tp", "expected"),
    [
        # 0.2.15: tp >= 16 0.79, >= 8 0.83, >= 4 0.85, >= 2 0.87, else 0.88
        ("0.2.15", 1, 0.88),
        ("0.2.15", 2, 0.87),
        ("0.2.15", 4, 0.85),
        ("0.2.15", 8, 0.83),
        ("0.2.15", 16, 0.79),
        ("0.3.6", 8, 0.82),
        ("0.4.0", 8, 0.81),
        ("0.4.5", 4, 0.85),
    ],
)
def test_line_a_tp_table(version: str, tp: int, expected: float) -> None:
    # The table ignores the GPU: the same on a 4090 and an H200.
    for gpu in (RTX4090, H200):
        assert _fraction(version, _inputs(gpu, tp=tp)) == expected


def test_line_b() -> None:
    # gpu <= 81920 MiB: the 0.4.0 table; above, (gpu - 13 * 1024) / gpu, not rounded.
    assert _fraction("0.4.6", _inputs(H100)) == 0.88
    assert _fraction("0.4.6", _inputs(H200)) == pytest.approx((143771 - 13312) / 143771)
    assert _fraction("0.4.6", _inputs(H200)) == pytest.approx(0.90741, abs=1e-5)


def test_line_c() -> None:
    # H200: f = 0.88; min(0.88 + 48*1024*0.12/143771, (143771 - 18*1024)/143771)
    #     = min(0.88 + 0.041025, 0.871796) = 0.871796
    assert _fraction("0.4.7", _inputs(H200)) == pytest.approx(125339 / 143771)
    assert _fraction("0.4.7", _inputs(B200)) == 0.79  # above 180000 MiB
    # up to 81920 MiB the table by tp * pp: TP 4 x PP 2 = 8 -> 0.81
    assert _fraction("0.4.7", _inputs(H100, tp=4, pp=2)) == 0.81


@pytest.mark.parametrize(
    ("gpu", "tp", "expected"),
    [
        # reserved = (9.5 + ps/2) GiB below 90 GiB: TP 1 10240 MiB -> 71319/81559 = 0.87445
        (H100, 1, 0.874),
        # TP 8: 13.5 GiB = 13824 MiB -> 67735/81559 = 0.83050
        (H100, 8, 0.831),
        # below 35 GiB: (2.8 + 0.1) GiB = 2969.6 MiB -> 21594.4/24564 = 0.87911
        (RTX4090, 1, 0.879),
        # A100-40GB is below 90 GiB: 10240 MiB -> 30720/40960 = 0.75
        (A100_40, 1, 0.75),
        # below 160 GiB: (12 + 0.5) GiB = 12800 -> 130971/143771 = 0.91097
        (H200, 1, 0.911),
        # otherwise 32 GiB: 150591/183359 = 0.82129
        (B200, 1, 0.821),
    ],
)
def test_line_d_reserved_tiers(gpu: int, tp: int, expected: float) -> None:
    assert _fraction("0.5.2", _inputs(gpu, tp=tp)) == expected


def test_line_e_heuristic() -> None:
    # 0.5.3 on an H100, chunk 8192, decode bs 256: 512 + 1.5*8192 + 2*256 + 1/8*1024
    # = 512 + 12288 + 512 + 128 = 13440 MiB -> 68119/81559 = 0.83521
    assert _fraction("0.5.3", _inputs(H100)) == 0.835
    # RTX 4090: chunk 2048, bs 16: 512 + 3072 + 32 + 128 = 3744 (no 10 GiB floor below 60 GiB)
    # -> 20820/24564 = 0.84758
    assert _fraction("0.5.3", _inputs(RTX4090, chunk=2048, bs=16)) == 0.848
    # A small reserve is raised to 10 GiB above 60 GiB: chunk 2048, bs 8 -> 10240 -> 0.87445
    assert _fraction("0.5.3", _inputs(H100, chunk=2048, bs=8)) == 0.874


def test_line_e_prefill_graph_from_0_5_10() -> None:
    # 58 prefill sizes up to 8192 tokens (8 + 14 + 8 + 8 + 12 + 8), 8 MiB each = 464 MiB:
    # 13440 + 464 = 13904 -> 67655/81559 = 0.82952
    assert sv.prefill_graph_sizes(8192) == 58
    assert _fraction("0.5.10", _inputs(H100)) == 0.830
    # MLA: a flat 1.5 GiB instead: 13440 + 1536 = 14976 -> 66583/81559 = 0.81638
    assert _fraction("0.5.10", _inputs(H100, mla=True)) == 0.816
    # PP 2 captures no prefill graph; ps/8 GiB = 256: 13568 -> 67991/81559 = 0.83364
    assert _fraction("0.5.10", _inputs(H100, pp=2)) == 0.834


@pytest.mark.parametrize(("tokens", "sizes"), [(2048, 42), (4096, 50), (16384, 74), (100, 12)])
def test_prefill_graph_sizes(tokens: int, sizes: int) -> None:
    # 4..32 step 4 (8), 48..256 step 16 (14), 288..512 step 32 (8), 576..1024 step 64 (8),
    # 1280..4096 step 256 (12), 4608.. step 512 (16384: 24). 100 tokens: 8 + (48, 64, 80, 96).
    assert sv.prefill_graph_sizes(tokens) == sizes


def test_line_f() -> None:
    # 0.5.23 on an RTX 4090: chunk 4096, bs 48, 50 prefill sizes:
    # 512 + 6144 + 96 + 128 + 400 = 7280 -> 17284/24564 = 0.70363
    rel = sv.release("0.5.23")
    assert sv.chunked_prefill_default(rel, RTX4090) == 4096
    assert sv.cuda_graph_max_bs_default(rel, RTX4090, 1) == 48
    assert _fraction("0.5.23", _inputs(RTX4090, chunk=4096, bs=48)) == 0.704
    # Without a GPU reading: 0.95 (0.88 before 0.5.20)
    assert _fraction("0.5.23", _inputs(None)) == 0.95
    assert _fraction("0.5.18", _inputs(None)) == 0.88
    assert _fraction("0.5.2", _inputs(None)) == 0.88


def test_line_f_decode_batch_follows_max_running_requests() -> None:
    # 0.5.23 lowers the default decode bs to --max-running-requests; 0.5.20 does not.
    assert sv.decode_max_bs(sv.release("0.5.23"), 256, 64) == 64
    assert sv.decode_max_bs(sv.release("0.5.20"), 256, 64) == 256
    # H100, bs 64: 512 + 12288 + 128 + 128 + 464 = 13520 -> 68039/81559 = 0.83423
    assert _fraction("0.5.23", _inputs(H100, bs=64)) == 0.834


def test_vlm_adjustment_from_0_4_9() -> None:
    # Gemma 3's SigLIP tower: 27 layers of width 1152. 27 * 1152^2 / (24 * 1024^2) = 1.42383;
    # 1 - 0.1 * 0.42383 = 0.957617 -> 0.95 * 0.957617 = 0.909736
    assert sv.vlm_factor(27, 1152) == pytest.approx(0.909736, abs=1e-6)
    # the factor is clamped to [0.8, 1.05] before the 0.95
    assert sv.vlm_factor(240, 2048) == pytest.approx(0.95 * 0.8)
    assert sv.vlm_factor(1, 64) == pytest.approx(0.95 * 1.05)
    # 0.5.3 on an H100: a multimodal model captures no prefill graph; 0.835 * 0.909736
    x = _inputs(H100, multimodal=True, layers=27, hidden=1152)
    assert _fraction("0.5.3", x) == pytest.approx(0.835 * 0.909736, abs=1e-6)
    # not before 0.4.9
    assert _fraction("0.4.8", x) == 0.874


# ---- chunked_prefill_size and cuda_graph_max_bs ------------------------------------------


@pytest.mark.parametrize(
    ("version", "gpu", "tp", "chunk", "bs"),
    [
        ("0.3.0", RTX4090, 1, 8192, 160),
        ("0.3.6", RTX4090, 1, 2048, 4),  # below 25000 MiB: chunk // 4, bs 4
        ("0.4.0", RTX4090, 1, 2048, 8),
        ("0.4.3", RTX4090, 4, 2048, 80),  # below 25000 MiB: 8 at tp < 4, else 80
        ("0.4.6", H200, 1, 8192, 256),  # capture list to 256 above 81920 MiB
        ("0.4.6", H100, 1, 8192, 160),
        ("0.4.7", B200, 1, 16384, 512),  # above 180000 MiB
        ("0.4.7", H200, 1, 8192, 256),  # above 96 GiB
        ("0.5.2", A100_40, 1, 8192, 160),
        ("0.5.2", H200, 1, 8192, 256),  # above 90 GiB
        ("0.5.2", B200, 1, 16384, 512),  # above 160000 MiB (chunk: at least 160 GiB)
        ("0.5.2", RTX4090, 1, 2048, 8),
        ("0.5.3", RTX4090, 1, 2048, 16),
        ("0.5.5", RTX4090, 1, 2048, 24),
        ("0.5.18", A100_40, 1, 4096, 32),
        ("0.5.18", H100, 4, 8192, 512),
        ("0.5.23", RTX4090, 4, 4096, 160),
        ("0.5.23", B200, 1, 16384, 512),
    ],
)
def test_gpu_dependent_defaults(version: str, gpu: int, tp: int, chunk: int, bs: int) -> None:
    rel = sv.release(version)
    assert sv.chunked_prefill_default(rel, gpu) == chunk
    assert sv.cuda_graph_max_bs_default(rel, gpu, tp) == bs


# ---- request slots and the req_to_token table ------------------------------------------


def test_request_slots() -> None:
    # sglang PR #11830 (B200, context 128000, 2,261,377 tokens) printed max_running_requests
    # 4096: clamp(2261377 / 128000 * 512 = 9045, 2048, 4096).
    rel = sv.release("0.5.6")
    reqs = sv.max_num_reqs(rel, 2_261_377, 128_000, None)
    assert reqs == 4096
    assert sv.running_requests(2_261_377, None, reqs) == 4096
    # A small pool: the 2048 floor up to 0.5.8, then at most half the tokens.
    assert sv.max_num_reqs(sv.release("0.5.8"), 3000, 131072, None) == 2048
    assert sv.max_num_reqs(sv.release("0.5.10"), 3000, 131072, None) == 1500
    # --max-running-requests 64: taken as is, capped by the estimate, then by tokens // 2.
    assert sv.max_num_reqs(sv.release("0.5.8"), 100, 131072, 64) == 64
    assert sv.max_num_reqs(sv.release("0.5.10"), 100, 131072, 64) == 64
    assert sv.max_num_reqs(sv.release("0.5.23"), 100, 131072, 64) == 50


@pytest.mark.parametrize(("version", "rows"), [("0.4.6", 2049), ("0.5.2", 2048), ("0.5.12", 2049)])
def test_request_table_rows(version: str, rows: int) -> None:
    assert sv.request_table_rows(sv.release(version), 2048) == rows


def test_hybrid_sliding_pool_by_release() -> None:
    # Any model with sliding layers from 0.4.10; from 0.5.8 only listed architectures.
    gemma2 = ("Gemma2ForCausalLM",)
    gpt_oss = ("GptOssForCausalLM",)
    assert not sv.hybrid_swa(sv.release("0.4.9"), gemma2, True)
    assert sv.hybrid_swa(sv.release("0.4.10"), gemma2, True)
    assert sv.hybrid_swa(sv.release("0.5.6"), gemma2, True)
    assert not sv.hybrid_swa(sv.release("0.5.8"), gemma2, True)
    assert sv.hybrid_swa(sv.release("0.5.8"), gpt_oss, True)
    assert not sv.hybrid_swa(sv.release("0.5.23"), gpt_oss, False)
    assert sv.hybrid_swa(sv.release("0.5.15"), ("Gemma4ForConditionalGeneration",), True)
    assert not sv.hybrid_swa(sv.release("0.5.8"), ("Gemma4ForConditionalGeneration",), True)
