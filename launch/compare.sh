#!/usr/bin/env bash
# Trains one base experiment once per attention type under identical conditions (data, seed,
# token budget, validation split) and tabulates what each type costs and retains.
#
#   launch/compare.sh BASE.yaml [TYPE ...] [-o OUTDIR] [--tokens N] [--seeds N] [--jobs N]
#                     [--stop-after N] [--finetune TASK ...] [--finetune-baseline] [key=value ...]
#
# TYPE       attention types (default: every type of `mhetrain info --attention-types`); gqa gets
#            groups = heads/2 and collab D~ = hidden/2 unless attention.groups= / collab_dim= are
#            given; the other types' keys keep their defaults (mla: d_c = 4d)
# -o         output folder (default: out/compare-<base name>); each type trains into OUTDIR/TYPE/
# --tokens   training tokens per type (default: BASE's own budget, e.g. the tiny recipe's 2,000
#            steps of configs/tiny-bert.yaml); a train.steps= or train.tokens= override replaces it
# --seeds N  train every type N times, run k with train.seed and data.shuffle_seed raised by k-1
#            (initialisation, masking, dropout, data order); the table gives mean ± standard
#            deviation and whether each type's gap to mha exceeds the seed noise (default 1)
# --jobs N   runs trained at once (default: one per core for runtime.device cpu without
#            MHE_LAUNCH, else 1), each with runtime.threads = cores / N unless runtime.threads= is
#            given: on small models one thread per run trains ~1.4x more tokens per core-second
#            than two threads on one run; with N > 1 each run's progress goes to its train.log
# --stop-after N   stop every type after step N with a checkpoint (rerun to continue)
# --finetune TASK  then fine-tune every pretrained run on TASK (repeatable): a task YAML (its
#            task:, optim:, train: sections; the run's config is its base) or a folder written by
#            tests/finetune/make_tasks.py (all its tasks, default budget); adds per-task scores,
#            PRR per task and the average to the table (finetune.csv)
# --finetune-baseline  also fine-tune the first type from random weights (row random-init)
# key=value  overrides for every type (after the script's own, so they win)
#
# Writes OUTDIR/results.md, results.csv and curves.png (launch/compare/README.md explains every
# column).  Rerunning the same command skips the types that finished and resumes a partly
# trained one from its newest checkpoint; a changed config (budget included) needs a new -o.
# Environment: MHETRAIN (default build/mhetrain); MHE_LAUNCH replaces "mhetrain train" as the
# launcher, e.g. MHE_LAUNCH="launch/mpirun.sh -n 2 -p 2".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
util=(/usr/bin/python3 "$here/launch/compare/compare_util.py")
die() { echo "compare: $*" >&2; exit 2; }

base="" outdir="" tokens="" stop_after="" seeds=1 jobs="" types=() user=() finetune=() ft_baseline=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    -o) [ $# -ge 2 ] || die "-o needs a folder"; outdir="$2"; shift 2 ;;
    --tokens) [[ "${2:-}" =~ ^[0-9]+$ && "$2" -gt 0 ]] || die "--tokens needs a positive integer"
              tokens="$2"; shift 2 ;;
    --seeds) [[ "${2:-}" =~ ^[0-9]+$ && "$2" -gt 0 && "$2" -le 100 ]] || die "--seeds needs an integer in [1, 100]"
             seeds="$2"; shift 2 ;;
    --jobs) [[ "${2:-}" =~ ^[0-9]+$ && "$2" -gt 0 && "$2" -le 1024 ]] || die "--jobs needs an integer in [1, 1024]"
            jobs="$2"; shift 2 ;;
    --finetune) [ $# -ge 2 ] || die "--finetune needs a task .yaml or a make_tasks folder"
                finetune+=("$2"); shift 2 ;;
    --finetune-baseline) ft_baseline=1; shift ;;
    --stop-after) [[ "${2:-}" =~ ^[0-9]+$ && "$2" -gt 0 ]] || die "--stop-after needs a positive integer"
                  stop_after="$2"; shift 2 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *=*) user+=("$1"); shift ;;
    *) if [ -z "$base" ]; then base="$1"; else types+=("$1"); fi; shift ;;
  esac
