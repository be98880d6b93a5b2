"""The calculator page in a real headless chromium against a live server.

The expected numbers are the API's own answers to requests this test writes by hand from what
it typed into the form (single-estimate endpoints, API defaults for everything it left alone),
so a page that mapped a knob to the wrong field, dropped one, or mis-rendered a byte count fails.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.ui.conftest import OUTPUT

pytestmark = pytest.mark.slow

GB = 10**9
GIB = 2**30

# The model, GPU and knobs the test types in; each falls back to the catalog's first entry.
MODEL = "Qwen/Qwen2.5-7B-Instruct"
GPU = "l4"
BATCH, SEQUENCE = 2, 4096

# The table rows the page promises (the PAI guide's): data-row key -> (endpoint, fields).
TABLE = {
    "inf-16": ("inference", {"weight_format": "bf16", "engine": "vllm"}),
    "inf-8": ("inference", {"weight_format": "int8", "engine": "vllm"}),
    "inf-4": ("inference", {"weight_format": "int4", "engine": "vllm"}),
    "ft-full": ("finetune", {"method": "full"}),
    "ft-lora": ("finetune", {"method": "lora"}),
    "ft-qlora8": ("finetune", {"method": "qlora", "weight_format": "int8"}),
    "ft-qlora4": ("finetune", {"method": "qlora", "weight_format": "nf4"}),
}


def gb(b: int) -> str:
    return f"{b / GB:.2f} GB"


def gib(b: int) -> str:
    return f"{b / GIB:.2f} GiB"


def wait_for(driver: Any, condition: str, timeout: float = 20) -> Any:
    """Poll a JavaScript expression until it is truthy; return its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(f"return {condition};")
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {condition}")


def choose(driver: Any, select_id: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.ID, select_id)).select_by_value(value)


def type_into(driver: Any, input_id: str, text: str) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    field = driver.find_element(By.ID, input_id)
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(text)
    return field


def post(base: str, kind: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base}/v1/estimate/{kind}", json=body, timeout=30)


@pytest.fixture(scope="module")
def choices(live_server: str) -> tuple[str, str]:
    models = [m["id"] for m in httpx.get(f"{live_server}/v1/models").json()["models"]]
    gpus = [g["id"] for g in httpx.get(f"{live_server}/v1/gpus").json()["gpus"]]
    return (MODEL if MODEL in models else models[0]), (GPU if GPU in gpus else gpus[0])


@pytest.fixture(scope="module")
def filled_page(live_server: str, browser: Any, choices: tuple[str, str]) -> Any:
    """The page after a person picked a model, 8-bit weights, vLLM, batch, length and a GPU."""
    from selenium.webdriver.common.keys import Keys

    model, gpu = choices
    browser.set_window_size(1280, 900)
    browser.get(f"{live_server}/")
    wait_for(browser, "document.body.dataset.ready === 'true'")
    run = int(wait_for(browser, "document.querySelector('#results').dataset.run"))
    choose(browser, "model", model)
    choose(browser, "weight_format", "int8")
    choose(browser, "engine", "vllm")
    choose(browser, "gpu", gpu)
    type_into(browser, "batch_size", str(BATCH))
    # Enter in a text field submits the form: the keyboard path a person would take.
    type_into(browser, "sequence_length", str(SEQUENCE)).send_keys(Keys.ENTER)
    wait_for(browser, f"Number(document.querySelector('#results').dataset.run) > {run}")
    return browser


def test_breakdown_and_fit_equal_the_api(
    filled_page: Any, live_server: str, choices: tuple[str, str]
) -> None:
    model, gpu = choices
    request = {
        "model": model,
        "weight_format": "int8",
        "engine": "vllm",
        "batch_size": BATCH,
        "sequence_length": SEQUENCE,
        "gpu": gpu,
    }
    response = post(live_server, "inference", request)
    assert response.status_code == 200, response.text
    expected = response.json()
    rows = filled_page.execute_script("""
        return [...document.querySelectorAll('#breakdown tr[data-component]')].map(tr => ({
            component: tr.dataset.component,
            cells: [...tr.querySelectorAll('td')].map(td => td.textContent),
            bytes: tr.querySelector('td').dataset.bytes}));""")
    shown = {r["component"]: r for r in rows}
    per_gpu = expected["per_gpu"]
    assert set(shown) == {*per_gpu["breakdown"], "total"}
    for component, b in [*per_gpu["breakdown"].items(), ("total", per_gpu["total_bytes"])]:
        assert int(shown[component]["bytes"]) == b, component
        assert shown[component]["cells"] == [f"{b:,}", gb(b), gib(b)], component

    fit = expected["fit"]
    sentence = filled_page.execute_script(
        "return document.querySelector('#fit-sentence').textContent"
    )
    assert ("Fits" if fit["fits"] else "Does not fit") in sentence
    assert gb(fit["required_bytes"]) in sentence and gb(fit["usable_bytes"]) in sentence
    assert (
        gb(abs(fit["headroom_bytes"])) in sentence and gib(abs(fit["headroom_bytes"])) in sentence
    )
    status = filled_page.execute_script("return document.querySelector('#status').textContent")
    assert expected["summary"] in status


