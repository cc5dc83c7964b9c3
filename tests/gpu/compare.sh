#!/usr/bin/env bash
# Trains one BERT once per attention type for the same number of seconds and scores each on the
# validation split: issue 47's first comparison at GPU scale (check.sh's `compare` group, BERT-small
# on the bundle's corpus), and on the CPU with a tiny model (the ctest test_gpu_compare_cpu).
#
#   compare.sh MHETRAIN CONFIG CORPUS OUTDIR [key=value ...]
#
# CORPUS   a folder as bundle.sh ships it: shards/ (train_* and valid_*, from `mhetrain prepare`)
#          and vocab.txt (the WordPiece vocabulary the shards were made with)
# OUTDIR   each type trains into OUTDIR/TYPE/ (replaced): train.log, the checkpoint, eval.json
# key=value  overrides for every type, after the script's own (so they win)
# Environment:
#   MHE_COMPARE_VARIANTS  the attention types (default "mha mhe_mul sha")
#   MHE_COMPARE_SECONDS   seconds of training per type (default 40): train.time_limit_s, counted
#                         from the first step, so set-up and the final evaluation are not in it
#   MHE_COMPARE_DEVICE    cuda (default) or cpu; the precision is bf16 on both
#
# Prints per type one line
#   compare-result: attention=T params=N steps=S train_s=X tokens=N tokens_per_s=R valid_loss=L
#                   valid_accuracy=A [untrained_loss=L best_valid_loss=L best_step=S]
# tokens_per_s is the training tokens over train_s, the seconds from the first step to the stop
# (evaluations during training included); valid_loss is `mhetrain eval` of the stopped run on
# the whole validation split; untrained_loss and best_*, when an override train.eval_every=N asks
# for evaluations during training (eval_batches 0: the whole split), are step 0's loss and the
# lowest one with its step.  Then a side-by-side table.  Exit status 0 when every type
# trained and scored a finite loss; 1 when one did not (the others still run); 2 for bad input.
set -uo pipefail
die() { echo "compare.sh: $*" >&2; exit 2; }
[ $# -ge 4 ] || die "usage: compare.sh MHETRAIN CONFIG CORPUS OUTDIR [key=value ...]"
mhetrain="$1" config="$2" corpus="$3" out="$4"
shift 4
for kv in "$@"; do [[ "$kv" == *=* ]] || die "'$kv' is not a key=value override"; done
[ -x "$mhetrain" ] || die "$mhetrain: not an executable mhetrain"
[ -f "$config" ] || die "$config: no such config"
ls "$corpus"/shards/train_*.idx >/dev/null 2>&1 && ls "$corpus"/shards/valid_*.idx >/dev/null 2>&1 ||
  die "$corpus/shards: no train_* and valid_* shards (a corpus from mhetrain prepare, as bundle.sh ships it)"
[ -f "$corpus/vocab.txt" ] || die "$corpus/vocab.txt: no such vocabulary"
variants=(${MHE_COMPARE_VARIANTS:-mha mhe_mul sha})
[ ${#variants[@]} -gt 0 ] || die "MHE_COMPARE_VARIANTS names no attention type"
seconds="${MHE_COMPARE_SECONDS:-40}"
[[ "$seconds" =~ ^[0-9]+([.][0-9]+)?$ ]] && awk -v s="$seconds" 'BEGIN{exit !(s > 0)}' ||
  die "MHE_COMPARE_SECONDS '$seconds' is not a positive number of seconds"
device="${MHE_COMPARE_DEVICE:-cuda}"
[ "$device" = cuda ] || [ "$device" = cpu ] || die "MHE_COMPARE_DEVICE '$device' is neither cuda nor cpu"
# Every type is checked before the first one trains: a typo must not cost the others' minutes.
types="$("$mhetrain" info --attention-types 2>/dev/null)" || die "$mhetrain info --attention-types failed"
known=" $(cut -f1 <<<"$types" | tr '\n' ' ') "
for v in "${variants[@]}"; do
  [[ "$known" == *" $v "* ]] || die "unknown attention type '$v' (mhetrain info --attention-types:$known)"
done
mkdir -p "$out" || die "$out: cannot make the output folder"
out="$(cd "$out" && pwd)"
corpus="$(cd "$corpus" && pwd)"

# The number of steps is what the time limit leaves (train.steps only bounds it), so the
# schedule is constant after warm-up: every type sees the same learning rate at the same step,
# however many steps it reaches.  No checkpoints but the one at the stop; no evaluation unless an
# override asks (it would count against the seconds).
common=(runtime.device="$device" runtime.precision=bf16 "data.train=[$corpus/shards/train]"
        "data.valid=[$corpus/shards/valid]" data.tokenizer="$corpus/vocab.txt" data.tokenizer_kind=wordpiece
        train.steps=100000000 train.time_limit_s="$seconds" optim.schedule=constant train.checkpoint_every=0
        train.keep_last=1 train.eval_every=0)

# yaml_value FILE SECTION KEY: a value of the two-level YAML mhetrain writes (a checkpoint's config.yaml).
yaml_value() {
  awk -v s="$2:" -v k="$3:" '/^[^ ]/ {sec = $1} sec == s && $1 == k {print $2; exit}' "$1"
}

failed=0 rows=()
for v in "${variants[@]}"; do
  dir="$out/$v"
  rm -rf "$dir"
  mkdir -p "$dir"
  "$mhetrain" train "$config" attention.type="$v" "${common[@]}" train.out_dir="$dir/run" "$@" >"$dir/train.log" 2>&1
  rc=$?
  stop="$(grep -E '^stopping after step [0-9]+ \(train.time_limit_s ' "$dir/train.log" | tail -1)"
  if [ $rc -ne 0 ] || [ -z "$stop" ]; then
    tail -n 5 "$dir/train.log"
    why="exit status $rc"
    [ $rc -eq 0 ] && why="it ended before its time limit (train.steps too few?)"
    echo "compare.sh: $v: mhetrain train failed: $why; log $dir/train.log" >&2
    echo "compare-result: attention=$v status=failed"
    failed=1
    continue
  fi
  steps="$(sed -E 's/^stopping after step ([0-9]+) .*/\1/' <<<"$stop")"
  train_s="$(sed -E 's/.*: ([0-9.]+) s of training.*/\1/' <<<"$stop")"
  params="$(sed -nE 's/^model: .*, ([0-9]+) parameters .*/\1/p' "$dir/train.log" | head -1)"
  ckpt_cfg="$dir/run/checkpoints/$(cat "$dir/run/checkpoints/latest")/config.yaml"
  batch="$(yaml_value "$ckpt_cfg" train global_batch)" seq="$(yaml_value "$ckpt_cfg" data seq_len)"
  vocab="$(yaml_value "$ckpt_cfg" model vocab_size)"
  tokens=$((steps * batch * seq))
  # Whole-split evaluations during training, when asked for: step 0's (the untrained model),
  # and the lowest loss and its step.
  best="$(sed -nE 's/^eval step ([0-9]+) \(whole split\): valid loss ([0-9.eE+-]+) .*/\1 \2/p' "$dir/train.log" |
    awk '$1 == 0 {u = sprintf(" untrained_loss=%s", $2)} NR == 1 || $2 < b {b = $2; s = $1}
         END {if (NR) printf "%s best_valid_loss=%s best_step=%s", u, b, s}')"
  # The checkpoint scored on the validation split (every sample once, fixed masks: the same
  # positions for every type).
  "$mhetrain" eval "$dir/run" runtime.device="$device" >"$dir/eval.json" 2>"$dir/eval.log"
  rc=$?
  loss="$(sed -nE 's/.*"valid_loss": ([^,}]+).*/\1/p' "$dir/eval.json")"
  acc="$(sed -nE 's/.*"valid_accuracy": ([^,}]+).*/\1/p' "$dir/eval.json")"
  # A non-finite loss is JSON null (and exit status 1): only a number passes.
  if [ $rc -ne 0 ] || ! [[ "$loss" =~ ^[0-9.eE+-]+$ ]]; then
    cat "$dir/eval.log"
    echo "compare.sh: $v: mhetrain eval failed (exit status $rc, valid loss '$loss'); log $dir/eval.log" >&2
    echo "compare-result: attention=$v status=failed steps=$steps"
    failed=1
    continue
  fi
  tps="$(awk -v t="$tokens" -v s="$train_s" 'BEGIN{printf "%.0f", (s > 0 ? t / s : 0)}')"
  echo "compare-result: attention=$v params=$params steps=$steps train_s=$train_s tokens=$tokens tokens_per_s=$tps" \
    "valid_loss=$loss valid_accuracy=$acc$best"
  rows+=("$v|$params|$steps|$train_s|$tps|$loss|$acc|$(sed -E 's/.*best_valid_loss=([^ ]+) best_step=(.*)/\1 (step \2)/' <<<"${best:- -}")")
done

echo
# The reference an untrained model's loss sits near (uniform over the vocabulary), once known.
untrained_ref=""
[ -n "${vocab:-}" ] && untrained_ref=", ${vocab}-token vocabulary: an untrained model scores about ln(vocab) = $(
  awk -v v="$vocab" 'BEGIN{printf "%.2f", log(v)}')"
echo "Attention types compared on $device, $seconds s of training each ($(basename "$config")$untrained_ref)"
echo
echo "| attention | parameters | steps | train s | tokens/s | valid loss | masked acc | best valid loss |"
echo "|---|---|---|---|---|---|---|---|"
for r in "${rows[@]}"; do echo "| ${r//|/ | } |"; done
exit $failed
