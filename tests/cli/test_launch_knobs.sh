#!/usr/bin/env bash
# Every knob checked where it is read (issue 50):
# - README.md's table of MHE_* variables against the variables the sources and launch scripts
#   read (env_table.py), and the check itself fails on a missing row;
# - bad MHE_* values: one line naming the variable and what it takes, exit 2;
# - the launch scripts: --help everywhere (fetch_corpus.sh made a folder named --help), unknown
#   options and bad values refused, duplicate types refused, h200 known, slurm.sbatch from
#   outside the repository root says so.
set -euo pipefail
: "${MHETRAIN:?}" "${MHE_SOURCE_DIR:?}"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir launch-knobs
src="$MHE_SOURCE_DIR"
cfg="$src/configs/quickstart.yaml"
/usr/bin/python3 "$src/tests/cli/env_table.py" "$src" || fail "README.md's environment table and the sources disagree"
grep -v '^| `MHE_CPU_AMX`' "$src/README.md" >"$WORK/README.md"
if /usr/bin/python3 "$src/tests/cli/env_table.py" "$src" "$WORK/README.md" >"$WORK/table.log"; then
  fail "a missing row was not noticed"
fi
grep -q "no row for MHE_CPU_AMX (read in kernels/cpu/cpu_amx.c)" "$WORK/table.log" || { cat "$WORK/table.log"; fail "no message"; }

expect2() {  # expect2 "MESSAGE" CMD...: exit 2 and MESSAGE on stderr
  local want=$1 err status; shift
  set +e; err=$("$@" 2>&1 >/dev/null); status=$?; set -e
  [ "$status" = 2 ] && grep -qF -- "$want" <<<"$err" || fail "$* -> exit $status, '$err' (expected 2 and '$want')"
}
bench=("$MHETRAIN" bench "$src/configs/tiny-bert-mha.yaml" --steps 1 runtime.precision=bf16)
expect2 "MHE_CPU_WEIGHT_CACHE=yes: expected 0 or 1" env MHE_CPU_WEIGHT_CACHE=yes "${bench[@]}"
expect2 "MHE_CPU_WEIGHT_CHECK=on: expected 0 or 1" env MHE_CPU_WEIGHT_CHECK=on "${bench[@]}"
expect2 "MHE_CPU_ATTN_BLOCK=20: expected an integer in [16, 4096], a multiple of 16" env MHE_CPU_ATTN_BLOCK=20 "${bench[@]}"
expect2 "MHE_CPU_ATTN_BLOCK=0x10: expected an integer" env MHE_CPU_ATTN_BLOCK=0x10 "${bench[@]}"
expect2 "MHE_CPU_ATTENTION=flash: expected fused or ref" env MHE_CPU_ATTENTION=flash "${bench[@]}"
expect2 "MHE_CPU_AMX=2: expected 0 or 1" env MHE_CPU_AMX=2 "${bench[@]}"
expect2 "MHE_CPU_ISA=sse9: expected avx512, avx2 or baseline" env MHE_CPU_ISA=sse9 "${bench[@]}"
expect2 "MHE_SKIP_BUILD=yes: expected 0 or 1" env MHE_SKIP_BUILD=yes bash "$src/launch/quickstart.sh"
expect2 "MHE_SKIP_BUILD=1 needs MHETRAIN" env -u MHETRAIN MHE_SKIP_BUILD=1 bash "$src/launch/quickstart.sh"
expect2 "quickstart: --wiki needs an existing file or folder, got ''" env MHE_SKIP_BUILD=1 bash "$src/launch/quickstart.sh" --wiki
expect2 "MHE_SKIP_VENV=2: expected 0 or 1" env MHE_SKIP_VENV=2 bash "$src/launch/setup.sh"
expect2 "setup: takes no argument or --run, got '--yes'" bash "$src/launch/setup.sh" --yes
# --run on a machine that has the packages: nothing to install, exit 0 (the venv and the cuDNN
# frontend left out: the first is the source tree's, the second needs the network)
MHE_SKIP_VENV=1 MHE_SKIP_CUDNN_FRONTEND=1 bash "$src/launch/setup.sh" --run >/dev/null 2>"$WORK/setup.err" ||
  fail "setup.sh --run exited $?: $(cat "$WORK/setup.err")"
! grep -q "installing" "$WORK/setup.err" || fail "setup.sh --run installed: $(cat "$WORK/setup.err")"
rm -f "$WORK/setup.err"
expect2 "MHE_LAUNCH=no-such-launcher -n 2: expected a launcher command" env MHE_LAUNCH="no-such-launcher -n 2" \
  MHETRAIN="$MHETRAIN" bash "$src/launch/compare.sh" "$cfg" mha -o "$WORK/cmp"
expect2 "attention type mha named more than once" env MHETRAIN="$MHETRAIN" bash "$src/launch/compare.sh" "$cfg" mha sha mha -o "$WORK/cmp"
expect2 "--types names mha more than once" env MHETRAIN="$MHETRAIN" bash "$src/launch/reproduce.sh" --gpu h200 --types "mha sha mha"
expect2 "--gpu needs a100, h100 or h200" env MHETRAIN="$MHETRAIN" bash "$src/launch/reproduce.sh" --gpu h300

# --help: exit 0 with the script's usage, nothing made.
cd "$WORK"
for s in compare.sh reproduce.sh mpirun.sh fetch_corpus.sh quickstart.sh setup.sh slurm.sbatch; do
  for h in --help -h; do
    out=$(bash "$src/launch/$s" $h) || fail "$s $h exited $?"
    grep -q "launch/${s%.*}" <<<"$out" || grep -qi "usage\|launch/" <<<"$out" || fail "$s $h printed no usage: $out"
  done
done
[ -z "$(ls -A "$WORK" | grep -v '^cmp$\|^README.md$\|^table.log$')" ] || { ls -A "$WORK"; fail "--help left files"; }
expect2 "fetch: unknown option '--bogus'" bash "$src/launch/fetch_corpus.sh" --bogus
expect2 "fetch: expected at most one DIR, got 2 arguments" bash "$src/launch/fetch_corpus.sh" a b
# slurm.sbatch submitted from another folder (SLURM_SUBMIT_DIR): the reason, not "not built".
expect2 "is not the repository root (no launch/slurm.sbatch here), so no build/mhetrain" \
  env -u MHETRAIN SLURM_SUBMIT_DIR="$WORK" bash "$src/launch/slurm.sbatch" configs/quickstart.yaml
echo PASS