def test_table_rows_equal_the_api(
    filled_page: Any, live_server: str, choices: tuple[str, str]
) -> None:
    model, gpu = choices
    shown = filled_page.execute_script("""
        return Object.fromEntries([...document.querySelectorAll('#table tbody tr')].map(tr =>
            [tr.dataset.row, {status: Number(tr.dataset.status),
             cells: [...tr.querySelectorAll('td')].map(td => td.textContent),
             bytes: tr.querySelector('td[data-bytes]')?.dataset.bytes}]));""")
    assert set(shown) == set(TABLE)
    for key, (kind, fields) in TABLE.items():
        body = {
            "model": model,
            "batch_size": BATCH,
            "sequence_length": SEQUENCE,
            "gpu": gpu,
            **fields,
        }
        response = post(live_server, kind, body)
        row = shown[key]
        assert row["status"] == response.status_code, key
        if response.status_code != 200:
            assert row["cells"][0].startswith("No estimate"), key
            continue
        total = response.json()["per_gpu"]["total_bytes"]
        assert int(row["bytes"]) == total, key
        assert row["cells"][:2] == [gb(total), gib(total)], key
        fit = response.json()["fit"]
        assert row["cells"][2].startswith("✓" if fit["fits"] else "✗"), key
        if fit["fits"] or fit["headroom_bytes"] < 0:
            assert gb(abs(fit["headroom_bytes"])) in row["cells"][2], key
        else:  # the engine refuses for another reason: named, never a negative shortfall
            assert fit["reason"].replace("_", " ") in row["cells"][2], key


def test_chart_has_one_segment_per_component(
    filled_page: Any, live_server: str, choices: tuple[str, str]
) -> None:
    model, gpu = choices
    bars = filled_page.execute_script("""
        return [...document.querySelectorAll('#chart svg g.bar')].map(g => ({key: g.dataset.key,
            segments: [...g.querySelectorAll('rect.seg')].map(r =>
                [r.dataset.component, Number(r.dataset.bytes), Number(r.getAttribute('width'))])
        }));""")
    assert bars[0]["key"] == "request"
    expected = {"request": ("inference", {"weight_format": "int8", "engine": "vllm"}), **TABLE}
    answered = 0
    for bar in bars:
        kind, fields = expected[bar["key"]]
        body = {
            "model": model,
            "batch_size": BATCH,
            "sequence_length": SEQUENCE,
            "gpu": gpu,
            **fields,
        }
        breakdown = post(live_server, kind, body).json()["per_gpu"]["breakdown"]
        assert len(bar["segments"]) == len(breakdown), bar["key"]
        assert {c: b for c, b, _ in bar["segments"]} == breakdown, bar["key"]
        widths = {c: w for c, _, w in bar["segments"]}
        biggest = max(breakdown, key=breakdown.__getitem__)
        assert widths[biggest] == max(widths.values()) > 0, bar["key"]
        answered += 1
    assert answered >= 2
    legend = filled_page.execute_script("return document.querySelectorAll('#legend li').length")
    assert legend >= len({c for bar in bars for c, _, _ in bar["segments"]})


