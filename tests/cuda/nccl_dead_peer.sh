#!/usr/bin/env bash
# A stuck NCCL peer ends the job: rank 1 joins the communicator, then never enters the
# all-reduce; rank 0 (deadline 2 s) must exit with status 1 and the deadline message, and the
# whole job must end well before rank 1's 60 s sleep would.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/lib.sh"
bin="$1"
start=$(date +%s)
out=$("${MPIRUN[@]}" -np 2 "$bin" dead 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -5
echo "exit status $status after ${elapsed}s"
[ "$status" -ne 0 ] || fail "the job succeeded"
grep -q "did not complete within 2 s" <<<"$out" || fail "no deadline message"
[ "$elapsed" -lt 40 ] || fail "took ${elapsed}s"
echo PASS
