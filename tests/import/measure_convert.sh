#!/usr/bin/env bash
# The issue-15 table (not a ctest: minutes).  Run from a directory holding base.yaml (a tiny mha
# BERT experiment, train.out_dir runs/mha) and its corpus; trains it if needed, converts it to
# collab at D~ = n·d, n·d/2, n·d/4, gqa g = n/2 and mqa, evaluates each without retraining and
# after FT_STEPS steps of continued training (train.init_from, same schedule for all), and prints
# one line per model: name, then valid MLM loss / masked-token accuracy before and after.
#   MHETRAIN=build/mhetrain FT_STEPS=100 tests/import/measure_convert.sh
set -euo pipefail
bin="${MHETRAIN:?set MHETRAIN to the mhetrain executable}"
ft="${FT_STEPS:-100}"
nd=$(awk '/hidden:/ {for (i = 1; i <= NF; i++) if ($i == "hidden:") {gsub(/,/, "", $(i+1)); print $(i+1)}}' base.yaml)
[ -f runs/mha/checkpoints/latest ] || "$bin" train base.yaml >&2
ev() { "$bin" eval "$1" | python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print("%.4f %.4f" % (j["valid_loss"], j["valid_accuracy"]))'; }
variants=("mha||" "collab$nd|--to collab --collab-dim $nd|attention.type=collab attention.collab_dim=$nd"
  "collab$((nd / 2))|--to collab --collab-dim $((nd / 2))|attention.type=collab attention.collab_dim=$((nd / 2))"
  "collab$((nd / 4))|--to collab --collab-dim $((nd / 4))|attention.type=collab attention.collab_dim=$((nd / 4))"
  "gqa2|--to gqa --groups 2|attention.type=gqa attention.groups=2" "mqa|--to mqa|attention.type=mqa")
printf '%-10s %-16s %-16s\n' model "loss acc (0)" "loss acc (+$ft)"
for v in "${variants[@]}"; do
  IFS='|' read -r name conv over <<<"$v"
  src=runs/mha
  if [ -n "$conv" ]; then
    [ -f "runs/$name/checkpoints/latest" ] || "$bin" convert runs/mha $conv --out "runs/$name" >&2
    src="runs/$name"
  fi
  before=$(ev "$src")
  # shellcheck disable=SC2086
  [ -f "runs/${name}_ft/checkpoints/latest" ] || "$bin" train base.yaml $over train.init_from="$src" \
    train.steps="$ft" optim.warmup_steps=10 optim.lr=1e-3 train.eval_every=0 train.checkpoint_every=0 \
    train.out_dir="runs/${name}_ft" --resume none >&2
  after=$(ev "runs/${name}_ft")
  printf '%-10s %-16s %-16s\n' "$name" "$before" "$after"
done
