#!/usr/bin/env bash
# The prepared device check for a lent GPU (one run, under 15 minutes in total):
#   1. device and backend information            -> $OUT/device.txt
#   2. pytest tests/gpu (timeout 120 s)           -> $OUT/gpu-tests.txt, $OUT/gpu-tests.xml
#   3. replayverify gpu calibrate (timeout 330 s; -> $OUT/calibration/ and $OUT/calibration.txt
#      the calibration itself starts no new cell after 240 s)
#   4. replayverify evaluate at the paper's scale  -> $OUT/evaluate/ and $OUT/evaluate.txt
#      (activation cells at --scale 1, 3 processes; timeout 360 s) and the calibration
#      workloads at --scale 2 (float64 eager copies of 64 x 1 GiB would not fit; 180 s)
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

timeout 360 "$PY" -m replayverify evaluate --backend cupy --scale 1 --repeats 3 \
  --warmups 1 --steps 3 --cells small-sparse,small-dense,large-sparse,large-dense \
  --out "$OUT/evaluate" > "$OUT/evaluate.txt" 2>&1
eval_rc=$?
timeout 180 "$PY" -m replayverify evaluate --backend cupy --scale 2 --repeats 3 \
  --warmups 1 --steps 3 --cells queue,prototype,recurrence \
  --out "$OUT/evaluate-calibration" >> "$OUT/evaluate.txt" 2>&1
eval2_rc=$?
tail -n 8 "$OUT/evaluate.txt"

echo "gpu tests rc=$tests_rc, calibration rc=$cal_rc, evaluate rc=$eval_rc/$eval2_rc," \
  "$(( $(date +%s) - start )) s" | tee "$OUT/summary.txt"
[ "$tests_rc" -eq 0 ] && [ "$cal_rc" -eq 0 ] && [ "$eval_rc" -eq 0 ] && [ "$eval2_rc" -eq 0 ] \
  && exit 0
exit 1
