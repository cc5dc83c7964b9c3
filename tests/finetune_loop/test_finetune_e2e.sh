#!/usr/bin/env bash
# Fine-tuning end to end on the derived tasks of tests/finetune/make_tasks.py (MRPC-layout pair,
# SST-2-layout source, STS-B-layout distance, SQuAD v2.0-layout blank): the quickstart's recipe
# (configs/quickstart.yaml: BERT, mhe_mul, MLM) shrunk to the tests' tiny shape and pretrained for
# $PRE_STEPS steps on the fixture corpus, then fine-tuned on every task from that checkpoint and
# from random weights with the same recipe (lr 5e-4, 3 epochs).  Prints the table (pretrained /
# random / trivial on each task's primary metric) and asserts the margins stated in MARGINS.
#
# What this budget shows: the 600-step pretraining reaches only ~5% masked-token accuracy, and
# pretrained ≈ random on every task (when written: source 0.820 / 0.810, distance 0.103 / 0.105).
# The margins hold for every seed 1-10 (SEED=k: train.seed and data.shuffle_seed k for the
# pretraining and every fine-tuning), measured from the pretrained checkpoint (INITS=pre):
#   seed  MLM acc  pair acc_and_f1  source acc  distance corr  blank squad_f1
#     1   0.0525      0.5959          0.8133        0.0832          33.0
#     2   0.0438      0.5959          0.8233        0.0508          33.0
#     3   0.0529      0.5959          0.8033       -0.0044          33.0
#     4   0.0485      0.5959          0.8367        0.0001          33.0
#     5   0.0447      0.5959          0.7967        0.0897          33.0
#     6   0.0527      0.5959          0.8333        0.0707          33.0
#     7   0.0527      0.5959          0.8667        0.0326          33.0
#     8   0.0438      0.5959          0.8833       -0.0198          33.0
#     9   0.0499      0.5959          0.8433        0.0546          33.0
#    10   0.0512      0.5959          0.8200        0.0618          33.0
#   trivial            0.5959          0.5000        0.0000          33.0
# Source: mean 0.832, sd 0.027, lowest 0.797: beating trivial by 0.2 holds with 3.6 sd to spare.
# Distance: mean 0.042, sd 0.038, from -0.020 to 0.090: fine-tuning does not beat the trivial
# predictor beyond run-to-run noise at this budget (the former margin, 0.05 over trivial, failed
# for seeds 3, 4, 7 and 8, and "no worse than trivial" for 3 and 8), so the test asserts only that
# the regression path yields a sane correlation: above trivial - 0.08 (3.2 sd below the mean;
# lowest seen 0.06 above it).  Pair and span equal trivial on every seed (no answer predicted),
# asserted no worse than trivial.
# It does NOT assert pretrained > random, which needs a longer pretraining than CI affords.
source "$MHE_SOURCE_DIR/tests/finetune_loop/lib.sh"
PRE_STEPS=${PRE_STEPS:-600}
# SEED: the run's seeds (train.seed: initialisation, masking, dropout, task order; data.shuffle_seed:
# pretraining order) for pretraining and every fine-tuning; INITS: which initialisations to run.
SEED=${SEED:-1}
INITS=${INITS:-pre rand}
# The margins were measured with the quickstart's former training settings (post-LN, dropout 0.1,
# 15% masking, lr 1e-3, fp32), pinned here. The tiny recipe (configs/README.md) at this shrunken
# shape (2 layers, D=64, 600 steps) fine-tunes worse on source (0.65 pretrained against 0.85 from
# random weights in one CI run): the recipe was measured at 4 layers, D=128, 2,000 steps.
SHAPE=(model.layers=2 model.hidden=64 model.heads=4 model.ffn=128 model.vocab_size=2000 model.max_seq=64
       data.seq_len=64 runtime.threads=2 model.norm=post model.dropout=0.1 model.attn_dropout=0.1
       objective.mask_prob=0.15 objective.eval_mask_prob=0 runtime.precision=fp32 train.seed="$SEED"
       data.shuffle_seed="$SEED")
