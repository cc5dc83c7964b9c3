#!/usr/bin/env bash
# Peers waiting for rank 0's checkpoint wait dist.timeout_s plus the allowance: a rank 0 that is
# slow past the deadline but within the allowance is not a dead peer (the job completes), and one
# slow past both still ends the job with the message, never a hang.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../common/lib.sh"
bin="$1"
out=$(timeout 60 "${MPIRUN[@]}" -np 2 "$bin" slow_root 8 10 2>&1)
status=$?
echo "$out" | tail -3
[ "$status" = 0 ] || fail "a rank 0 8 s late, within 5 s + 10 s allowed, ended the job (status $status)"
start=$(date +%s)
out=$(timeout 60 "${MPIRUN[@]}" -np 2 "$bin" slow_root 40 3 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -3
echo "status=$status elapsed=${elapsed}s"
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "status $status: a rank 0 40 s late, past 5 s + 3 s, must end the job"
[ "$elapsed" -le 30 ] || fail "took ${elapsed}s"
grep -q "barrier after the checkpoint did not complete within dist.timeout_s=5 s + 3 s allowed for it" <<<"$out" ||
  fail "no deadline message"
echo PASS
