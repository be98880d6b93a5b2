#!/usr/bin/env bash
# `make fuzz`: schemathesis against the live production server's /openapi.json, then the
# hostile corpus of issue 18 (bench/hostile.py) against the same server.
#
# Starts `python -m service` (one uvicorn worker, as production runs it) on a free loopback
# port, waits for /readyz, then runs `st run` over every operation with FUZZ_EXAMPLES examples
# each (default 1000) in all four phases (examples, coverage, fuzzing, stateful), positive and
# negative data (`--mode all`), and schemathesis's default checks (no 5xx, status codes,
# content types, headers and bodies as the schema declares, negative data rejected, ...).
# Then bench/hostile.py replays what schemathesis would not generate: real quantization
# configs, overflowing byte counts, a batch abandoned by its client (the worker's CPU time
# must stop growing), a 64 MB header and a stalled head (the head deadline is shortened to
# FUZZ_HEADER_TIMEOUT_S, 3 s, so the run does not wait the production 10 s), HEAD, malformed
# HTTP and the 413 route label.
# CI runs a small count in-process (tests/api/test_schemathesis.py); this is the big run.
#
# Environment: PY (the venv's python), FUZZ_EXAMPLES, FUZZ_SEED, FUZZ_WORKERS (default 1: the
# machine has 2 shared cores), FUZZ_TIMEOUT_S (hard bound on the whole run, default 3600),
# FUZZ_REPORT_DIR (default test-output/fuzz: JUnit XML and the NDJSON event log), FUZZ_RESULTS
# (default bench/results.md, where bench/fuzz_report.py appends the run's summary; "-" prints).
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ST=${ST:-$(dirname "$PY")/st}
EXAMPLES=${FUZZ_EXAMPLES:-1000}
SEED=${FUZZ_SEED:-20241202}
WORKERS=${FUZZ_WORKERS:-1}
TIMEOUT_S=${FUZZ_TIMEOUT_S:-3600}
REPORT_DIR=${FUZZ_REPORT_DIR:-test-output/fuzz}
HEADER_TIMEOUT_S=${FUZZ_HEADER_TIMEOUT_S:-3}
PORT=$("$PY" -c 'from bench.harness import free_port; print(free_port())')
URL="http://127.0.0.1:${PORT}"
mkdir -p "$REPORT_DIR"

LLMMEM_HOST=127.0.0.1 LLMMEM_PORT="$PORT" LLMMEM_ACCESS_LOG=false \
    LLMMEM_HEADER_READ_TIMEOUT_S="$HEADER_TIMEOUT_S" \
    "$PY" -m service >"$REPORT_DIR/service.log" 2>&1 &
SERVER_PID=$!
stop_server() {
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
}
trap stop_server EXIT

for _ in $(seq 1 300); do
    if curl -fsS "$URL/readyz" >/dev/null 2>&1; then break; fi
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$REPORT_DIR/service.log"; exit 1; }
    sleep 0.2
done
curl -fsS "$URL/readyz" >/dev/null

echo "fuzz: $EXAMPLES examples per operation against $URL (seed $SEED, load $(cut -d' ' -f1-3 /proc/loadavg))"
status=0
timeout "$TIMEOUT_S" "$ST" run "$URL/openapi.json" \
    --max-examples "$EXAMPLES" \
    --phases examples,coverage,fuzzing,stateful \
    --mode all \
    --workers "$WORKERS" \
    --seed "$SEED" \
    --request-timeout 30 \
    --suppress-health-check all \
    --generation-database none \
    --report junit,ndjson \
    --report-dir "$REPORT_DIR" \
    --no-color 2>&1 | tee "$REPORT_DIR/st.log" || status=$?

echo "fuzz: hostile corpus (issue 18) against $URL"
"$PY" -m bench.hostile "$URL" --pid "$SERVER_PID" --header-timeout-s "$HEADER_TIMEOUT_S" \
    --report "$REPORT_DIR/hostile.json" 2>&1 | tee "$REPORT_DIR/hostile.log" || status=1

if grep -q '"level":"error"' "$REPORT_DIR/service.log"; then
    echo "fuzz: the service logged errors (see $REPORT_DIR/service.log):"
    grep '"level":"error"' "$REPORT_DIR/service.log" | head -5
    status=1
fi
"$PY" -m bench.fuzz_report "$REPORT_DIR" "$EXAMPLES" "$SEED" "$status" || status=1
echo "fuzz: exit $status; reports in $REPORT_DIR"
exit $status
