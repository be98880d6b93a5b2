"""Accuracy bounds of the fine-tuning estimator against committed tracer data and the
published measurements with stated settings (bench/validate/finetune.py).

The bounds are the issue's: against the reference tracer, median |error| ≤ 5% and none worse
than 10%; against published runs whose setting is stated, median |error| ≤ 10% and no
under-estimate beyond 10%. Rows left out are listed, with the reason, in
``bench.validate.finetune.PUBLISHED_EXCLUSIONS`` (and in docs/accuracy.md)."""

import pytest

from bench.validate import finetune as v


@pytest.fixture(scope="module")
def tracer():
    records = v.tracer_records()
    assert records, "bench/validate/data/train_tracer.jsonl is missing or empty"
    return records, v.tracer_cases()


def test_tracer_grid_covers_the_required_axes(tracer):
    records, _ = tracer
    families = {r["config"]["model_type"] for r in records}
    assert {"llama", "qwen2", "qwen3", "gemma", "gemma2", "mistral"} <= families
    assert families & {"qwen3_moe", "mixtral"}
    flags = [set(r["flags"]) for r in records]
    for flag in ("lora", "gc", "mixed", "fused", "eager"):
        assert any(flag in f for f in flags), flag
        assert any(flag not in f for f in flags), flag
    seqs = {r["seq"] for r in records}
    batches = {r["batch"] for r in records}
    assert min(seqs) <= 512 and max(seqs) >= 8192
    assert min(batches) == 1 and max(batches) >= 4
    # every family is run both full and with LoRA
    for fam in families:
        kinds = {"lora" in set(r["flags"]) for r in records if r["config"]["model_type"] == fam}
        assert kinds == {True, False}, fam


def test_against_reference_tracer(tracer):
    _, cases = tracer
    s = v.summarize(cases)
    worst = max(cases, key=lambda c: abs(c.error))
    assert s.median_abs <= 0.05, s
    assert s.worst_abs <= 0.10, f"{worst.name}: {worst.error:+.1%}"


@pytest.fixture(scope="module")
def published():
    cases = v.published_cases()
    assert cases, "no measured rows read from bench/validate/data/measured"
    return cases


def test_published_median_error(published):
    s = v.summarize(published)
    assert s.median_abs <= 0.10, s


def test_published_no_underestimate_beyond_10_percent(published):
    under = [c for c in published if c.error < -0.10]
    assert not under, "under-estimated by more than 10%: " + ", ".join(
        f"{c.name} {c.error:+.1%}" for c in under
    )


def test_exclusions_are_explained():
    # Every excluded row carries a reason; the recorded ms-swift exclusions are the long
    # max_length values only (the bnb int4 runs are compared).
    assert all(reason for _, reason in v.PUBLISHED_EXCLUSIONS)
    for case, _ in v.excluded_swift_cases():
        seq = int(case.name.split(" s")[-1].split(" ")[0])
        assert seq > 3234 and "bnb" not in case.name, case.name
    compared = [x.name for x in v.compared_swift_values(v._rows())]
    if compared:
        assert sum("bnb int4" in n for n in compared) == 2


_QWEN_LORA = ("qwen-1_8b-chat", "qwen-7b-chat", "qwen-14b-chat")


def test_long_max_length_values_grow_like_allocator_state_not_like_a_step():
    # The reason the max_length 4096/8192 values are left out, checked on the values: from
    # 4096 to 8192 tokens the three Qwen LoRA figures grow by the same amount, although a
    # step's growth differs between those models by at least the layer inputs checkpointing
    # keeps (2 · h · L bytes per token: 0.4, 1.0, 1.6 GiB); full fine-tuning of the 1.8B model
    # grows less than its LoRA run, although a full step keeps at least what a LoRA step keeps.
    rows = v._rows()
    assert rows, "no measured rows read from bench/validate/data/measured"
    growth = v.swift_length_growth(rows)
    lora = [growth[(m, "LoRA")] for m in _QWEN_LORA]
    spread = max(lora) - min(lora)
    kept = [v.checkpointed_input_bytes(m, 8192 - 4096) for m in _QWEN_LORA]
    assert kept == [2 * h * n * 4096 for h, n in ((2048, 24), (4096, 32), (5120, 40))]
    assert spread < 0.05 * 2**30
    assert max(kept) - min(kept) > 20 * spread
    assert growth[("qwen-1_8b-chat", "full")] < growth[("qwen-1_8b-chat", "LoRA")]
    # the reason quotes these figures
    assert f"{lora[0] / 2**30:.1f} GiB" in v.SWIFT_LONG_REASON
    assert f"{growth[('qwen-1_8b-chat', 'full')] / 2**30:.1f} GiB" in v.SWIFT_LONG_REASON


