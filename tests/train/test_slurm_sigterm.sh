#!/usr/bin/env bash
# launch/slurm.sbatch passes the batch shell's TERM (SLURM's --signal=B:TERM@300) on to srun and
# ends with its status (issue 50): the trainer checkpoints and the job exits 143.  SLURM is not
# installed here: a stand-in `srun` on PATH runs its command as a single task on the CPU (it
# drops srun's own options and turns the script's runtime.device=cuda into cpu), which is all the
# script's signal plumbing needs.  The old script died at the TERM and left the trainer running.
source "$(dirname "$0")/lib.sh"
mkdir -p "$WORK/bin"
cat >"$WORK/bin/srun" <<'SH'
#!/usr/bin/env bash
while [[ "${1:-}" == --* ]]; do shift; done
args=(); for a in "$@"; do [ "$a" = runtime.device=cuda ] && a=runtime.device=cpu; args+=("$a"); done
exec "${args[@]}"
SH
chmod +x "$WORK/bin/srun"
PATH="$WORK/bin:$PATH" SLURM_SUBMIT_DIR="$MHE_SOURCE_DIR" SLURM_CPUS_PER_TASK=1 MHETRAIN="$MHETRAIN" \
  bash "$MHE_SOURCE_DIR/launch/slurm.sbatch" "$TINY" "${DATA[@]}" train.eval_every=0 train.checkpoint_every=0 \
  train.steps=400 train.out_dir="$WORK/run" 2>"$WORK/run.log" &
pid=$!
for _ in $(seq 1 1200); do grep -q "^step 3/" "$WORK/run.log" && break; sleep 0.05; done
grep -q "^step 3/" "$WORK/run.log" || { kill -KILL "$pid" 2>/dev/null; pkill -KILL -P "$pid" 2>/dev/null; cat "$WORK/run.log"; fail "no step 3"; }
trainer=$(pgrep -P "$pid" || true)
kill -TERM "$pid"
set +e; wait "$pid"; status=$?; set -e
[ "$status" = 143 ] || { cat "$WORK/run.log"; fail "slurm.sbatch exit status $status after SIGTERM, expected 143"; }
for _ in $(seq 1 100); do [ -n "$trainer" ] && kill -0 "$trainer" 2>/dev/null || break; sleep 0.1; done
if [ -n "$trainer" ] && kill -0 "$trainer" 2>/dev/null; then kill -KILL "$trainer"; fail "the trainer outlived the job"; fi
grep -q "(signal); run the same command to resume" "$WORK/run.log" || { cat "$WORK/run.log"; fail "the trainer did not stop at the TERM"; }
[ -s "$WORK/run/checkpoints/latest" ] || fail "no checkpoint after SIGTERM"
echo PASS
