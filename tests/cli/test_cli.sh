#!/usr/bin/env bash
# The command line: every subcommand answers --help, bad commands exit 2, info reports the
# libraries and (under mpirun) the rank -> host -> device map.
set -euo pipefail
: "${MHETRAIN:?}"
source "$(dirname "${BASH_SOURCE[0]}")/../common/lib.sh"
for c in prepare tokenizer train eval params export import convert bench info; do
  out=$("$MHETRAIN" "$c" --help) || fail "$c --help exited $?"
  grep -q "usage: mhetrain $c" <<<"$out" || fail "$c --help does not print its usage"
done
"$MHETRAIN" --help | grep -q "^  params " || fail "top-level help lists no commands"
set +e
"$MHETRAIN" frobnicate 2>/dev/null; [ $? = 2 ] || fail "an unknown command must exit 2"
"$MHETRAIN" 2>/dev/null; [ $? = 2 ] || fail "no command must exit 2"
"$MHETRAIN" train 2>/dev/null; [ $? = 2 ] || fail "train without a config must exit 2"
set -e
info=$("$MHETRAIN" info)
for key in "mhetrain [0-9]" "backends: cpu" "mpi: Open MPI" "blas: OpenBLAS" "openmp:" "libyaml:" "cjson:" "nccl:" "cublas:"; do
  grep -q "^$key" <<<"$info" || fail "info lacks '$key'"
done
map=$("${MPIRUN[@]}" -np 2 "$MHETRAIN" info)
grep -q "^world: 2 ranks" <<<"$map" || fail "no world line under mpirun"
[ "$(echo "$map" | grep -c '^rank [01] -> host .* (local rank [01]) -> ')" = 2 ] || fail "rank map: $map"
echo PASS
