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
# Numeric options out of range and empty values: exit 2 with a line naming the option (issue 32:
# --stop-after 0 used to run every step, --resume '' said ": not a checkpoint").
expect2() {  # expect2 "MESSAGE" CMD...: exit 2 and MESSAGE on stderr
  local want=$1 err status; shift
  set +e; err=$("$@" 2>&1 >/dev/null); status=$?; set -e
  [ "$status" = 2 ] && grep -qF -- "$want" <<<"$err" || fail "$* -> exit $status, '$err' (expected 2 and '$want')"
}
for c in train finetune; do
  expect2 "$c: --stop-after expects an integer in [1, " "$MHETRAIN" $c x.yaml --stop-after 0
  expect2 "$c: --resume expects auto, none or a checkpoint path, got ''" "$MHETRAIN" $c x.yaml --resume ''
done
# The launch scripts check their arguments before calling anything (was: bash's division by zero,
# "unbound variable", OMP_NUM_THREADS=0).
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cfg="$src/configs/quickstart.yaml"
expect2 "-n expects a whole number in [1, 1000000], got '0'" env MHETRAIN="$MHETRAIN" "$src/launch/mpirun.sh" -n 0 "$cfg"
expect2 "-n expects a whole number in [1, 1000000], got 'abc'" env MHETRAIN="$MHETRAIN" "$src/launch/mpirun.sh" -n abc "$cfg"
expect2 "-p expects a whole number in [1, 4096], got 'abc'" env MHETRAIN="$MHETRAIN" "$src/launch/mpirun.sh" -p abc "$cfg"
expect2 "-t expects a whole number in [1, 4096], got '0'" env MHETRAIN="$MHETRAIN" "$src/launch/mpirun.sh" -t 0 "$cfg"
expect2 "cannot read the config $src/nothere.yaml" env MHETRAIN="$MHETRAIN" "$src/launch/mpirun.sh" "$src/nothere.yaml"
empty_hosts=$(mktemp); trap 'rm -f "$empty_hosts"' EXIT
echo "# no hosts" >"$empty_hosts"
expect2 "hostfile $empty_hosts names no host" env MHETRAIN="$MHETRAIN" "$src/launch/mpirun.sh" -H "$empty_hosts" "$cfg"
expect2 "expected a readable CONFIG.yaml (relative to" env MHETRAIN="$MHETRAIN" bash "$src/launch/slurm.sbatch"
expect2 "SLURM_CPUS_PER_TASK expects a whole number" env SLURM_CPUS_PER_TASK=0 bash "$src/launch/slurm.sbatch" "$cfg"
echo PASS