def test_curl_command_reproduces_the_request(filled_page: Any, live_server: str) -> None:
    text = filled_page.execute_script("return document.querySelector('#curl').textContent")
    words = shlex.split(text.replace("\\\n", " "))
    assert words[:4] == ["curl", "-sS", "-X", "POST"]
    url, body = words[4], json.loads(words[words.index("-d") + 1])
    assert url == f"{live_server}/v1/estimate/inference"
    response = httpx.post(url, json=body, timeout=30)
    assert response.status_code == 200
    shown = filled_page.execute_script(
        "return document.querySelector('#breakdown tfoot td').dataset.bytes"
    )
    assert int(shown) == response.json()["per_gpu"]["total_bytes"]


def test_every_control_has_a_label_and_results_are_announced(filled_page: Any) -> None:
    unlabelled = filled_page.execute_script("""
        return [...document.querySelectorAll('input, select, textarea')]
            .filter(e => e.labels.length === 0 && !e.getAttribute('aria-label'))
            .map(e => e.id || e.name);""")
    assert unlabelled == []
    live = filled_page.execute_script(
        "return document.querySelector('#status').getAttribute('aria-live')"
    )
    assert live == "polite"


def test_screenshot_and_phone_width(filled_page: Any) -> None:
    driver = filled_page
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(height + 40, 4000))
    wait_for(driver, "document.querySelector('#chart svg')")
    driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0);")
    OUTPUT.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(OUTPUT / "calculator.png"))
    # `make ui-screenshot` refreshes the README's picture through this variable.
    target = os.environ.get("LLMMEM_UI_SCREENSHOT")
    if target:
        assert driver.save_screenshot(str(REPO / Path(target)))

    driver.set_window_size(390, 844)
    wait_for(driver, "document.querySelector('#chart svg').getAttribute('width') <= 390")
    overflow = driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0
    assert driver.save_screenshot(str(OUTPUT / "calculator-phone.png"))
    driver.set_window_size(1280, 900)


def off_origin_requests(driver: Any, base: str) -> list[str]:
    """URLs the page asked for outside `base` that the browser did not block by policy."""
    events = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
    sent = {
        e["params"]["requestId"]: e["params"]["request"]["url"]
        for e in events
        if e["method"] == "Network.requestWillBeSent"
    }
    blocked = {
        e["params"]["requestId"]
        for e in events
        if e["method"] == "Network.loadingFailed" and e["params"].get("blockedReason") == "csp"
    }
    local = re.compile(rf"^({re.escape(base)}/|data:|blob:)")
    return [url for rid, url in sent.items() if not local.match(url) and rid not in blocked]


def test_docs_pages_render_from_local_assets(live_server: str, browser: Any) -> None:
    for path, rendered in (
        ("/docs", "document.querySelector('.swagger-ui .info .title')"),
        ("/redoc", "document.querySelector('.api-content h1')"),
    ):
        browser.get_log("performance")  # drop what earlier pages logged
        browser.get(f"{live_server}{path}")
        wait_for(browser, rendered, timeout=30)
        time.sleep(0.3)  # let late requests (images, the search worker) start
        assert off_origin_requests(browser, live_server) == [], path
    # The calculator page itself makes no outside request either.
    browser.get_log("performance")
    browser.get(f"{live_server}/")
    wait_for(browser, "document.querySelector('#results').dataset.run")
    assert off_origin_requests(browser, live_server) == []


# The page: Llama-3.1-70B under vLLM at TP 2 on H100 with 32768-token sequences. vLLM's
# default max_model_len is the model's whole context (131072), whose one sequence the pool
# left on two H100s cannot hold: the engine refuses to start although the requested workload
# leaves memory free. The page must say so from the answer, and take a max-model-len.
SEVENTY_B = "meta-llama/Llama-3.1-70B-Instruct"
H100 = "h100-sxm-80gb"
SEVENTY_B_REQUEST = {
    "model": SEVENTY_B,
    "engine": "vllm",
    "batch_size": 1,
    "sequence_length": 32768,
    "tensor_parallel_size": 2,
    "gpu": H100,
}


def submit_seventy_b(browser: Any, base: str, context: str) -> None:
    from selenium.webdriver.common.keys import Keys

    browser.set_window_size(1280, 900)
    browser.get(f"{base}/")
    wait_for(browser, "document.body.dataset.ready === 'true'")
    run = int(wait_for(browser, "document.querySelector('#results').dataset.run"))
    choose(browser, "model", SEVENTY_B)
    choose(browser, "weight_format", "")
    choose(browser, "engine", "vllm")
    choose(browser, "gpu", H100)
    type_into(browser, "batch_size", "1")
    type_into(browser, "tensor_parallel_size", "2")
    type_into(browser, "context_length", context)
    type_into(browser, "sequence_length", "32768").send_keys(Keys.ENTER)
    wait_for(browser, f"Number(document.querySelector('#results').dataset.run) > {run}")