$PY "$MHE_SOURCE_DIR/tests/finetune/make_tasks.py" "$WORK/tasks" --mhetrain "$MHETRAIN" --train 1000 --dev 300 \
  --span-train 300 --span-dev 200 >/dev/null
"$MHETRAIN" train "$MHE_SOURCE_DIR/configs/quickstart.yaml" "${DATA[@]}" "${SHAPE[@]}" train.steps="$PRE_STEPS" \
  train.global_batch=16 train.micro_batch=16 optim.lr=1e-3 optim.warmup_steps=30 train.eval_every=0 train.checkpoint_every=0 \
  train.log_every=100 train.out_dir="$WORK/pre" 2>"$WORK/pre.log" || { cat "$WORK/pre.log"; fail "pretraining"; }
grep "^eval" "$WORK/pre.log" | tail -n 1
FT=(train.steps=0 train.eval_every=0 train.global_batch=32 train.micro_batch=32 train.log_every=1000
    task.epochs=3 optim.lr=5e-4 optim.warmup_steps=10 optim.min_lr=0 task.max_query_len=32 task.doc_stride=16
    ${FT_EXTRA:-})
for init in $INITS; do
  from=""; [ $init = pre ] && from="$WORK/pre"
  for t in pair source distance blank; do
    read -r typ fmt tr dv < <($PY -c "import json,sys; m=json.load(open(sys.argv[1]))['tasks'][sys.argv[2]]; \
print(m['type'], m['format'], m['train_file'], m['dev_file'])" "$WORK/tasks/manifest.json" $t)
    "$MHETRAIN" finetune "$MHE_SOURCE_DIR/configs/quickstart.yaml" "${DATA[@]}" "${SHAPE[@]}" "${FT[@]}" \
      task.type="$typ" task.format="$fmt" task.train_file="$WORK/tasks/$tr" task.dev_file="$WORK/tasks/$dv" \
      train.init_from="$from" train.out_dir="$WORK/$init-$t" >"$WORK/$init-$t.log" 2>&1 ||
      { cat "$WORK/$init-$t.log"; fail "fine-tuning $t from $init"; }
  done
done
$PY - "$WORK" <<'PY'
import json, os, sys
work = sys.argv[1]
# task: (pretrained must beat trivial by, pretrained must beat random by), on the primary metric;
# None: not asserted.  A negative margin bounds how far below trivial a task may land (the seed
# table above); a task without one must score no worse than trivial.
MARGINS = {"pair": (None, None), "source": (0.2, None), "distance": (-0.08, None), "blank": (None, None)}
bad = []
print(f"{'task':10s} {'metric':14s} {'pretrained':>10s} {'random':>10s} {'trivial':>10s}")
for t, (m_triv, m_rand) in MARGINS.items():
    p = json.load(open(f"{work}/pre-{t}/finetune_result.json"))
    rpath = f"{work}/rand-{t}/finetune_result.json"  # absent when INITS leaves random out
    rv = json.load(open(rpath))["value"] if os.path.exists(rpath) else float("nan")
    metric, pv = p["metric"], p["value"]
    tv = p["trivial"][metric]
    print(f"{t:10s} {metric:14s} {pv:10.4f} {rv:10.4f} {tv:10.4f}")
    if (m_triv is None or m_triv >= 0) and not pv >= tv - 1e-9:
        bad.append(f"{t}: pretrained {pv:.4f} below the trivial predictor's {tv:.4f}")
    if m_triv is not None and not pv > tv + m_triv:
        bad.append(f"{t}: pretrained {pv:.4f} does not beat trivial {tv:.4f} by {m_triv}")
    if m_rand is not None and os.path.exists(rpath) and not pv > rv + m_rand:
        bad.append(f"{t}: pretrained {pv:.4f} does not beat random init {rv:.4f} by {m_rand}")
if bad:
    sys.exit("FAIL: " + "; ".join(bad))
PY
echo PASS