def test_bnb_excess_over_gptq_is_the_inputs_old_bitsandbytes_keeps():
    # At the same model and setting ms-swift's bnb int4 runs report more than its GPTQ int4
    # runs (4-bit weights of the same size within 1%). Per token, hidden unit and layer that
    # excess is what bitsandbytes 0.41's 4-bit matmuls keep through checkpointing in a Qwen
    # layer: the c_attn input, the attention output, the MLP-norm output (h each) and the MLP
    # product (I), 2 bytes each, i.e. 2 · (3h + I) / h.
    rows = v._rows()
    assert rows, "no measured rows read from bench/validate/data/measured"
    excess = v.swift_bnb_excess(rows)
    assert set(excess) == {"qwen-7b-chat", "qwen-72b-chat"}
    for model, (_, per_token_hidden_layer) in excess.items():
        h, i = {"qwen-7b-chat": (4096, 11008), "qwen-72b-chat": (8192, 24576)}[model]
        assert per_token_hidden_layer == pytest.approx(2 * (3 * h + i) / h, rel=0.10), model


def test_every_ms_swift_value_is_accounted_for():
    # Nothing is dropped silently: each value of every ms-swift row (OOM marks aside) is
    # compared or excluded with a reason, and the compared ones include every model the
    # benchmark's model-type table names but chatglm3 (unsupported architecture).
    rows = [r for r in v._rows() if r["source"].startswith("ms-swift")]
    assert rows, "no measured rows read from bench/validate/data/measured"
    n_values = sum(
        1
        for r in rows
        for x in r["measured_value"].replace(" / ", "/").split("/")
        if x.strip() != "OOM"
    )
    values = v.swift_values(rows)
    assert len(values) == n_values
    assert all(x.reason is not None or x.request is not None for x in values)
    compared = {x.name.split(" ")[1] for x in v.compared_swift_values(rows)}
    assert {"yi-6b", "yi-34b", "mistral-7b(openbuddy)"} <= compared
    assert [x.reason for x in values if x.name.split(" ")[1] == "chatglm3-6b"] == [
        v.SWIFT_CHATGLM_REASON
    ]


def test_loss_path_harness_runs_match_the_estimate(tracer):
    # transformers 4.44's and torchtune's chunked loss, run under the reference tracer by the
    # harness variants of bench/validate/train_tracer.py: within 2% each.
    _, cases = tracer
    loss_cases = [c for c in cases if "loss-" in c.name]
    assert {n for c in loss_cases for n in ("loss-legacy", "loss-chunked") if n in c.name} == {
        "loss-legacy",
        "loss-chunked",
    }
    worst = max(loss_cases, key=lambda c: abs(c.error))
    assert abs(worst.error) <= 0.02, f"{worst.name}: {worst.error:+.1%}"


@pytest.fixture(scope="module")
def unsloth():
    rows = v.unsloth_rows()
    assert rows, "bench/validate/data/unsloth_max_context.csv is missing"
    return rows


def test_unsloth_legacy_path_is_closer_on_every_row(unsloth):
    # Held out (nothing fitted to these rows): the legacy loss path the baseline ran is less
    # optimistic than today's default on every row with a measured length.
    for r in unsloth:
        if r.measured is None:
            continue
        legacy, today = r.error("transformers-legacy"), r.error("transformers")
        assert legacy is not None and today is not None
        assert abs(legacy) < abs(today), r


def test_unsloth_legacy_bounds_on_the_large_cards(unsloth):
    # Bounds reached on the 8B rows of 40 GiB and more, where the per-token cost dominates:
    # today's path is 27-34% too optimistic there, the legacy path at most 20%.
    large = [r for r in unsloth if r.measured and r.gib >= 40 and "8B" in r.model]
    assert len(large) == 3
    for r in large:
        legacy, today = r.error("transformers-legacy"), r.error("transformers")
        assert legacy is not None and today is not None
        assert today > 0.25 and 0 < legacy <= 0.20, r


