#!/usr/bin/env bash
# Evaluation over the whole validation split (train.final_eval_batches: 0, the default of the
# run's final evaluation and of `mhetrain eval`) covers every packed sample exactly once: it
# equals the sampled evaluation of one-sample batches over exactly N = ceil(stream / (T - 2))
# batches (epoch 0 of the shuffled order is a permutation of the same samples with the same
# masks), whatever the micro-batch and the number of ranks; the run's final metrics row is it.
source "$(dirname "$0")/lib.sh"
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/run" 2>"$WORK/train.log" || { cat "$WORK/train.log"; fail "train"; }
grep -q "(whole split)" "$WORK/train.log" || fail "the final evaluation does not say it covers the whole split"
read -r N < <($PY - "$CORPUS/shards/manifest.json" <<'PY'
import json, math, sys
v = json.load(open(sys.argv[1]))["splits"]["valid"]
print(math.ceil((v["tokens"] + v["documents"]) / (64 - 2)))   # one [SEP] per document; T = 64
PY
)
ev() { local name=$1; shift; "$@" eval "$WORK/run" "${DATA[@]}" "${EXTRA[@]}" >"$WORK/$name.json" 2>"$WORK/$name.err" \
        || { cat "$WORK/$name.err"; fail "eval $name"; }; }
EXTRA=(); ev whole "$MHETRAIN"
EXTRA=(train.micro_batch=8); ev whole_b3 "$MHETRAIN"
EXTRA=(); ev whole_np2 "${MPIRUN[@]}" -np 2 "$MHETRAIN"
EXTRA=(train.global_batch=1 train.micro_batch=1 train.final_eval_batches="$N"); ev sampled_n "$MHETRAIN"
EXTRA=(train.global_batch=1 train.micro_batch=1 train.final_eval_batches=$((N - 1))); ev sampled_n1 "$MHETRAIN"
# objective.eval_mask_prob scores the validation split at its own rate, whatever the training's.
EXTRA=(objective.eval_mask_prob=0.4); ev rate40 "$MHETRAIN"
EXTRA=(objective.mask_prob=0.4 objective.eval_mask_prob=0.15); ev trained40 "$MHETRAIN"
$PY - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
r = {k: json.load(open(f"{w}/{k}.json")) for k in ["whole", "whole_b3", "whole_np2", "sampled_n", "sampled_n1"]}
base = r["whole"]
for k in ["whole_b3", "whole_np2", "sampled_n"]:
    assert r[k]["tokens"] == base["tokens"], (k, r[k]["tokens"], base["tokens"])
    for m in ["valid_loss", "valid_accuracy"]:
        assert abs(r[k][m] - base[m]) <= 1e-5 * max(1.0, abs(base[m])), (k, m, r[k][m], base[m])
assert r["sampled_n1"]["tokens"] < base["tokens"], "one sample fewer must score fewer tokens"
for k in ["rate40", "trained40"]:
    r[k] = json.load(open(f"{w}/{k}.json"))
# The base run's mask_prob is 0.15: 0.4 selects 8/3 as many positions (binomial, thousands of them).
ratio = r["rate40"]["tokens"] / base["tokens"]
assert abs(ratio - 0.4 / 0.15) < 0.15, ("eval_mask_prob 0.4 scored", r["rate40"]["tokens"], "vs", base["tokens"])
assert r["trained40"]["tokens"] == base["tokens"] and r["trained40"]["valid_loss"] == base["valid_loss"], \
    ("mask_prob 0.4 with eval_mask_prob 0.15 must score the 0.15 positions", r["trained40"], base)
rows = [json.loads(l) for l in open(f"{w}/run/metrics.jsonl")]
final = [x for x in rows if x.get("split") == "valid"][-1]
assert final["whole_split"] == 1 and final["valid_tokens"] == base["tokens"], final
assert abs(final["valid_loss"] - base["valid_loss"]) <= 1e-5, (final["valid_loss"], base["valid_loss"])
print("whole split:", base["tokens"], "tokens, loss", base["valid_loss"])
PY
# Under mpirun, ranks evaluating with different settings stop naming the key (eval issue 32).
set +e
"${MPIRUN[@]}" -np 1 "$MHETRAIN" eval "$WORK/run" "${DATA[@]}" : -np 1 "$MHETRAIN" eval "$WORK/run" "${DATA[@]}" \
  objective.eval_mask_prob=0.4 >/dev/null 2>"$WORK/disagree.err"
status=$?
set -e
[ "$status" = 2 ] && grep -q "the ranks disagree on their config .*rank 1: objective.eval_mask_prob 0.0 -> 0.4" "$WORK/disagree.err" ||
  { cat "$WORK/disagree.err"; fail "eval ranks that disagree: exit $status"; }
echo PASS
