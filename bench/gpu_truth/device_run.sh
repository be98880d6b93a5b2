#!/usr/bin/env bash
# The one command a session with a lent GPU passes to the device tool:
#     bash bench/gpu_truth/device_run.sh            (device tool: timeout_s 600)
# Prints the machine and library versions, runs the default case list with a time budget,
# writes the CSV (+ .meta.json, .log) into $OUT so they come back, and copies them into
# bench/gpu_truth/results/ on that machine too. Back home, copy the files from the tool's
# files_at folder into bench/gpu_truth/results/ (that copy is the one that counts).
# Uses the machine's python3 (torch, transformers, peft already there; nothing is installed).
set -u
cd "$(dirname "$0")/../.."
PY="${GPU_PY:-python3}"
LIST="${GPU_TRUTH_LIST:-default}"
BUDGET_S="${GPU_TRUTH_BUDGET_S:-450}"   # no case starts whose estimate ends past this
HARD_S="${GPU_TRUTH_HARD_S:-570}"       # the whole run is stopped here (tool limit: 600)
DEVICE="${GPU_TRUTH_DEVICE:-cuda}"      # cpu only to check this script's plumbing
EXTRA_ARGS="${GPU_TRUTH_ARGS:-}"        # e.g. "--only ID1,ID2"
OUT_DIR="${OUT:-bench/gpu_truth/results}"
mkdir -p "$OUT_DIR" bench/gpu_truth/results

echo "== $(date -u +%FT%TZ) $(uname -m)"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv || true
"$PY" - <<'PYEOF' || true
import importlib.metadata as md, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "cuda available", torch.cuda.is_available())
for d in ("transformers", "peft", "accelerate", "nvidia-ml-py", "flash-attn"):
    try:
        print(d, md.version(d))
    except md.PackageNotFoundError:
        print(d, "not installed")
PYEOF

tag="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
      | tr 'A-Z' 'a-z' | sed 's/^nvidia //' | awk '{print $1}')"
csv="$OUT_DIR/${tag:-gpu}-$(date -u +%Y%m%dT%H%M%SZ).csv"
PYTHONUNBUFFERED=1 timeout -k 10 "$HARD_S" "$PY" -m bench.gpu_truth.run --list "$LIST" \
    --device "$DEVICE" --budget-s "$BUDGET_S" --out "$csv" $EXTRA_ARGS
rc=$?
if [ "$OUT_DIR" != bench/gpu_truth/results ]; then
    cp "$csv"* bench/gpu_truth/results/ 2>/dev/null || true
fi
ls -l "$OUT_DIR"
echo "== exit $rc"
exit "$rc"
