# Accuracy against measured data (bench/validate/data/measured) and the reference tracer.
# `validate` regenerates docs/accuracy.md from committed data in seconds; the tracer targets
# rerun real transformers code (minutes) and rewrite the committed JSONL.

PY ?= .venv/bin/python

.PHONY: validate tracer-data-inference

validate:  ## compare the estimator with measurements and tracer data; writes docs/accuracy.md
	$(PY) -m bench.validate
	$(PY) -m pytest -q tests/validation

tracer-data-inference:  ## rerun the reference tracer's inference grid (needs .[reference])
	$(PY) -m bench.validate.tracer
