# GPU ground truth: real torch.cuda / NVML memory figures per case (bench/gpu_truth/README.md).
# `measure-gpu` runs on a CUDA machine whose python3 already has torch, transformers and peft
# (the lent H200's image; nothing is installed there). `measure-gpu-dry` runs the same harness
# on the CPU with tiny shapes, so it cannot rot between GPU sessions; it installs what it needs
# first (the `reference` extras: torch CPU, transformers, peft), so it also runs on a checkout
# where only `make serve` has run (whose .venv has the runtime alone).

PY ?= .venv/bin/python
GPU_PY ?= python3
GPU_TRUTH_LIST ?= default
GPU_TRUTH_TAG ?= h200
GPU_TRUTH_BUDGET_S ?= 0
GPU_TRUTH_OUT ?= bench/gpu_truth/results/$(GPU_TRUTH_TAG)-$(shell date -u +%Y%m%d).csv
GPU_TRUTH_DRY_DIR ?= test-output/gpu_truth

.PHONY: measure-gpu measure-gpu-dry measure-gpu-plan

# The harness imports torch, transformers and peft at the versions pyproject.toml pins.
REFERENCE_STAMP := $(VENV)/.reference-installed

$(REFERENCE_STAMP): pyproject.toml $(RUNTIME_STAMP) | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[reference]'
	@touch $@

measure-gpu:  ## on a CUDA machine: measure the default case list, CSV into bench/gpu_truth/results/
	PYTHONUNBUFFERED=1 $(GPU_PY) -m bench.gpu_truth.run --list $(GPU_TRUTH_LIST) --device cuda \
		--budget-s $(GPU_TRUTH_BUDGET_S) --out $(GPU_TRUTH_OUT)

measure-gpu-dry: $(REFERENCE_STAMP)  ## the GPU harness end to end on the CPU: dry cases, then every default case shrunk
	$(PY) -m bench.gpu_truth.run --list dry --device cpu --strict --out $(GPU_TRUTH_DRY_DIR)/dry.csv
	$(PY) -m bench.gpu_truth.run --list default --shrink --device cpu --strict \
		--out $(GPU_TRUTH_DRY_DIR)/default-shrunk.csv

measure-gpu-plan:  ## print the cases of GPU_TRUTH_LIST with their estimated H200 seconds
	$(PY) -m bench.gpu_truth.run --list $(GPU_TRUTH_LIST) --plan