def test_unsloth_per_token_cost_within_ten_percent_with_the_legacy_path(unsloth):
    # The rows lie on a line in card memory; its slope is the baseline's reserved bytes per
    # token. The legacy path's estimate is within 10% of it, today's default is not.
    model = "meta-llama/Llama-3.1-8B-Instruct"
    measured = v.rows_slope(unsloth, model)
    arch = v._catalog_arch(model)
    legacy = v.unsloth_reserved_slope(arch, "transformers-legacy")
    today = v.unsloth_reserved_slope(arch, "transformers")
    assert abs(legacy / measured - 1) <= 0.10
    assert abs(today / measured - 1) > 0.15


def test_unsloth_rows_with_peft_kbit_preparation(unsloth):
    # Held out: the recipe as modelled (transformers < 4.45 loss path, peft's
    # prepare_model_for_kbit_training, autocast) on every row: the out-of-memory rows run out
    # of memory, and every measured length is met within 7%, none over-estimated (an
    # optimistic max context is an OOM for the user) by more than 1%.
    recipe = v.UNSLOTH_RECIPE
    for r in unsloth:
        if r.measured is None:
            assert r.estimated[recipe] is None, r
            continue
        err = r.error(recipe)
        assert err is not None and -0.07 <= err <= 0.01, r


def test_unsloth_line_with_peft_kbit_preparation(unsloth):
    # The 8B rows' line (card memory against context): the prepared recipe's reserved cost
    # per token within 5% of its slope and its zero-context intercept within 0.25 GiB; the
    # unprepared base misses the intercept by more than 2.5 GiB (fp32 embeddings and
    # lm_head, autocast's 16-bit copy of lm_head).
    model = "meta-llama/Llama-3.1-8B-Instruct"
    arch = v._catalog_arch(model)
    slope, intercept = v.rows_slope(unsloth, model), v.rows_intercept(unsloth, model)
    recipe = v.UNSLOTH_RECIPE
    assert abs(v.unsloth_reserved_slope(arch, recipe) / slope - 1) <= 0.05
    assert abs(v.unsloth_reserved_intercept(arch, recipe) - intercept) <= 0.25 * 2**30
    assert intercept - v.unsloth_reserved_intercept(arch, "transformers-legacy") > 2.5 * 2**30


def test_fsdp2_traces_cover_world_sizes_and_checkpointing():
    records = v.fsdp_records()
    assert records, "bench/validate/data/fsdp_tracer.jsonl is missing or empty"
    assert {r["world"] for r in records} >= {2, 4, 8}
    assert {bool(r["flags"]) for r in records} == {True, False}
    assert all(r["command"].startswith("python fsdp_peak.py") for r in records)


def test_fsdp2_per_rank_peaks():
    # The fsdp2 layout (root gathered through forward and backward, one layer's all-gather
    # buffer) against the traced per-rank peaks at every world size: within 0.1% where the
    # peak is at the start of backward. With checkpointing on Qwen2.5-7B the traced peak is
    # in the second layer's backward (26 of 28 layers' sharded gradients, the root's
    # unsharded lm_head gradient, layer 0's prefetched all-gather, layer 2's reduce-scatter
    # input and the recomputed layer at once), the late-backward phase: within 1.5% there
    # (the phase's activations are the generic recompute + working-set terms, not the exact
    # moment inside the layer's backward). The DeepSpeed layout is worse on every run.
    fsdp2, deepspeed = v.fsdp_cases("fsdp2"), v.fsdp_cases("deepspeed")
    assert v.summarize(fsdp2).median_abs <= 0.01
    worst = max(fsdp2, key=lambda c: abs(c.error))
    assert abs(worst.error) <= 0.015, f"{worst.name}: {worst.error:+.1%}"
    for a, b in zip(fsdp2, deepspeed, strict=True):
        assert a.name == b.name and abs(a.error) < abs(b.error)
        if "gc" not in a.name:
            assert abs(a.error) <= 0.001, a.name
