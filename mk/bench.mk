# Performance and robustness runs against the real server (see bench/README.md).
# Uses VENV, PY and the stamps from the main Makefile. None of these run in `make test`;
# the limit tests they back (tests/limits/) do.

BENCH_ARGS ?=
SOAK_ARGS ?=
FUZZ_EXAMPLES ?= 1000

.PHONY: bench soak fuzz wrk

wrk:  ## Install wrk (Debian package) if it is missing
	@command -v wrk >/dev/null 2>&1 || { \
		echo "wrk not found: apt-get install -y wrk"; \
		apt-get install -y wrk >/dev/null || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }; }
	@command -v wrk >/dev/null 2>&1

bench: $(TEST_STAMP) wrk  ## Throughput vs bare FastAPI, estimator cost, batch, RSS -> bench/results.md
	@echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	$(PY) -m bench.run_bench $(BENCH_ARGS)

soak: $(TEST_STAMP)  ## 60 s of mixed load, then SIGTERM under load; appends to bench/results.md
	$(PY) -m bench.soak $(SOAK_ARGS)

fuzz: $(TEST_STAMP)  ## schemathesis, FUZZ_EXAMPLES (1000) per operation, stateful + negative
	PY=$(PY) FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) bench/fuzz.sh
