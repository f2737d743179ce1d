#!/usr/bin/env bash
# The prepared device check for a lent GPU (one run, under 8 minutes in total):
#   1. device and backend information            -> $OUT/device.txt
#   2. pytest tests/gpu (timeout 120 s)           -> $OUT/gpu-tests.txt, $OUT/gpu-tests.xml
#   3. replayverify gpu calibrate (timeout 330 s; -> $OUT/calibration/ and $OUT/calibration.txt
#      the calibration itself starts no new cell after 240 s)
# Results go to $OUT (the device tool's output folder; ./out/gpu-check when unset).
# Exit status: 0 when both steps passed, 3 when the GPU backend is unavailable, else 1.
# Needs a Python with replayverify's dependencies and CuPy (pip install -e '.[gpu,test]').
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out/gpu-check}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
start=$(date +%s)

{
  echo "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || echo "nvidia-smi failed"
  "$PY" -m replayverify gpu info 2>&1
} > "$OUT/device.txt"
cat "$OUT/device.txt"

if ! "$PY" -c 'import sys, replayverify.gpu as g; sys.exit(0 if g.available() else 1)'; then
  echo "GPU backend unavailable; nothing measured (see $OUT/device.txt)" | tee "$OUT/summary.txt"
  exit 3
fi

timeout 120 "$PY" -m pytest tests/gpu -q -rs --junitxml="$OUT/gpu-tests.xml" \
  > "$OUT/gpu-tests.txt" 2>&1
tests_rc=$?
tail -n 15 "$OUT/gpu-tests.txt"

timeout 330 "$PY" -m replayverify gpu calibrate --out "$OUT/calibration" \
  > "$OUT/calibration.txt" 2>&1
cal_rc=$?
tail -n 15 "$OUT/calibration.txt"

echo "gpu tests rc=$tests_rc, calibration rc=$cal_rc, $(( $(date +%s) - start )) s" \
  | tee "$OUT/summary.txt"
[ "$tests_rc" -eq 0 ] && [ "$cal_rc" -eq 0 ] && exit 0
exit 1
