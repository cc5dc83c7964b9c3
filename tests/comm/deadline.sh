#!/usr/bin/env bash
# A peer that never joins a collective must end the whole job, with a message and a non-zero
# status, within the deadline (5 s) plus launch overhead -- never a hang.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../common/lib.sh"
bin="$1"
start=$(date +%s)
out=$(timeout 60 "${MPIRUN[@]}" -np 2 "$bin" deadline 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -5
echo "status=$status elapsed=${elapsed}s"
[ "$status" -ne 0 ] || fail "job exited 0"
[ "$status" -ne 124 ] || fail "job hung until the test's own timeout"
[ "$elapsed" -le 30 ] || fail "took ${elapsed}s"
grep -q "did not complete within dist.timeout_s=5 s" <<<"$out" || fail "no deadline message"
echo PASS
