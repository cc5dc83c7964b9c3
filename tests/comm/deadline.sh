#!/usr/bin/env bash
# A peer that never joins a collective must end the whole job, with a message and a non-zero
# status, within the deadline (5 s) plus launch overhead -- never a hang.
set -u
bin="$1"
start=$(date +%s)
out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" deadline 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -5
echo "status=$status elapsed=${elapsed}s"
[ "$status" -ne 0 ] || { echo "FAIL: job exited 0"; exit 1; }
[ "$status" -ne 124 ] || { echo "FAIL: job hung until the test's own timeout"; exit 1; }
[ "$elapsed" -le 30 ] || { echo "FAIL: took ${elapsed}s"; exit 1; }
echo "$out" | grep -q "did not complete within dist.timeout_s=5 s" || { echo "FAIL: no deadline message"; exit 1; }
echo PASS
