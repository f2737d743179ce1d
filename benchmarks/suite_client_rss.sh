#!/usr/bin/env bash
# The suite client's peak resident set on a real suite (checks included), to show it does
# not grow with --programs (issue #28: 1,024 vs 100,000 programs within 50 MiB).
# Usage: bash benchmarks/suite_client_rss.sh N [WORKERS]   (writes to a temporary DIR)
# Prints the wall time, the client's VmHWM (read from /proc every second until it exits;
# the workers are separate processes and not counted) and the load before and after.
set -euo pipefail
n=${1:?number of programs}; workers=${2:-2}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s.%N)
replayverify suite --programs "$n" --seed 0 --workers "$workers" --out "$out/run" \
    > "$out/log" 2>&1 &
pid=$!; hwm=0
while kill -0 "$pid" 2>/dev/null; do
    h=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$h" ] && hwm=$h
    sleep 1
done
rc=0; wait "$pid" || rc=$?
t1=$(date +%s.%N)
echo "programs $n: exit $rc, $(echo "$t1 - $t0" | bc) s wall, client VmHWM $((hwm / 1024)) MiB;" \
     "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
head -1 "$out/log"
