"""Worker: measure one case in this process and print one result line.

Builds the model from its config with random weights straight on the device, in the dtype the
case asks for (no hub access, no checkpoint), then runs the workload and reads PyTorch's
allocator statistics (`torch.cuda.max_memory_allocated` / `max_memory_reserved`, reset per
phase) and the device's used memory from NVML (or nvidia-smi), sampled in a background thread,
so the CUDA context and allocator cache are seen too.

Workloads:
- inference-prefill: one forward with use_cache=True under no_grad, `logits_to_keep` as asked;
- inference-generate: `generate` with greedy decoding, exactly `new_tokens` new tokens;
- train: `steps` x (forward with labels = inputs, backward, AdamW step, zero_grad(None)),
  the outputs dropped before backward as the HF Trainer does; full fine-tuning or peft LoRA;
  pure bf16, or fp32 weights under bf16 autocast (bf16-mixed).

On the CPU (the dry run) the same code runs and the device figures stay empty. An out-of-memory
error is caught and reported as status "oom" with the peaks reached so far.

Input: the case as JSON on stdin (what run.py sends), or `--cases FILE --id ID` by hand.
Output: one line `@@GPU_TRUTH_RESULT@@ {json}` on stdout, keys from results_schema.COLUMNS.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import threading
import time
from typing import Any

from bench.gpu_truth.cases import Case, load_cases, shrink

RESULT_MARKER = "@@GPU_TRUTH_RESULT@@"
_DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


# --- device memory as the driver sees it ---------------------------------------------------


class DeviceMemory:
    """Used memory of one GPU from NVML (nvidia-ml-py's `pynvml`), else nvidia-smi, else None.

    Neither creates a CUDA context, so it can be read before torch touches the device.
    """

    def __init__(self, index: int) -> None:
        self.index = index
        self.source = ""
        self._handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.source = "nvml"
        except Exception:
            if self._smi("memory.used") is not None:
                self.source = "nvidia-smi"

    def _smi(self, query: str) -> str | None:
        try:
            out = subprocess.run(
                [
                    "nvidia-smi",
                    f"--query-gpu={query}",
                    "--format=csv,noheader,nounits",
                    "-i",
                    str(self.index),
                ],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None

    def used(self) -> int | None:
        if self.source == "nvml":
            return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        if self.source == "nvidia-smi":
            text = self._smi("memory.used")
            return int(float(text)) * 2**20 if text else None
        return None

    def driver_version(self) -> str | None:
        if self.source == "nvml":
            v = self._nvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        if self.source == "nvidia-smi":
            return self._smi("driver_version")
        return None


class PeakSampler:
    """Polls `DeviceMemory.used` in a thread and keeps the highest reading."""

    def __init__(self, mem: DeviceMemory, interval_s: float) -> None:
        self.mem, self.interval_s = mem, interval_s
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        v = self.mem.used()
        if v is not None and (self.peak is None or v > self.peak):
            self.peak = v

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> PeakSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


# --- the measurement -------------------------------------------------------------------------


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first_line(e: BaseException, limit: int = 300) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:limit]


class Measurement:
    """Collects the row while the case runs; `row` is valid at any point (for OOM/errors)."""

    def __init__(self, case: Case, device: str) -> None:
        self.case, self.device = case, device
        self.cuda = device == "cuda"
        self.phases: dict[str, list[int]] = {}
        c = case
        self.row: dict[str, Any] = dict(
            case_id=c.id,
            kind=c.kind,
            status="error",
            expected_status=c.expect,
            error=None,
            measured_on="cuda" if self.cuda else "cpu-dry",
            model=c.model,
            model_source=c.model_source,
            model_type=c.model_type,
            num_hidden_layers=c.num_hidden_layers,
            full_num_hidden_layers=c.full_num_hidden_layers,
            config_json=c.config,
            dtype=c.dtype,
            precision=c.precision,
            method=c.method or None,
            lora_r=c.lora_r if c.method == "lora" else None,
            lora_alpha=c.lora_alpha if c.method == "lora" else None,
            lora_targets=";".join(c.lora_targets) or None,
            optimizer=c.optimizer or None,
            gradient_checkpointing=c.gradient_checkpointing,
            attn_impl=c.attn,
            batch=c.batch,
            seq_len=c.seq_len,
            new_tokens=c.new_tokens,
            logits_to_keep=c.logits_to_keep,
            steps=c.steps if c.kind == "train" else None,
            alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or None,
            python_version=platform.python_version(),
            peft_version=package_version("peft"),
        )

    # phases: reset the peaks before, read them after
    def phase(self, name: str) -> contextlib.AbstractContextManager[None]:
        @contextlib.contextmanager
        def run() -> Any:
            torch = self.torch
            if self.cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            try:
                yield
            finally:
                if self.cuda:
                    torch.cuda.synchronize()
                    self.phases[name] = [
                        torch.cuda.max_memory_allocated(),
                        torch.cuda.max_memory_reserved(),
                    ]

        return run()

    def finish_peaks(self) -> None:
        if not self.phases:
            return
        name, (alloc, _) = max(self.phases.items(), key=lambda kv: kv[1][0])
        self.row.update(
            peak_allocated_bytes=alloc,
            peak_phase=name,
            peak_reserved_bytes=max(v[1] for v in self.phases.values()),
            phase_peaks=self.phases,
        )

    def allocated(self) -> int | None:
        return int(self.torch.cuda.memory_allocated()) if self.cuda else None

    def run(self, mem: DeviceMemory | None) -> None:
        case, row = self.case, self.row
        t0 = time.perf_counter()
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM

        self.torch = torch
        row.update(
            import_s=time.perf_counter() - t0,
            torch_version=torch.__version__,
            transformers_version=transformers.__version__,
            cuda_version=torch.version.cuda,
        )
        dev = torch.device(self.device)
        if self.cuda:
            if not torch.cuda.is_available():
                raise RuntimeError("--device cuda but torch.cuda.is_available() is False")
            torch.cuda.set_device(0)
            torch.empty(1, device=dev)
            torch.cuda.synchronize()
            props = torch.cuda.get_device_properties(0)
            row.update(gpu_name=props.name, gpu_total_bytes=props.total_memory)
            if mem is not None and mem.source:
                init_used = mem.used()
                row["nvml_init_used_bytes"] = init_used
                idle = row.get("nvml_idle_used_bytes")
                if init_used is not None and idle is not None:
                    row["cuda_context_bytes"] = init_used - idle - torch.cuda.memory_reserved()
        torch.manual_seed(0)

        fields = dict(case.config)
        model_type = fields.pop("model_type")
        config = AutoConfig.for_model(model_type, **fields)
        config.use_cache = case.kind != "train"
        weight_dtype = getattr(torch, _DTYPE_NAMES[case.dtype])
        t1 = time.perf_counter()
        with dev:
            model = AutoModelForCausalLM.from_config(
                config, dtype=weight_dtype, attn_implementation=case.attn
            )
        model.to(dev)
        base = model
        if case.kind == "train":
            if case.gradient_checkpointing:
                # transformers >= 5.2x renames it; the H200 image may have an older 5.x
                if hasattr(base, "activation_checkpointing_enable"):
                    base.activation_checkpointing_enable(
                        activation_checkpointing_kwargs={"use_reentrant": False}
                    )
                else:
                    base.gradient_checkpointing_enable(
                        gradient_checkpointing_kwargs={"use_reentrant": False}
                    )
            if case.method == "lora":
                from peft import LoraConfig, get_peft_model

                lora = LoraConfig(
                    r=case.lora_r,
                    lora_alpha=case.lora_alpha,
                    lora_dropout=0.0,
                    target_modules=list(case.lora_targets),
                )
                model = get_peft_model(base, lora)
            model.train()
        else:
            model.eval()
        if self.cuda:
            torch.cuda.synchronize()
        params = list(model.parameters())
        trainable = [p for p in params if p.requires_grad] if case.kind == "train" else []
        row.update(
            build_s=time.perf_counter() - t1,
            attn_impl_used=getattr(base.config, "_attn_implementation", None),
            params=sum(p.numel() for p in params),
            trainable_params=sum(p.numel() for p in trainable),
            param_bytes=sum(p.numel() * p.element_size() for p in params),
        )
        gen = torch.Generator(device=dev).manual_seed(0)
        ids = torch.randint(
            0, config.vocab_size, (case.batch, case.seq_len), device=dev, generator=gen
        )
        opt = None
        if case.kind == "train":
            opt_kw = {
                "adamw-foreach": {"foreach": True},
                "adamw-fused": {"fused": True},
                "adamw-forloop": {"foreach": False},
            }[case.optimizer]
            opt = torch.optim.AdamW(trainable, lr=1e-5, **opt_kw)
        row["weights_allocated_bytes"] = self.allocated()

        t2 = time.perf_counter()
        try:
            if case.kind == "train":
                self._train(model, opt, ids)
            elif case.kind == "inference-prefill":
                self._prefill(model, ids)
            else:
                self._generate(model, ids)
        finally:
            row["step_s"] = time.perf_counter() - t2
            self.finish_peaks()
        row["after_allocated_bytes"] = self.allocated()
        row["status"] = "ok"

    def _maybe_fail(self) -> None:
        if self.case.force_fail == "oom":
            raise self.torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 1.00 GiB (forced by the case, dry run)"
            )
        if self.case.force_fail == "error":
            raise RuntimeError("error forced by the case")

    def _train(self, model: Any, opt: Any, ids: Any) -> None:
        torch = self.torch
        if self.case.precision == "bf16-mixed":

            def amp() -> contextlib.AbstractContextManager[Any]:
                return torch.autocast(self.device, dtype=torch.bfloat16)
        else:
            amp = contextlib.nullcontext
        for step in range(1, self.case.steps + 1):
            with self.phase(f"step{step}.forward"), amp():
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            self._maybe_fail()
            with self.phase(f"step{step}.backward"):
                loss.backward()
                del loss
            with self.phase(f"step{step}.optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)

    def _prefill(self, model: Any, ids: Any) -> None:
        torch = self.torch
        self._maybe_fail()
        with self.phase("prefill"), torch.no_grad():
            out = model(input_ids=ids, use_cache=True, logits_to_keep=self.case.logits_to_keep)
        cache = getattr(out, "cache", None)
        if cache is None:
            cache = getattr(out, "past_key_values", None)
        self.row["kv_cache_bytes"] = _cache_bytes(cache)
        self._keep = out  # held until run() reads after_allocated_bytes

    def _generate(self, model: Any, ids: Any) -> None:
        torch = self.torch
        from transformers import GenerationConfig

        n = self.case.new_tokens
        gcfg = GenerationConfig(
            do_sample=False,
            max_new_tokens=n,
            min_new_tokens=n,
            eos_token_id=None,
            bos_token_id=None,
            pad_token_id=0,
            use_cache=True,
        )
        self._maybe_fail()
        with self.phase("generate"), torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gcfg)
        self.row["generated_tokens"] = int(out.shape[1] - ids.shape[1])


def _cache_bytes(cache: Any) -> int | None:
    """Bytes of the distinct key/value storages a transformers cache holds."""
    if cache is None:
        return None
    tensors = []
    for layer in getattr(cache, "layers", []) or []:
        tensors += [getattr(layer, "keys", None), getattr(layer, "values", None)]
    if not tensors and hasattr(cache, "key_cache"):
        tensors = list(cache.key_cache) + list(cache.value_cache)
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if t is None or not hasattr(t, "untyped_storage") or t.numel() == 0:
            continue
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            total += st.nbytes()
    return total


def measure(case: Case, device: str) -> dict[str, Any]:
    """Runs one case and returns its row (never raises for OOM or model errors)."""
    if case.force_fail == "crash":
        sys.stdout.flush()
        os._exit(3)
    if case.force_fail == "hang":
        time.sleep(3600)
    m = Measurement(case, device)
    mem = None
    if m.cuda:
        index = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        mem = DeviceMemory(int(index) if index.isdigit() else 0)
        m.row.update(
            nvml_source=mem.source or None,
            nvml_idle_used_bytes=mem.used(),
            driver_version=mem.driver_version(),
        )
    sampler = PeakSampler(mem, 0.01 if mem.source == "nvml" else 0.25) if mem else None
    try:
        with sampler or contextlib.nullcontext():
            m.run(mem)
    except Exception as e:
        torch = sys.modules.get("torch")
        oom = torch is not None and isinstance(e, torch.OutOfMemoryError)
        m.row.update(status="oom" if oom else "error", error=_first_line(e))
        m.finish_peaks()
        if oom and m.cuda:
            # the phase that failed never closed: its peak is the highest reached before it
            m.row["peak_allocated_bytes"] = max(
                m.row.get("peak_allocated_bytes") or 0, int(torch.cuda.max_memory_allocated())
            )
            m.row["peak_reserved_bytes"] = max(
                m.row.get("peak_reserved_bytes") or 0, int(torch.cuda.max_memory_reserved())
            )
    if sampler is not None and sampler.peak is not None:
        m.row["nvml_peak_used_bytes"] = sampler.peak
        idle = m.row.get("nvml_idle_used_bytes")
        if idle is not None:
            m.row["process_peak_bytes"] = sampler.peak - idle
    return m.row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--cases", help="a cases.toml (with --id), instead of a case on stdin")
    ap.add_argument("--id", help="the case to run from --cases")
    ap.add_argument("--shrink", action="store_true", help="tiny dimensions (with --cases)")
    a = ap.parse_args(argv)
    if a.cases:
        case = next((c for c in load_cases(a.cases) if c.id == a.id), None)
        if case is None:
            ap.error(f"no case {a.id!r} in {a.cases}")
        if a.shrink:
            case = shrink(case)
    else:
        case = Case.from_json(sys.stdin.read())
    row = measure(case, a.device)
    sys.stdout.write(f"{RESULT_MARKER} {json.dumps(row, default=str)}\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
