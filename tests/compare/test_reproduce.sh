#!/usr/bin/env bash
# launch/reproduce.sh on configs/paper shrunk to tiny sizes by overrides, on the CPU: the plan
# (mpirun and SLURM lines per type; the time estimate, or why there is none), then --run end to
# end (pretraining, fine-tuning on the derived tasks with 2 seeds, the paper's table), then a
# rerun that skips everything and leaves the table as it was.
set -euo pipefail
: "${MHETRAIN:?}" "${MHE_SOURCE_DIR:?}" "${MHE_BINARY_DIR:?}"
CORPUS="$MHE_BINARY_DIR/test-corpus"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir reproduce-test
out="$WORK/paper"
TINY=(model.layers=1 model.hidden=64 model.heads=2 model.head_dim=32 model.ffn=128 model.vocab_size=2000
      model.max_seq=64 data.seq_len=64 data.train="[$CORPUS/shards/train]" data.valid="[$CORPUS/shards/valid]"
      data.tokenizer="$CORPUS/tokenizer/tokenizer.json" train.steps=12 train.global_batch=8 train.micro_batch=8
      train.eval_every=6 train.checkpoint_every=6 train.eval_batches=8 train.log_every=1 optim.warmup_steps=2
      optim.lr=1e-2 runtime.device=cpu runtime.precision=fp32 runtime.threads=1)
/usr/bin/python3 "$MHE_SOURCE_DIR/tests/finetune/make_tasks.py" "$WORK/tasks" --mhetrain "$MHETRAIN" \
  --train 64 --dev 32 --span-train 32 --span-dev 16 >/dev/null || fail "make_tasks"
ARGS=(--types "sha mha mhe_mul" --seeds 2 --tasks "$WORK/tasks" --gpus 1 -o "$out" "${TINY[@]}")

# 1. The plan.
bash "$MHE_SOURCE_DIR/launch/reproduce.sh" "${ARGS[@]}" >"$WORK/plan" 2>&1 || { cat "$WORK/plan" >&2; fail "plan"; }
for t in sha mha mhe_mul; do
  grep -q "^  $t: 12 steps x 8 sequences x 64 tokens = 6144 tokens" "$WORK/plan" || { cat "$WORK/plan" >&2; fail "$t budget"; }
  grep -q "mpirun: launch/mpirun.sh -H hostfile -n 1 -p 1 .*configs/paper/bert-base-${t//_/-}.yaml train.out_dir=$out/pretrain/$t" "$WORK/plan" \
    || fail "$t mpirun line"
  grep -q "SLURM:  sbatch --nodes=1 --ntasks-per-node=1 --gpus-per-node=1 launch/slurm.sbatch .*bert-base-${t//_/-}.yaml" "$WORK/plan" \
    || fail "$t SLURM line"
done
grep -q "3 types (sha mha mhe_mul) x 4 tasks (blank distance pair source) x 2 seeds" "$WORK/plan" || fail "plan header"
grep -q "then 24 fine-tuning runs" "$WORK/plan" || fail "fine-tuning count"
if "$MHETRAIN" info | grep -qi "cuda.*yes\|backends:.*cuda"; then
  grep -q "time (.*_step_ms=" "$WORK/plan" || { cat "$WORK/plan" >&2; fail "a CUDA build without a time estimate"; }
else
  grep -q "time: not estimated: .*CUDA backend" "$WORK/plan" || { cat "$WORK/plan" >&2; fail "no reason for the missing estimate"; }
  grep -q "no time estimate for every type" "$WORK/plan" || fail "no summary of the missing estimate"
fi
grep -q "a plan only; add --run" "$WORK/plan" || fail "plan mode ran something"
test ! -e "$out/pretrain/sha/metrics.jsonl" || fail "plan mode trained"

# 2. --run end to end.
bash "$MHE_SOURCE_DIR/launch/reproduce.sh" "${ARGS[@]}" --run >"$WORK/run" 2>&1 || { cat "$WORK/run" >&2; fail "--run"; }
test -s "$out/paper_table.csv" && grep -q "## The MHE paper's table" "$out/results.md" || fail "no table after --run"
/usr/bin/python3 - "$out" <<'PY' || fail "paper_table.csv against the runs"
import csv, json, os, statistics, sys
out = sys.argv[1]
rows = {(r["type"], r["unit"]): r for r in csv.DictReader(open(os.path.join(out, "paper_table.csv")))}
def attn(t):
    return int([l for l in open(os.path.join(out, "pretrain", t, "params.txt")) if l.startswith("attention weights (no biases)")][0].split(":")[1])
def score(t, task, k):
    r = json.load(open(os.path.join(out, t, "seed-%d" % k, "ft-" + task, "finetune_result.json")))
    assert os.path.realpath(r["init_from"]) == os.path.realpath(os.path.join(out, "pretrain", t)), r["init_from"]
    return r["value"] * (1 if r["metric"].startswith("squad") else 100)
glue = ["distance", "pair", "source"]
for t in ("sha", "mha", "mhe_mul"):
    for unit, tasks in (("GLUE", glue), ("SQuAD v2.0", ["blank"]), ("pair", ["pair"])):
        s = [statistics.mean(score(t, x, k) for x in tasks) for k in (1, 2)]
        b = [statistics.mean(score("sha", x, k) for x in tasks) for k in (1, 2)]
        r = rows[(t, unit)]
        assert abs(float(r["score"]) - statistics.mean(s)) < 1e-6 * max(1, abs(statistics.mean(s))), (t, unit, r["score"], s)
        assert int(r["attention_params"]) == attn(t)
        if t != "sha":
            e = [((a - c) / c) / ((attn(t) - attn("sha")) / attn("sha")) for a, c in zip(s, b)]
            assert abs(float(r["peop"]) - statistics.mean(e)) < 1e-5 * max(1, abs(statistics.mean(e))), (t, unit, r["peop"], e)
print("reproduce table ok")
PY
# 3. A rerun skips every run and writes the same table.
cp "$out/paper_table.csv" "$WORK/table1.csv"
bash "$MHE_SOURCE_DIR/launch/reproduce.sh" "${ARGS[@]}" --run >"$WORK/rerun" 2>&1 || { cat "$WORK/rerun" >&2; fail "rerun"; }
[ "$(grep -c "pretrained, skipped" "$WORK/rerun")" = 3 ] || { cat "$WORK/rerun" >&2; fail "pretraining not skipped"; }
[ "$(grep -c ": done, skipped" "$WORK/rerun")" = 24 ] || { cat "$WORK/rerun" >&2; fail "fine-tuning not skipped"; }
cmp -s "$out/paper_table.csv" "$WORK/table1.csv" || fail "the rerun changed the table"
# 4. Every shipped fine-tuning task file loads on top of a paper pretraining config.
for f in "$MHE_SOURCE_DIR"/configs/paper/finetune/*.yaml; do
  { echo "base: $MHE_SOURCE_DIR/configs/paper/bert-base-mha.yaml"; cat "$f"; } >"$WORK/ft.yaml"
  "$MHETRAIN" finetune "$WORK/ft.yaml" --dry-run >/dev/null 2>"$WORK/ft.err" || { cat "$WORK/ft.err" >&2; fail "$f does not load"; }
done
# 5. A changed pretraining config is refused, not mixed in.
if bash "$MHE_SOURCE_DIR/launch/reproduce.sh" "${ARGS[@]}" optim.lr=2e-2 --run >"$WORK/changed" 2>&1; then
  fail "a changed config was accepted"
fi
grep -q "pretrained under another config" "$WORK/changed" || { cat "$WORK/changed" >&2; fail "no message for a changed config"; }
echo "ok"
