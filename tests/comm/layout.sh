#!/usr/bin/env bash
# Ranks whose gradient buffers differ in size must be stopped by the reducer before the first
# all-reduce: status 1 and one line with both sizes, never a crash inside MPI (was: SIGSEGV in
# mca_btl_vader under PMPI_Test, exit 139) nor a hang.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../common/lib.sh"
out=$(timeout 60 "${MPIRUN[@]}" -np 2 "$1" layout 2>&1)
status=$?
echo "$out" | tail -5
[ "$status" = 1 ] || fail "exit $status, expected 1"
grep -q "gradient buffers differ between ranks (rank 0: 4096 floats in 2 tensors, rank 1: 4097 floats in 2 tensors)" \
  <<<"$out" || fail "no layout message"
[ "$(grep -c 'gradient buffers differ' <<<"$out")" = 1 ] || fail "message not printed exactly once"
echo PASS