done
[ -n "$base" ] || die "expected BASE.yaml (see --help)"
[ -r "$base" ] || die "cannot read $base"
[ -n "$outdir" ] || outdir="out/compare-$(basename "$base" .yaml)"
bin="${MHETRAIN:-$here/build/mhetrain}"
[ -x "$bin" ] || die "$bin is not built (cmake --build build), or set MHETRAIN"
mapfile -t known < <("$bin" info --attention-types | cut -f1)
((${#known[@]})) || die "$bin info --attention-types listed no attention type"
((${#types[@]})) || types=("${known[@]}")
if [ -n "${MHE_LAUNCH:-}" ]; then read -r -a launch <<<"$MHE_LAUNCH"; else launch=("$bin" train); fi
command -v "${launch[0]:-}" >/dev/null ||
  die "MHE_LAUNCH=$MHE_LAUNCH: expected a launcher command that runs like \"mhetrain train\" (e.g. \"launch/mpirun.sh -n 2\"); '${launch[0]:-}' is not a command"
for t in "${types[@]}"; do
  [[ " ${known[*]} " == *" $t "* ]] || die "unknown attention type '$t' (known: ${known[*]})"
done
dup=$(printf '%s\n' "${types[@]}" | sort | uniq -d | tr '\n' ' ')
[ -z "$dup" ] || die "attention type ${dup% } named more than once"

has_user() { local k; for k in "${user[@]+"${user[@]}"}"; do [[ "$k" == "$1="* ]] && return 0; done; return 1; }
# The same budget for every type.  steps=0 lets a token budget replace the base's step count.
common=()
if ! has_user train.steps && ! has_user train.tokens; then
  [ -z "$tokens" ] || common+=(train.steps=0 train.tokens="$tokens")
elif has_user train.tokens && ! has_user train.steps; then common+=(train.steps=0); fi
mkdir -p "$outdir"
"$bin" train "$base" "${common[@]+"${common[@]}"}" "${user[@]+"${user[@]}"}" --dry-run >"$outdir/base.resolved.yaml"
read -r steps heads hidden seed0 shuffle0 device < <("${util[@]}" resolved "$outdir/base.resolved.yaml" steps heads \
  hidden train.seed data.shuffle_seed runtime.device)
if [ "$seeds" -gt 1 ] && { has_user train.seed || has_user data.shuffle_seed; }; then
  die "--seeds sets train.seed and data.shuffle_seed itself; give the first seeds in BASE.yaml instead"
fi
cores=$(nproc)
if [ -z "$jobs" ]; then
  jobs=1; [ "$device" = cpu ] && [ -z "${MHE_LAUNCH:-}" ] && jobs=$cores
fi
runs=$(( seeds * ${#types[@]} ))
jobs_max=$jobs
[ "$jobs" -le "$runs" ] || jobs=$runs
if [ "$jobs" -gt 1 ] && ! has_user runtime.threads; then common+=(runtime.threads=$(( cores >= jobs ? cores / jobs : 1 ))); fi
# Several points on the validation curve, and a checkpoint at each so an interruption loses little.
every=$(( steps >= 5 ? steps / 5 : 1 ))
has_user train.eval_every || common+=(train.eval_every="$every")
has_user train.checkpoint_every || common+=(train.checkpoint_every="$every")

stop=0 follower=""
declare -A job_label=() job_dir=() job_done=() job_log=()
# Ctrl-C reaches the trainers too (same process group); a TERM sent to this script alone is
# passed on.  Either way each trainer checkpoints at its next step and no new run starts.
on_signal() {
  stop=1
  if [ "$1" = TERM ]; then
    local c p
    for c in "${!job_label[@]}"; do
      for p in $(pgrep -P "$c" || true); do kill -TERM "$p" 2>/dev/null || true; done
    done
  fi
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

failed=() incomplete=() planned=()
# in_plan_order LABEL...: the labels in the order the plan lists them, whatever order parallel
# jobs ended in, so the report reads the same on every run.
in_plan_order() {
  local l x out=()
  for l in "${planned[@]}"; do for x in "$@"; do [ "$x" = "$l" ] && out+=("$l"); done; done
  echo "${out[*]}"
}
# start_job LABEL DIR LOG STEPS -- COMMAND...: run COMMAND in the background, output appended
# to LOG; afterwards DIR must hold a finished pretraining run of STEPS steps, or with STEPS
# "ft" a finished fine-tuning run.
start_job() {
  local label="$1" dir="$2" log="$3" check="$4"; shift 5
  local from=$(( $(stat -c %s "$log" 2>/dev/null || echo 0) + 1 ))
  "$@" >>"$log" 2>&1 &
  local pid=$!
  job_label[$pid]="$label" job_dir[$pid]="$dir" job_done[$pid]="$check" job_log[$pid]="$log"
  if [ "$jobs" = 1 ]; then
    tail -c +"$from" --pid="$pid" -f "$log" >&2 &
    follower=$!
  fi
}
# finish_one: wait for one running job and record how it ended.
finish_one() {
  local pid="" status=0
  while :; do
    pid=""
    wait -n -p pid "${!job_label[@]}" && status=0 || status=$?
    # wait returns >128 with no pid when a trapped signal interrupts it; the jobs still run.
    [ -n "${pid:-}" ] && break
  done
  local label="${job_label[$pid]}" dir="${job_dir[$pid]}" check="${job_done[$pid]}" log="${job_log[$pid]}"
  unset "job_label[$pid]" "job_dir[$pid]" "job_done[$pid]" "job_log[$pid]"
  if [ -n "$follower" ]; then wait "$follower" || true; follower=""; fi
  # A trainer stopped by the signal we passed on checkpoints and ends with 128 + INT/TERM: an
  # interrupted run (rerun to continue), not a failed one.
  if [ "$stop" = 1 ] && { [ "$status" = 130 ] || [ "$status" = 143 ]; }; then
    incomplete+=("$label")
    return 0
  fi
  if [ "$status" != 0 ]; then
    [ "$jobs" = 1 ] || tail -5 "$log" >&2
    failed+=("$label (status $status; log $log)")
    return 0
  fi
  local ok=0
  if [ "$check" = ft ]; then "${ftu[@]}" done "$dir" || ok=$?; else "${util[@]}" complete "$dir" "$check" || ok=$?; fi
  if [ "$ok" = 0 ]; then
    [ "$jobs" = 1 ] || echo "compare: $label: finished" >&2
  else
    incomplete+=("$label")
  fi
}
# wait_slot: block until fewer than $jobs jobs run; status 1 when no new job may start.
wait_slot() {
  while [ "${#job_label[@]}" -ge "$jobs" ]; do finish_one; done
  [ "$stop" = 0 ] && [ "${#failed[@]}" = 0 ]
}
drain() {
  while [ "${#job_label[@]}" -gt 0 ]; do finish_one; done
  if [ "${#failed[@]}" -gt 0 ]; then
    local f; for f in "${failed[@]}"; do echo "compare: $f: $1 failed" >&2; done
    exit 1
  fi
  if [ "$stop" = 1 ]; then echo "compare: interrupted; run the same command to resume" >&2; exit 130; fi
}
# A rerun may use another --jobs, which changes only runtime.threads.
same_config() {
  diff <(grep -v -e '^#' -e '^  threads:' "$1") <(grep -v -e '^#' -e '^  threads:' "$2") >"$3"
}

# Seed-major order: after the first pass every type has one finished run.
for ((k = 1; k <= seeds; k++)); do
for t in "${types[@]}"; do
  dir="$outdir/$t" label="$t"
  knobs=(attention.type="$t")
  if [ "$seeds" -gt 1 ]; then
    dir="$outdir/$t/seed-$k" label="$t/seed-$k"
    knobs+=(train.seed=$((seed0 + k - 1)) data.shuffle_seed=$((shuffle0 + k - 1)))
  fi
  planned+=("$label")
  [ "$t" = gqa ] && ! has_user attention.groups && knobs+=(attention.groups=$(( heads >= 2 ? heads / 2 : 1 )))
  [ "$t" = collab ] && ! has_user attention.collab_dim && knobs+=(attention.collab_dim=$(( hidden >= 2 ? hidden / 2 : 1 )))
  ov=("${common[@]}" "${knobs[@]}" "${user[@]+"${user[@]}"}" train.out_dir="$dir")
  mkdir -p "$dir"
  "$bin" train "$base" "${ov[@]}" --dry-run >"$dir/resolved.new.yaml"
  # A run is only continued or reused under the config it started with: anything else would
  # compare types trained under different conditions.
  if [ -f "$dir/resolved.yaml" ] && ! same_config "$dir/resolved.yaml" "$dir/resolved.new.yaml" "$dir/config.diff"; then
    cat "$dir/config.diff" >&2
    die "$dir was trained with another config (diff above: < then, > now); use another -o or remove $dir"
  fi
  mv "$dir/resolved.new.yaml" "$dir/resolved.yaml"
  rm -f "$dir/config.diff"
  "$bin" params "$base" "${ov[@]}" >"$dir/params.txt"
  read -r tsteps < <("${util[@]}" resolved "$dir/resolved.yaml" steps)
  if "${util[@]}" complete "$dir" "$tsteps"; then
    echo "compare: $label: done ($tsteps steps), skipped" >&2
    continue
  fi
  wait_slot || break 2
  extra=(); [ -n "$stop_after" ] && extra=(--stop-after "$stop_after")
  msg=""; [ "$jobs" = 1 ] || msg=", log $dir/train.log"
  echo "compare: $label: training into $dir ($tsteps steps$msg)" >&2
  # Peak RSS of the launched process tree (largest process), one line per (re)start.  The log
  # is followed by tail rather than tee so that the trainer is the direct child of time.
  start_job "$label" "$dir" "$dir/train.log" "$tsteps" -- \
    /usr/bin/time -f %M -a -o "$dir/peak_rss_kb.txt" "${launch[@]}" "$base" "${ov[@]}" "${extra[@]+"${extra[@]}"}"
done
done
drain training

# Not finished after --stop-after is what was asked for (exit 0); otherwise a run that ended
# without its final evaluation and checkpoint leaves nothing to compare: exit 1.
if ((${#incomplete[@]})); then
  echo "compare: not finished: $(in_plan_order "${incomplete[@]}"); run the same command (without --stop-after) to continue" >&2
  if [ -z "$stop_after" ]; then
    echo "compare: no table: the runs above ended without their final evaluation (see their train.log)" >&2
    exit 1
  fi
  exit 0
fi
"${util[@]}" summarise "$outdir" --seeds "$seeds" "${types[@]}"
echo "compare: wrote $outdir/results.md, results.csv, curves.png" >&2
((${#finetune[@]})) || exit 0

# Fine-tuning: every pretrained run (type, seed) on every task, with that run's seed.
ftu=(/usr/bin/python3 "$here/launch/compare/finetune_util.py")
mapfile -t tasks < <("${ftu[@]}" tasks "$outdir" "${finetune[@]}")
((${#tasks[@]})) || die "--finetune named no task"
ftypes=("${types[@]}")
[ "$ft_baseline" = 1 ] && ftypes+=(random-init)
runs=$(( seeds * ${#ftypes[@]} * ${#tasks[@]} ))
jobs=$jobs_max; [ "$jobs" -le "$runs" ] || jobs=$runs
for ((k = 1; k <= seeds; k++)); do
for t in "${ftypes[@]}"; do
  src="$t"; [ "$t" = random-init ] && src="${types[0]}"
  pre="$outdir/$src" home="$outdir/$t"
  if [ "$seeds" -gt 1 ]; then pre="$pre/seed-$k" home="$home/seed-$k"; fi
  init="$pre"; [ "$t" = random-init ] && init=""
  for task in "${tasks[@]}"; do
    ft="$home/ft-$task"
    planned+=("$t seed $k $task")
    if "${ftu[@]}" done "$ft"; then echo "compare: $t seed $k $task: done, skipped" >&2; continue; fi
    mkdir -p "$ft"
    { echo "# generated by compare.sh: the pretrained run's config, then the task's"
      echo "base: $(realpath "$pre/resolved.yaml")"
      cat "$outdir/tasks/$task.yaml"; } >"$ft/finetune.yaml"
    wait_slot || break 3
    echo "compare: $t seed $k: fine-tuning on $task into $ft" >&2
    thr=(); [ "$jobs" -gt 1 ] && ! has_user runtime.threads && thr=(runtime.threads=$(( cores >= jobs ? cores / jobs : 1 )))
    start_job "$t seed $k $task" "$ft" "$ft/finetune.log" ft -- \
      "$bin" finetune "$ft/finetune.yaml" train.init_from="$init" train.out_dir="$ft" \
      train.seed=$((seed0 + k - 1)) "${thr[@]+"${thr[@]}"}"
  done
done
done
drain fine-tuning
if ((${#incomplete[@]})); then die "fine-tuning ended without its final evaluation: $(in_plan_order "${incomplete[@]}")"; fi
"${ftu[@]}" summarise "$outdir" "$seeds" "$(IFS=,; echo "${tasks[*]}")" "${ftypes[@]}"
echo "compare: added the fine-tuning table to $outdir/results.md (finetune.csv)" >&2
