# The single entry point: `make serve` runs the service, `make test` proves it works.
# Both create .venv on first use (a fresh machine needs only Python and pip).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=

RUNTIME_STAMP := $(VENV)/.runtime-installed
TEST_STAMP := $(VENV)/.test-installed

.DEFAULT_GOAL := help
.PHONY: help venv serve test lint typecheck openapi clean readme-examples

help:  ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | sort | \
		awk 'BEGIN {FS = ":.*?## "}; {printf "  %-22s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)

# The runtime at the versions and hashes the image installs (requirements.lock), then the
# project itself, editable.
$(RUNTIME_STAMP): pyproject.toml requirements.lock | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
		-r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

# Everything `make test` runs: the test tools, ruff and mypy, selenium, the deployment
# checkers, and the reference extras (torch CPU, transformers, peft) behind the
# parameter-count and tracer tests.
$(TEST_STAMP): $(RUNTIME_STAMP) | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check \
		-e '.[test,lint,browser,deploy,reference]'
	@touch $@

venv: $(TEST_STAMP)  ## Create .venv with everything the tests need

serve: $(RUNTIME_STAMP)  ## Start the service on HOST:PORT (default 127.0.0.1:8000)
	LLMMEM_HOST=$(HOST) LLMMEM_PORT=$(PORT) $(PY) -m service

lint: $(TEST_STAMP)  ## ruff lint and format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check service tests bench

typecheck: $(TEST_STAMP)  ## mypy on the domain package
	$(VENV)/bin/mypy

test: $(TEST_STAMP) lint typecheck deploy-check browser-deps  ## Lint, type-check, deploy checks and the whole test suite
	$(PY) -m pytest $(PYTEST_ARGS)

openapi: $(RUNTIME_STAMP)  ## Regenerate openapi/openapi.json from the live app
	$(PY) -m service.openapi > openapi/openapi.json

clean:  ## Remove the venv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis test-output

-include mk/*.mk

readme-examples: $(TEST_STAMP)  ## Rerun the README's curl session against a live server
	$(PY) docs/tools/readme_examples.py
