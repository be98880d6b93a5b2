// The GPU-memory calculator page. Plain JavaScript, no build step, no dependencies.
//
// Every number on the page comes from this service's public API: the catalogs from
// GET /v1/models and /v1/gpus, the closed sets of the form from /openapi.json, and the
// estimates from one POST /v1/estimate/batch call per press of "Estimate" (item 0 is the
// request the form describes; items 1-7 are the PAI guide's table rows with the same knobs).
// Units: the API gives integer bytes; GB = 10^9 bytes, GiB = 2^30 bytes.
"use strict";

const GB = 1e9;
const GIB = 2 ** 30;
const $ = (sel) => document.querySelector(sel);
const SVG_NS = "http://www.w3.org/2000/svg";

// The PAI guide's table: inference at 16, 8 and 4 bits; full, LoRA and QLoRA fine-tuning.
const TABLE_ROWS = [
  { key: "inf-16", label: "Inference, 16-bit (bf16)", kind: "inference", set: { weight_format: "bf16" } },
  { key: "inf-8", label: "Inference, 8-bit (int8)", kind: "inference", set: { weight_format: "int8" } },
  { key: "inf-4", label: "Inference, 4-bit (int4)", kind: "inference", set: { weight_format: "int4" } },
  { key: "ft-full", label: "Fine-tuning, full", kind: "finetune", set: { method: "full" } },
  { key: "ft-lora", label: "Fine-tuning, LoRA", kind: "finetune", set: { method: "lora" } },
  { key: "ft-qlora8", label: "Fine-tuning, QLoRA 8-bit", kind: "finetune",
    set: { method: "qlora", weight_format: "int8" } },
  { key: "ft-qlora4", label: "Fine-tuning, QLoRA 4-bit (nf4)", kind: "finetune",
    set: { method: "qlora", weight_format: "nf4" } },
];

// Components in drawing order, with colours from the Okabe-Ito colour-blind-safe palette.
const COMPONENTS = {
  weights: ["Weights", "#0072B2"],
  kv_cache: ["KV cache", "#E69F00"],
  gradients: ["Gradients", "#CC79A7"],
  optimizer_states: ["Optimizer states", "#D55E00"],
  activations: ["Activations", "#009E73"],
  overhead: ["Overhead", "#8C8C8C"],
};
const EXTRA_COLOURS = ["#56B4E9", "#F0E442", "#000000"];

// The option each engine takes as the longest sequence it is started for (the engines'
// `context_option`, service/estimator/engines/; tests/ui/test_routes.py keeps them equal) and
// the flag a person types for it. Engines without one take no context field.
const CONTEXT_OPTION = {
  vllm: ["max_model_len", "--max-model-len"],
  sglang: ["context_length", "--context-length"],
  "llama.cpp": ["n_ctx", "--ctx-size"],
};

const state = { gpus: [], models: [], schemas: {}, run: 0 };

// ---------------------------------------------------------------------------------------
// Formatting

