#!/usr/bin/env bash
# launch/compare.sh with a budget of a few steps: a finished type is skipped on rerun, a type
# stopped part way resumes from its checkpoint, and the table's numbers agree with
# `mhetrain params`, the design's parameter formulas and each run's own metrics (check.py).
set -euo pipefail
: "${MHETRAIN:?}" "${MHE_SOURCE_DIR:?}" "${MHE_BINARY_DIR:?}"
CORPUS="$MHE_BINARY_DIR/test-corpus"
COMPARE="$MHE_SOURCE_DIR/launch/compare.sh"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir compare-test
out="$WORK/cmp"
# 12 steps of 512 tokens; lr and validation batches large enough that mha's masked-token
# accuracy is not 0 (PRR divides by it).
SET=(--tokens 6144 model.layers=1 model.hidden=64 optim.lr=1e-2 train.eval_batches=8
     data.train="[$CORPUS/shards/train]" data.valid="[$CORPUS/shards/valid]"
     data.tokenizer="$CORPUS/tokenizer/tokenizer.json")
run() { bash "$COMPARE" "$MHE_SOURCE_DIR/tests/train/tiny.yaml" "$@" -o "$out" "${SET[@]}" 2>"$WORK/log"; }

# 1. Only mha, to the end.
run mha || { cat "$WORK/log" >&2; fail "compare of mha alone"; }
test -s "$out/results.csv" || fail "no results.csv after the first run"
sum_mha=$(sha256sum "$out/mha/metrics.jsonl" "$out/mha/peak_rss_kb.txt" | sha256sum)
rm "$out/results.csv" "$out/results.md" "$out/curves.png"

# 2. mha is skipped; sha and mhe_mul (trained at once: --jobs defaults to one per core) stop
#    after step 5 with a checkpoint, so no table yet.
run mha sha mhe_mul --jobs 2 --stop-after 5 || { cat "$WORK/log" >&2; fail "partial compare"; }
grep -q "compare: mha: done (12 steps), skipped" "$WORK/log" || fail "finished mha not skipped"
grep -q "compare: not finished: sha mhe_mul" "$WORK/log" || { cat "$WORK/log" >&2; fail "partial run not reported"; }
test ! -e "$out/results.csv" || fail "a table from unfinished runs"
test -d "$out/sha/checkpoints/step_00000005" || fail "sha has no checkpoint at step 5"

grep -q "compare: sha: training into .*log $out/sha/train.log" "$WORK/log" || { cat "$WORK/log" >&2; fail "sha not run as a job"; }

# 3. The same command without --stop-after, one run at a time, finishes them from step 5.
run mha sha mhe_mul --jobs 1 || { cat "$WORK/log" >&2; fail "resumed compare"; }
grep -q "compare: mha: done (12 steps), skipped" "$WORK/log" || fail "finished mha retrained"
for t in sha mhe_mul; do
  grep -q "resumed from .*step_00000005 (step 5" "$out/$t/train.log" || fail "$t did not resume from step 5"
done
[ "$(grep -c "^resumed from" "$WORK/log")" = 2 ] || fail "expected exactly two resumed runs (streamed with --jobs 1)"
[ "$sum_mha" = "$(sha256sum "$out/mha/metrics.jsonl" "$out/mha/peak_rss_kb.txt" | sha256sum)" ] \
  || fail "mha's run files changed although it was finished"

# 4. The table, against independent numbers.
for t in mha sha mhe_mul; do
  "$MHETRAIN" params "$MHE_SOURCE_DIR/tests/train/tiny.yaml" attention.type="$t" model.layers=1 model.hidden=64 \
    > "$WORK/params_$t.txt"
done
/usr/bin/python3 "$MHE_SOURCE_DIR/tests/compare/check.py" "$out" "$WORK" mha sha mhe_mul
# 5. Reusing the folder under another config is refused, and leaves the runs alone.
if run mha model.dropout=0.2; then fail "a finished mha reused under another dropout"; fi
grep -q "was trained with another config" "$WORK/log" || { cat "$WORK/log" >&2; fail "no config mismatch message"; }
[ "$sum_mha" = "$(sha256sum "$out/mha/metrics.jsonl" "$out/mha/peak_rss_kb.txt" | sha256sum)" ] \
  || fail "mha's run files changed by a refused run"
# 6. --seeds 2: every type twice under its own seeds, mean ± sd against the runs' own metrics.
out2="$WORK/cmp2"
bash "$COMPARE" "$MHE_SOURCE_DIR/tests/train/tiny.yaml" mha sha --seeds 2 -o "$out2" "${SET[@]}" 2>"$WORK/log2" \
  || { cat "$WORK/log2" >&2; fail "compare --seeds 2"; }
