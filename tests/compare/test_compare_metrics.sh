#!/usr/bin/env bash
# launch/compare.sh and compare_util.py read any metrics file the trainer can write (issue 50):
# - a diverged run (final valid_loss null, diverged_at_step) is tabulated as diverged, with
#   no loss and no PRR, not a Python traceback;
# - rows without an integer "step" and torn lines are named and ignored, not a traceback;
# - a run without its final evaluation is "not finished": summarise exits 2 saying so, and
#   compare.sh exits 1 with no table when a run ended without it (no --stop-after).
set -euo pipefail
: "${MHETRAIN:?}" "${MHE_SOURCE_DIR:?}" "${MHE_BINARY_DIR:?}"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir compare-metrics
CORPUS="$MHE_BINARY_DIR/test-corpus"
TINY="$MHE_SOURCE_DIR/tests/train/tiny.yaml"
DATA=(data.train="[$CORPUS/shards/train]" data.valid="[$CORPUS/shards/valid]"
      data.tokenizer="$CORPUS/tokenizer/tokenizer.json")
UTIL=(/usr/bin/python3 "$MHE_SOURCE_DIR/launch/compare/compare_util.py")
out="$WORK/cmp"
for t in mha sha; do
  mkdir -p "$out/$t/checkpoints/step_00000008"
  "$MHETRAIN" train "$TINY" "${DATA[@]}" attention.type=$t --dry-run >"$out/$t/resolved.yaml"
  "$MHETRAIN" params "$TINY" "${DATA[@]}" attention.type=$t >"$out/$t/params.txt"
done
# mha: a finished run, with a torn line and a row without "step"; sha: diverged at step 7.
cat >"$out/mha/metrics.jsonl" <<'J'
{"step": 4, "loss": 7.1, "lr": 0.002, "grad_norm": 1.2, "tokens_per_s": 1000, "mfu": null, "elapsed_s": 1, "tokens_seen": 2048, "skipped": 0}
{"loss": 7.0, "tokens_per_s": 1000}
{"step": 4, "split": "valid", "valid_loss": 7.2, "valid_accuracy": 0.05, "tokens_seen": 2048, "valid_tokens": 100, "whole_split": 0}
{"step": 8, "loss": 6.9, "lr": 0.001, "grad_norm": 1.1, "tokens_per_s": 1100, "mfu": null, "elapsed_s": 2, "tokens_seen": 4096, "skipped": 0}
{"step": 8, "split": "valid", "valid_loss": 6.8, "valid_accuracy": 0.07, "tokens_seen": 4096, "valid_tokens": 500, "whole_split": 1}
{"step": 9, "loss": 6.
J
cat >"$out/sha/metrics.jsonl" <<'J'
{"step": 4, "loss": 7.1, "lr": 0.002, "grad_norm": 1.2, "tokens_per_s": 1000, "mfu": null, "elapsed_s": 1, "tokens_seen": 2048, "skipped": 0}
{"step": 4, "split": "valid", "valid_loss": 7.3, "valid_accuracy": 0.04, "tokens_seen": 2048, "valid_tokens": 100, "whole_split": 0}
{"step": 7, "loss": null, "lr": 0.001, "grad_norm": null, "tokens_per_s": null, "mfu": null, "elapsed_s": 2, "tokens_seen": 3584, "skipped": 1}
{"step": 8, "loss": null, "lr": 0.001, "grad_norm": null, "tokens_per_s": 900, "mfu": null, "elapsed_s": 2, "tokens_seen": 4096, "skipped": 1}
{"step": 8, "split": "valid", "valid_loss": null, "valid_accuracy": 0, "tokens_seen": 4096, "valid_tokens": 500, "whole_split": 1, "diverged_at_step": 7}
J
"${UTIL[@]}" complete "$out/mha" 8 2>"$WORK/complete.log" || { cat "$WORK/complete.log"; fail "finished mha not complete"; }
grep -q "metrics.jsonl:2: no integer \"step\", ignored" "$WORK/complete.log" || { cat "$WORK/complete.log"; fail "row without step not named"; }
grep -q "metrics.jsonl:6: not JSON, ignored" "$WORK/complete.log" || { cat "$WORK/complete.log"; fail "torn line not named"; }
"${UTIL[@]}" summarise "$out" mha sha 2>"$WORK/sum.log" || { cat "$WORK/sum.log"; fail "summarise with a diverged run"; }
if grep -q Traceback "$WORK/sum.log"; then cat "$WORK/sum.log"; fail "traceback"; fi
grep -q "compare: sha diverged (sha at step 7): no loss for it in the table" "$WORK/sum.log" || { cat "$WORK/sum.log"; fail "no diverged line"; }
grep -q "| sha | .* | diverged (sha at step 7) |" "$out/results.md" || { cat "$out/results.md"; fail "results.md does not say diverged"; }
/usr/bin/python3 - "$out/results.csv" <<'PY'
import csv, sys
rows = {r["type"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert rows["sha"]["valid_loss"] == "" and rows["sha"]["prr"] == "" and rows["sha"]["diverged_at_step"] == "7", rows["sha"]
assert float(rows["mha"]["valid_loss"]) == 6.8 and rows["mha"]["diverged_at_step"] == "", rows["mha"]
assert float(rows["mha"]["tokens_per_s"]) == 1050, rows["mha"]
PY
# sha's final evaluation lost (a row without step where it should be): not finished, exit 2.
sed -i 's/^{"step": 8, "split": "valid"/{"split": "valid"/' "$out/sha/metrics.jsonl"
if "${UTIL[@]}" complete "$out/sha" 8 2>"$WORK/c2.log"; then fail "a run without its final evaluation is complete"; fi
set +e; "${UTIL[@]}" summarise "$out" mha sha 2>"$WORK/sum2.log"; status=$?; set -e
[ "$status" = 2 ] || { cat "$WORK/sum2.log"; fail "summarise of an unfinished run: exit $status, expected 2"; }
grep -q "sha: no final evaluation at step 8 (the run has not finished)" "$WORK/sum2.log" || { cat "$WORK/sum2.log"; fail "no message"; }
if grep -q Traceback "$WORK/sum2.log"; then cat "$WORK/sum2.log"; fail "traceback"; fi
# compare.sh: a launcher that exits 0 without training leaves the run unfinished: exit 1, no table.
set +e
MHE_LAUNCH=true bash "$MHE_SOURCE_DIR/launch/compare.sh" "$TINY" mha -o "$WORK/cmp2" "${DATA[@]}" 2>"$WORK/cmp2.log"
status=$?
set -e
[ "$status" = 1 ] || { cat "$WORK/cmp2.log"; fail "compare.sh with an unfinished run: exit $status, expected 1"; }
grep -q "compare: not finished: mha" "$WORK/cmp2.log" || { cat "$WORK/cmp2.log"; fail "not finished not reported"; }
test ! -e "$WORK/cmp2/results.csv" || fail "a table from an unfinished run"
echo PASS