function fmtGB(bytes) { return (bytes / GB).toFixed(2) + " GB"; }
function fmtGiB(bytes) { return (bytes / GIB).toFixed(2) + " GiB"; }
function fmtBytes(bytes) { return bytes.toLocaleString("en-US"); }
function fmtCount(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(2) + " B";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + " M";
  return String(n);
}
function componentName(key) {
  return COMPONENTS[key] ? COMPONENTS[key][0] : key.replace(/_/g, " ");
}
function componentOrder(keys) {
  const known = Object.keys(COMPONENTS).filter((k) => keys.includes(k));
  return known.concat(keys.filter((k) => !COMPONENTS[k]).sort());
}
function componentColour(key, extras) {
  if (COMPONENTS[key]) return COMPONENTS[key][1];
  if (!extras.includes(key)) extras.push(key);
  return EXTRA_COLOURS[extras.indexOf(key) % EXTRA_COLOURS.length];
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

// ---------------------------------------------------------------------------------------
// Loading the catalogs and the closed sets

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${url} answered ${response.status}`);
  return response.json();
}

function enumOf(schemaName, prop) {
  const schema = state.schemas[schemaName] || {};
  const spec = (schema.properties || {})[prop] || {};
  const options = [spec, ...(spec.anyOf || []), ...(spec.oneOf || [])];
  const found = options.find((o) => Array.isArray(o.enum));
  return { values: found ? found.enum : [], default: spec.default };
}

function fillEnumSelects() {
  for (const select of document.querySelectorAll("select[data-enum]")) {
    const schema = select.closest("[data-kind=finetune]") ? "FinetuneRequestBody"
      : "InferenceRequestBody";
    const { values, default: def } = enumOf(schema, select.dataset.enum);
    if (!values.length) throw new Error(`/openapi.json lists no choices for ${select.dataset.enum}`);
    select.replaceChildren();
    if (select.dataset.default) select.append(el("option", { value: "", text: select.dataset.default }));
    for (const value of values) {
      const option = el("option", { value, text: value });
      if (value === def) option.selected = true;
      select.append(option);
    }
  }
}

function fillModels(models) {
  const select = $("#model");
  select.replaceChildren();
  const groups = new Map();
  for (const m of models) {
    const type = m.model_type || "other";
    if (!groups.has(type)) groups.set(type, el("optgroup", { label: type }));
    const label = `${m.id} · ${fmtCount(m.parameter_count)} · ${m.dtype}`;
    groups.get(type).append(el("option", { value: m.id, text: label }));
  }
  for (const type of [...groups.keys()].sort()) select.append(groups.get(type));
  const preferred = models.find((m) => m.id === "Qwen/Qwen2.5-7B-Instruct");
  if (preferred) select.value = preferred.id;
}

function fillGpus(gpus) {
  const select = $("#gpu");
  select.replaceChildren(el("option", { value: "", text: "None (no fit check)" }));
  const groups = new Map();
  for (const g of gpus) {
    if (!groups.has(g.vendor)) groups.set(g.vendor, el("optgroup", { label: g.vendor.toUpperCase() }));
    const label = `${g.name} (${fmtGiB(g.memory_bytes)} total)`;
    groups.get(g.vendor).append(el("option", { value: g.id, text: label }));
  }
  for (const group of groups.values()) select.append(group);
  if (gpus.some((g) => g.id === "h100-sxm-80gb")) select.value = "h100-sxm-80gb";
}

// ---------------------------------------------------------------------------------------
// The form -> API requests

function parseCount(text) {
  const match = /^\s*([0-9][0-9_,]*(?:\.[0-9]+)?(?:e[0-9]+)?)\s*([kmbt]?)\s*$/i.exec(text || "");
  if (!match) return null;
  const scale = { "": 1, k: 1e3, m: 1e6, b: 1e9, t: 1e12 }[match[2].toLowerCase()];
  return Math.round(Number(match[1].replace(/[_,]/g, "")) * scale);
}

function intField(id) { return Number.parseInt($(id).value, 10); }

function modelSelector() {
  const source = document.querySelector("input[name=source]:checked").value;
  const body = {};
  if (source === "catalog") {
    body.model = $("#model").value;
  } else if (source === "count") {
    body.parameter_count = parseCount($("#parameter_count").value);
    if (body.parameter_count === null) throw new Error("Parameters: enter a number such as 7B or 7e9.");
    if ($("#active_parameter_count").value.trim()) {
      body.active_parameter_count = parseCount($("#active_parameter_count").value);
      if (body.active_parameter_count === null) throw new Error("Active parameters: enter a number such as 3B.");
    }
  } else {
    try {
      body.hf_config = JSON.parse($("#hf_config").value);
    } catch (err) {
      throw new Error(`config.json is not valid JSON: ${err.message}`);
    }
  }
  body.estimator = $("#estimator").value;
  return body;
}

function inferenceBody(base, overrides) {
  const body = { ...base };
  const weights = $("#weight_format").value;
  if (weights) body.weight_format = weights;
  Object.assign(body, {
    kv_cache_dtype: $("#kv_cache_dtype").value,
    engine: $("#engine").value,
    batch_size: intField("#batch_size"),
    sequence_length: intField("#sequence_length"),
    concurrency: intField("#concurrency"),
    tensor_parallel_size: intField("#tensor_parallel_size"),
  }, overrides || {});
  const context = CONTEXT_OPTION[body.engine];
  if (context && $("#context_length").value.trim()) {
    body.engine_options = { [context[0]]: intField("#context_length") };
  }
  if ($("#gpu").value) body.gpu = $("#gpu").value;
  return body;
}

// The latency question of the user's request: both token counts and a GPU (null: not asked).
function trafficOf() {
  const input = intField("#traffic_input_tokens"), output = intField("#traffic_output_tokens");
  if (!(input > 0 && output > 0) || !$("#gpu").value) return null;
  return { input_tokens: input, output_tokens: output, concurrency: intField("#concurrency") };
}

function finetuneBody(base, overrides) {
  const body = { ...base, method: $("#method").value };
  const weights = $("#ft_weight_format").value;
  if (weights) body.weight_format = weights;
  Object.assign(body, {
    precision: $("#precision").value,
    optimizer: $("#optimizer").value,
    gradient_checkpointing: $("#gradient_checkpointing").value,
    batch_size: intField("#batch_size"),
    sequence_length: intField("#sequence_length"),
    gpu_count: intField("#ft_gpu_count"),
    zero_stage: intField("#zero_stage"),
  }, overrides || {});
  if (body.method === "lora" || body.method === "qlora") body.lora = { rank: intField("#lora_rank") };
  if ($("#gpu").value) body.gpu = $("#gpu").value;
  return body;
}

function buildItems() {
  const base = modelSelector();
  const kind = document.querySelector("input[name=kind]:checked").value;
  const build = (k, overrides) => (k === "inference" ? inferenceBody : finetuneBody)(base, overrides);
  // Table rows reset the precision or method the row is about; the user's choice is item 0.
  const rowOverrides = (row) => (row.kind === "finetune" && !row.set.weight_format
    ? { ...row.set, weight_format: undefined } : row.set);
  const items = [{ kind, request: build(kind) }];
  const traffic = kind === "inference" ? trafficOf() : null;
  if (traffic) items[0].request.traffic = traffic;
  for (const row of TABLE_ROWS) {
    const request = build(row.kind, rowOverrides(row));
    if (request.weight_format === undefined) delete request.weight_format;
    items.push({ kind: row.kind, request });
  }
  return items;
}

function shellQuote(text) { return "'" + text.replace(/'/g, "'\\''") + "'"; }

function curlFor(path, body) {
  return `curl -sS -X POST ${location.origin}${path} \\\n  -H 'Content-Type: application/json' \\\n` +
    `  -d ${shellQuote(JSON.stringify(body))}`;
}

// ---------------------------------------------------------------------------------------
// Rendering

function gpuName(id) {
  const gpu = state.gpus.find((g) => g.id === id);
  return gpu ? gpu.name : id;
}

function problemText(problem) {
  if (!problem) return "no answer";
  const fields = (problem.errors || []).map((e) => `${e.field.replace(/^items\.\d+\.request\./, "")}: ${e.message}`);
  return [problem.detail || problem.title].concat(fields).join("; ");
}

function renderBreakdown(estimate) {
  const per = estimate.per_gpu;
  const body = $("#breakdown tbody");
  body.replaceChildren();
  for (const key of componentOrder(Object.keys(per.breakdown))) {
    const bytes = per.breakdown[key];
    body.append(el("tr", { "data-component": key },
      el("th", { scope: "row", text: componentName(key) }),
      el("td", { class: "num", "data-bytes": bytes, text: fmtBytes(bytes) }),
      el("td", { class: "num", text: fmtGB(bytes) }),
      el("td", { class: "num", text: fmtGiB(bytes) })));
  }
  const total = per.total_bytes;
  const gpus = per.gpu_count > 1 ? ` (per GPU, ${per.gpu_count} GPUs: ${fmtGB(estimate.total_bytes)} in all)` : "";
  $("#breakdown tfoot").replaceChildren(el("tr", { "data-component": "total" },
    el("th", { scope: "row", text: "Total" + gpus }),
    el("td", { class: "num", "data-bytes": total, text: fmtBytes(total) }),
    el("td", { class: "num", text: fmtGB(total) }),
    el("td", { class: "num", text: fmtGiB(total) })));
}

function layoutText(layout) {
  const parts = [`TP ${layout.tensor_parallel_size}`];
  if (layout.pipeline_parallel_size > 1) parts.push(`PP ${layout.pipeline_parallel_size}`);
  return parts.join(" × ");
}

// The verdict is the answer's own: `fit.fits` and `fit.reason` with its figures. A shortfall is
// named only when the workload itself exceeds the memory (negative headroom); an engine that
// refuses to start for another reason is said to, with the reason, never a negative shortfall.
function fitSentence(fit) {
  const where = `${fit.gpu_count} × ${gpuName(fit.gpu)}`;
  const need = `needs ${fmtGB(fit.required_bytes)} of ${fmtGB(fit.usable_bytes)} usable per GPU`;
  if (fit.fits) {
    return `Fits on ${where}: ${need}; headroom ${fmtGB(fit.headroom_bytes)} ` +
      `(${fmtGiB(fit.headroom_bytes)}).`;
  }
  const why = `${fit.reason.replace(/_/g, " ")}` + (fit.reason_detail ? `: ${fit.reason_detail}` : "");
  const amount = `${fmtGB(Math.abs(fit.headroom_bytes))} (${fmtGiB(Math.abs(fit.headroom_bytes))})`;
  const size = fit.headroom_bytes < 0
    ? `The request ${need}, short by ${amount}.`
    : `The requested batch and sequences alone would leave ${amount} free per GPU.`;
  const fewest = fit.min_gpu_count
    ? `Fewest GPUs that fit: ${fit.min_gpu_count} (${layoutText(fit.min_gpu_layout)}).`
    : "No GPU count fits.";
  return `Does not fit on ${where} (${why}). ${size} ${fewest}`;
}

function renderFit(estimate) {
  const box = $("#fit");
  box.replaceChildren();
  box.className = "fit";
  const fit = estimate.fit;
  if (!fit) {
    box.append(el("p", { text: "No GPU chosen: pick one to see the fit and headroom." }));
    return;
  }
  box.className = fit.fits ? "fit fits" : "fit no-fit";
  box.dataset.headroomBytes = fit.headroom_bytes;
  box.append(el("p", { id: "fit-sentence", text: fitSentence(fit) }));
  const limits = [];
  if (fit.max_batch_size) limits.push(`largest batch that fits: ${fit.max_batch_size.toLocaleString("en-US")}`);
  if (fit.max_sequence_length) limits.push(`longest sequence that fits: ${fit.max_sequence_length.toLocaleString("en-US")} tokens`);
  const text = limits.join("; ");
  if (text) box.append(el("p", { text: text[0].toUpperCase() + text.slice(1) + "." }));
  if (fit.min_gpu_layout_reason) {
    box.append(el("p", { id: "min-layout", text: `Fewest GPUs: ${fit.min_gpu_layout_reason}.` }));
  }
  if (fit.engine_args) {
    box.append(el("p", { text: fit.fits ? "Engine flags of this setup:" : "Engine flags that fit:" }),
      el("pre", { id: "engine-args", tabindex: "0", text: fit.engine_args.join(" ") }));
  }
  const cap = estimate.capacity;
  if (cap) {
    box.append(el("p", { text: `Engine KV-cache pool: ${fmtGB(cap.kv_cache_pool_bytes)}, ` +
      `${cap.kv_cache_tokens.toLocaleString("en-US")} tokens, ` +
      `${cap.max_concurrency.toFixed(2)} sequences of ${cap.sequence_length.toLocaleString("en-US")} tokens at once.` }));
  }
}

// The engine's options as the answer resolved them (the caller's and the engine's defaults),
// and the request fields the engine does not use, with the option that decides instead.
function renderEngine(estimate) {
  const box = $("#engine-box");
  const options = estimate.engine_options;
  const unused = estimate.unused_fields || [];
  box.hidden = !options && !unused.length;
  const list = $("#unused");
  list.replaceChildren(...unused.filter((u) => u.given || u.decided_by.length).map((u) => {
    const values = Object.entries(u.engine_values).map(([k, v]) => `${k} = ${v}`).join(", ");
    const decided = u.decided_by.length ? `decided by ${u.decided_by.join(", ")} (${values})`
      : "decided by the engine";
    return el("li", { "data-field": u.field, text: `${u.field} is not used: ${decided}; ${u.reason}.` });
  }));
  const body = $("#engine-options tbody");
  body.replaceChildren();
  const defaults = new Set(estimate.engine_defaults || []);
  for (const [name, value] of Object.entries(options || {})) {
    body.append(el("tr", { "data-option": name, "data-default": String(defaults.has(name)) },
      el("th", { scope: "row", text: name }),
      el("td", { text: value === null ? "—" : String(value) }),
      el("td", { text: defaults.has(name) ? "engine default" : "your request" })));
  }
}

function renderTable(results) {
  const body = $("#table tbody");
  body.replaceChildren();
  $("#fit-col").textContent = $("#gpu").value ? `Fit on ${gpuName($("#gpu").value)}` : "Fit";
  TABLE_ROWS.forEach((row, i) => {
    const result = results[i + 1];
    const tr = el("tr", { "data-row": row.key, "data-status": result.status },
      el("th", { scope: "row", text: row.label }));
    if (result.status !== 200) {
      tr.append(el("td", { colspan: "3", class: "problem", text: `No estimate: ${problemText(result.problem)}` }));
    } else {
      const est = result.estimate;
      const total = est.per_gpu.total_bytes;
      tr.append(el("td", { class: "num", "data-bytes": total, text: fmtGB(total) }),
        el("td", { class: "num", text: fmtGiB(total) }));
      const fit = est.fit;
      tr.append(el("td", { class: fit ? (fit.fits ? "fits" : "no-fit") : "" },
        !fit ? "—" : fit.fits ? `✓ fits, ${fmtGB(fit.headroom_bytes)} free`
          : (fit.headroom_bytes < 0 ? `✗ short ${fmtGB(-fit.headroom_bytes)}`
            : `✗ ${fit.reason.replace(/_/g, " ")}`) +
            (fit.min_gpu_count ? `, fits on ${fit.min_gpu_count} GPUs` : "")));
    }
    body.append(tr);
  });
}

function renderChart(bars, usable) {
  const box = $("#chart");
  const width = Math.max(280, box.clientWidth || 640);
  const left = 8, right = 12, barH = 22, labelH = 18, gap = 12, axisH = 26;
  const height = bars.length * (labelH + barH + gap) + axisH + 8;
  const peak = Math.max(usable || 0, ...bars.map((b) => b.estimate.per_gpu.total_bytes)) * 1.05 || 1;
  const scale = (bytes) => (bytes / peak) * (width - left - right);
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-labelledby": "chart-title", "aria-describedby": "legend", id: "chart-svg" });
  // Axis ticks in GB at a round step.
  const raw = peak / GB / 5;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= raw) * GB;
  const axisY = bars.length * (labelH + barH + gap);
  for (let t = 0; t <= peak; t += step) {
    const x = left + scale(t);
    chart.append(svg("line", { x1: x, x2: x, y1: 0, y2: axisY, class: "grid" }));
    chart.append(svg("text", { x, y: axisY + 16, class: "tick", "text-anchor": "middle" },
      `${+(t / GB).toFixed(2)}`));
  }
  chart.append(svg("text", { x: width - right, y: axisY + 16, class: "tick", "text-anchor": "end" }, "GB"));
  if (usable) {
    const x = left + scale(usable);
    chart.append(svg("line", { x1: x, x2: x, y1: 0, y2: axisY, class: "usable", "data-bytes": usable }));
  }
  const extras = [];
  bars.forEach((bar, i) => {
    const y = i * (labelH + barH + gap);
    const per = bar.estimate.per_gpu;
    const group = svg("g", { class: "bar", "data-key": bar.key });
    group.append(svg("text", { x: left, y: y + 13, class: "label" },
      `${bar.label}: ${fmtGB(per.total_bytes)} (${fmtGiB(per.total_bytes)})`));
    let x = left;
    for (const key of componentOrder(Object.keys(per.breakdown))) {
      const bytes = per.breakdown[key];
      const w = scale(bytes);
      const rect = svg("rect", { x, y: y + labelH, width: w, height: barH, class: "seg",
        fill: componentColour(key, extras), "data-component": key, "data-bytes": bytes });
      rect.append(svg("title", {}, `${componentName(key)}: ${fmtGB(bytes)} (${fmtGiB(bytes)})`));
      group.append(rect);
      x += w;
    }
    chart.append(group);
  });
  box.replaceChildren(chart);
  const legend = $("#legend");
  legend.replaceChildren();
  const keys = componentOrder([...new Set(bars.flatMap((b) => Object.keys(b.estimate.per_gpu.breakdown)))]);
  for (const key of keys) {
    const swatch = el("span", { class: "swatch", "aria-hidden": "true" });
    swatch.style.background = componentColour(key, extras);
    legend.append(el("li", {}, swatch, componentName(key)));
  }
  if (usable) legend.append(el("li", {}, el("span", { class: "swatch usable-swatch", "aria-hidden": "true" }),
    `Usable memory of one GPU: ${fmtGB(usable)} (${fmtGiB(usable)})`));
}

function fmtMs(ms) { return ms.toLocaleString("en-US", { maximumFractionDigits: 1 }) + " ms"; }

function renderPerformance(estimate) {
  const box = $("#performance");
  box.replaceChildren();
  const p = estimate.performance;
  if (!p) return;
  box.append(el("p", { id: "performance-sentence", text:
    `Latency and throughput with ${p.concurrency.toLocaleString("en-US")} requests in flight: ` +
    `time to first token ${fmtMs(p.ttft_ms)}, inter-token latency ${fmtMs(p.itl_ms)}, ` +
    `${p.output_tokens_per_s.toLocaleString("en-US")} output tokens/s ` +
    `(${p.requests_per_s.toLocaleString("en-US")} requests/s) for the replica; a step is ${p.bound}-bound.` }));
  if (p.saturated) {
    box.append(el("p", { text: `Saturated: the engine runs ${p.max_concurrency.toLocaleString("en-US")} ` +
      `at once (its KV pool and scheduler); the rest wait ${fmtMs(p.queue_wait_ms)} in its queue.` }));
  }
  if (!p.calibrated) {
    box.append(el("p", { text: "Not calibrated for this engine, GPU or format: inter-token latency " +
      `between ${fmtMs(p.band.itl_ms.low)} and ${fmtMs(p.band.itl_ms.high)} (docs/performance.md).` }));
  }
}

function render(items, answer) {
  const results = answer.results;
  const first = results[0];
  $("#error").replaceChildren();
  if (first.status !== 200) {
    $("#error").append(el("p", { text: `The service could not estimate this request: ${problemText(first.problem)}` }));
  }
  const output = $("#output");
  output.hidden = false;
  const bars = [];
  if (first.status === 200) {
    renderBreakdown(first.estimate);
    renderFit(first.estimate);
    renderEngine(first.estimate);
    renderPerformance(first.estimate);
    const list = $("#assumptions");
    list.replaceChildren(...first.estimate.assumptions.map((a) => el("li", { text: a })));
    bars.push({ key: "request", label: "Your request", estimate: first.estimate });
  } else {
    $("#breakdown tbody").replaceChildren();
    $("#breakdown tfoot").replaceChildren();
    $("#fit").replaceChildren();
    $("#engine-box").hidden = true;
    $("#performance").replaceChildren();
  }
  renderTable(results);
  TABLE_ROWS.forEach((row, i) => {
    if (results[i + 1].status === 200) bars.push({ key: row.key, label: row.label, estimate: results[i + 1].estimate });
  });
  const withFit = results.find((r) => r.status === 200 && r.estimate.fit);
  state.lastChart = [bars, withFit ? withFit.estimate.fit.usable_bytes : null];
  renderChart(...state.lastChart);
  const path = `/v1/estimate/${items[0].kind}`;
  $("#curl").textContent = curlFor(path, items[0].request);
  $("#curl-batch").textContent = curlFor("/v1/estimate/batch", { items });
  const status = first.status === 200
    ? first.estimate.summary : `No estimate for your request; ${answer.succeeded} of ${results.length} table rows answered.`;
  $("#status").replaceChildren(el("p", { text: status }));
  state.run += 1;
  $("#results").dataset.run = state.run;
}

async function estimate(event) {
  if (event) event.preventDefault();
  const error = $("#error");
  error.replaceChildren();
  let items;
  try {
    items = buildItems();
  } catch (err) {
    error.append(el("p", { text: err.message }));
    return;
  }
  $("#busy").hidden = false;
  $("#estimate").disabled = true;
  try {
    const response = await fetch("/v1/estimate/batch", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ items }),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(problemText(answer));
    render(items, answer);
  } catch (err) {
    error.append(el("p", { text: `The service could not answer: ${err.message}` }));
  } finally {
    $("#busy").hidden = true;
    $("#estimate").disabled = false;
  }
}

// ---------------------------------------------------------------------------------------
// Wiring

// The context field names the chosen engine's own flag, and is off for engines without one.
function syncContextField() {
  const context = CONTEXT_OPTION[$("#engine").value];
  const field = $("#context_length");
  field.disabled = !context;
  $("#context-label").textContent = context
    ? `Engine context (tokens, ${context[1]})` : "Engine context (this engine has none)";
}

function syncVisibility() {
  syncContextField();
  const source = document.querySelector("input[name=source]:checked").value;
  for (const field of document.querySelectorAll("[data-source]")) field.hidden = field.dataset.source !== source;
  const kind = document.querySelector("input[name=kind]:checked").value;
  for (const set of document.querySelectorAll("fieldset[data-kind]")) {
    set.hidden = set.dataset.kind !== kind;
    set.disabled = set.hidden;
  }
}

async function start() {
  const form = $("#calc");
  form.addEventListener("change", syncVisibility);
  form.addEventListener("submit", estimate);
  $("#hf_config_file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (file) $("#hf_config").value = await file.text();
  });
  $("#copy").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText($("#curl").textContent);
      $("#copy").textContent = "Copied";
    } catch {
      window.getSelection().selectAllChildren($("#curl"));
    }
  });
  let resizeTimer;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => state.lastChart && renderChart(...state.lastChart), 150);
  });
  syncVisibility();
  try {
    const [models, gpus, openapi] = await Promise.all(
      [getJSON("/v1/models"), getJSON("/v1/gpus"), getJSON("/openapi.json")]);
    state.models = models.models;
    state.gpus = gpus.gpus;
    state.schemas = (openapi.components || {}).schemas || {};
    fillEnumSelects();
    fillModels(state.models);
    fillGpus(state.gpus);
    syncContextField();
  } catch (err) {
    $("#error").append(el("p", { text: `Could not load the catalogs: ${err.message}` }));
    return;
  }
  document.body.dataset.ready = "true";
  await estimate();
}

document.addEventListener("DOMContentLoaded", start);
