#!/usr/bin/env bash
# train.init_from starts a new run from another run's weights (not its optimizer or position):
# with a negligible learning rate the new run evaluates like the checkpoint it started from,
# and it counts its own steps from 0.
source "$(dirname "$0")/lib.sh"
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/a" 2>"$WORK/a.log" || { cat "$WORK/a.log"; fail "run a"; }
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/b" train.init_from="$WORK/a" train.steps=1 \
  optim.lr=1e-12 optim.min_lr=0 optim.warmup_steps=0 2>"$WORK/b.log" || { cat "$WORK/b.log"; fail "run b"; }
grep -q "initialised weights from $WORK/a/checkpoints/step_00000008" "$WORK/b.log" || { cat "$WORK/b.log"; fail "no init message"; }
grep -q "resumed from" "$WORK/b.log" && fail "init_from must not resume"
$PY - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def last_valid(run):
    return [r for r in map(json.loads, open(f"{work}/{run}/metrics.jsonl")) if r.get("split") == "valid"][-1]
a, b = last_valid("a"), last_valid("b")
err = abs(a["valid_loss"] - b["valid_loss"]) / a["valid_loss"]
print(f"valid loss: checkpoint {a['valid_loss']:.6f}, new run {b['valid_loss']:.6f} (relative {err:.2e})")
assert b["step"] == 1, b
assert err <= 1e-5, "the new run did not start from the checkpoint's weights"
PY
# Same tensor shapes, another model: mhe_mul -> mhe_add, another activation or ln_eps (was
# accepted: only shapes were compared).  Exit 2 naming the key and both values.
for change in "attention.type=mhe_add|attention.type mhe_mul -> mhe_add" \
              "model.activation=gelu_tanh|model.activation gelu -> gelu_tanh" \
              "model.ln_eps=1e-5|model.ln_eps 1e-12 -> 1e-05"; do
  kv=${change%%|*} want=${change#*|}
  set +e
  "$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/c" train.init_from="$WORK/a" train.steps=1 "$kv" \
    2>"$WORK/c.log" >/dev/null
  status=$?
  set -e
  [ "$status" = 2 ] || { cat "$WORK/c.log"; fail "init_from with $kv: exit $status, expected 2"; }
  grep -q "train.init_from: the checkpoint's model differs from this run's ($want; checkpoint -> this run)" \
    "$WORK/c.log" || { cat "$WORK/c.log"; fail "init_from with $kv: message"; }
done
# Dropout and the initialisation are not the architecture: accepted.
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/d" train.init_from="$WORK/a" train.steps=1 \
  model.dropout=0 attention.embed_std=0.1 2>"$WORK/d.log" >/dev/null || { cat "$WORK/d.log"; fail "dropout change refused"; }
echo PASS