def shown_answer(browser: Any) -> dict[str, Any]:
    return browser.execute_script("""
        const text = (sel) => document.querySelector(sel)?.textContent ?? null;
        return {sentence: text('#fit-sentence'), status: text('#status'),
            args: text('#engine-args'), layout: text('#min-layout'),
            label: text('#context-label'),
            options: Object.fromEntries([...document.querySelectorAll('#engine-options tbody tr')]
                .map(tr => [tr.dataset.option, [tr.querySelector('td').textContent,
                                                tr.dataset.default === 'true']]))};""")


def test_a_refusal_is_the_answers_reason_never_a_negative_shortfall(
    live_server: str, browser: Any
) -> None:
    submit_seventy_b(browser, live_server, "")
    shown = shown_answer(browser)
    expected = post(live_server, "inference", SEVENTY_B_REQUEST).json()
    fit = expected["fit"]
    assert not fit["fits"] and fit["headroom_bytes"] > 0  # the situation
    sentence = shown["sentence"]
    assert sentence.startswith("Does not fit")
    assert fit["reason"].replace("_", " ") in sentence and fit["reason_detail"] in sentence
    assert "short by" not in sentence and not re.search(r"-\d", sentence)
    assert expected["summary"] in shown["status"]
    # The flags and the minimum layout are the answer's.
    assert shown["args"] == " ".join(fit["engine_args"])
    assert fit["min_gpu_layout_reason"] in shown["layout"]
    # The engine's defaults it was judged with, max_model_len among them.
    assert shown["options"]["max_model_len"] == [
        str(expected["engine_options"]["max_model_len"]),
        True,
    ]
    assert "--max-model-len" in shown["label"]


def test_a_max_model_len_typed_in_is_the_one_judged(live_server: str, browser: Any) -> None:
    submit_seventy_b(browser, live_server, "32768")
    shown = shown_answer(browser)
    body = {**SEVENTY_B_REQUEST, "engine_options": {"max_model_len": 32768}}
    expected = post(live_server, "inference", body).json()
    assert expected["fit"]["fits"]
    assert shown["sentence"].startswith("Fits")
    assert expected["summary"] in shown["status"]
    assert shown["options"]["max_model_len"] == ["32768", False]


def test_latency_and_throughput_equal_the_api(
    live_server: str, browser: Any, choices: tuple[str, str]
) -> None:
    from selenium.webdriver.common.keys import Keys

    model, gpu = choices
    browser.get(f"{live_server}/")
    wait_for(browser, "document.body.dataset.ready === 'true'")
    run = int(wait_for(browser, "document.querySelector('#results').dataset.run"))
    choose(browser, "model", model)
    choose(browser, "engine", "vllm")
    choose(browser, "gpu", gpu)
    type_into(browser, "concurrency", "8")
    type_into(browser, "traffic_input_tokens", "512")
    type_into(browser, "traffic_output_tokens", "128").send_keys(Keys.ENTER)
    wait_for(browser, f"Number(document.querySelector('#results').dataset.run) > {run}")
    request = {
        "model": model,
        "engine": "vllm",
        "concurrency": 8,
        "gpu": gpu,
        "traffic": {"input_tokens": 512, "output_tokens": 128, "concurrency": 8},
    }
    response = post(live_server, "inference", request)
    assert response.status_code == 200, response.text
    perf = response.json()["performance"]
    sentence = browser.execute_script(
        "return document.querySelector('#performance-sentence').textContent"
    )
    assert _as_page_ms(perf["ttft_ms"]) in sentence
    assert _as_page_ms(perf["itl_ms"]) in sentence
    assert f"{perf['output_tokens_per_s']:,g} output tokens/s" in sentence


def _as_page_ms(x: float) -> str:
    """A figure as the page writes it (toLocaleString, at most one decimal): the wire's
    decimal form rounded half away from zero (80.05 -> 80.1), not its binary value (80.0)."""
    tenths = Decimal(repr(x)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    return f"{tenths:,}".rstrip("0").rstrip(".") + " ms"