/usr/bin/python3 "$MHE_SOURCE_DIR/tests/compare/check_seeds.py" "$out2" 2 mha sha
# Two runs at once train exactly what one run alone trains: seed 1 of mha is step 1's run.
evals() { grep '"valid_loss"' "$1/metrics.jsonl"; }
[ "$(evals "$out/mha")" = "$(evals "$out2/mha/seed-1")" ] || fail "mha seed 1 (parallel) differs from mha trained alone"
# 7. --finetune on the derived tasks (tiny sizes) with the random-init baseline: the pretraining
#    of step 6 is reused, every (type, seed) fine-tuned from its own run.
/usr/bin/python3 "$MHE_SOURCE_DIR/tests/finetune/make_tasks.py" "$WORK/tasks" --mhetrain "$MHETRAIN" \
  --train 64 --dev 32 --span-train 32 --span-dev 16 >/dev/null || fail "make_tasks"
bash "$COMPARE" "$MHE_SOURCE_DIR/tests/train/tiny.yaml" mha sha --seeds 2 -o "$out2" "${SET[@]}" \
  --finetune "$WORK/tasks" --finetune-baseline 2>"$WORK/log4" || { cat "$WORK/log4" >&2; fail "compare --finetune"; }
grep -q "compare: sha/seed-2: done" "$WORK/log4" || { cat "$WORK/log4" >&2; fail "pretraining not reused"; }
/usr/bin/python3 "$MHE_SOURCE_DIR/tests/compare/check_finetune.py" "$out2" 2 mha sha random-init
if bash "$COMPARE" "$MHE_SOURCE_DIR/tests/train/tiny.yaml" mha --seeds 2 -o "$WORK/cmp3" "${SET[@]}" train.seed=5 2>"$WORK/log3"; then
  fail "--seeds with train.seed= accepted"
fi
grep -q -- "--seeds sets train.seed" "$WORK/log3" || { cat "$WORK/log3" >&2; fail "no message for --seeds with train.seed="; }
# 8. TERM to the script while two runs train side by side: each trainer checkpoints the step it
#    is on, no table, exit 130 with its one line, no trainer left behind; the rerun resumes them.
out5="$WORK/cmp5"
bash "$COMPARE" "$MHE_SOURCE_DIR/tests/train/tiny.yaml" sha mhe_mul --jobs 2 -o "$out5" "${SET[@]}" --tokens 50000000 \
  2>"$WORK/log5" &
cpid=$!
for _ in $(seq 600); do
  n=0
  for t in sha mhe_mul; do grep -qs "^step " "$out5/$t/train.log" && n=$((n + 1)); done
  [ "$n" = 2 ] && break
  sleep 0.1
done
[ "$n" = 2 ] || { kill -TERM "$cpid"; cat "$WORK/log5" >&2; fail "the two runs did not start"; }
kill -TERM "$cpid"
status=0; wait "$cpid" || status=$?
[ "$status" = 130 ] || { cat "$WORK/log5" >&2; fail "TERM during parallel runs: exit $status, expected 130"; }
grep -q "compare: interrupted; run the same command to resume" "$WORK/log5" || { cat "$WORK/log5" >&2; fail "no interrupted line"; }
test ! -e "$out5/results.csv" || fail "a table after TERM"
for t in sha mhe_mul; do
  grep -q "stopping after step" "$out5/$t/train.log" || { cat "$out5/$t/train.log" >&2; fail "$t did not stop at a step"; }
  ls -d "$out5/$t"/checkpoints/step_* >/dev/null 2>&1 || fail "$t has no checkpoint after TERM"
done
! pgrep -f "$out5" >/dev/null || fail "a trainer still runs after compare ended"
last=$(ls -d "$out5"/*/checkpoints/step_* | sed 's/.*step_0*//' | sort -n | tail -n 1)
bash "$COMPARE" "$MHE_SOURCE_DIR/tests/train/tiny.yaml" sha mhe_mul --jobs 2 -o "$out5" "${SET[@]}" --tokens 50000000 \
  --stop-after $((last + 1)) 2>"$WORK/log6" || { cat "$WORK/log6" >&2; fail "rerun after TERM"; }
for t in sha mhe_mul; do
  grep -q "resumed from" "$out5/$t/train.log" || { cat "$WORK/log6" >&2; fail "$t did not resume after TERM"; }
done
echo "ok"
