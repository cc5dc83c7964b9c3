#!/usr/bin/env bash
# The MHE paper's BERT-base comparison, planned (default) or run (--run): pretraining of every
# attention type, then fine-tuning of each pretrained model on every task with every seed, then
# the paper's table (launch/compare/README.md, "The MHE paper's table").
#
#   launch/reproduce.sh [--run] [-o OUTDIR] [--configs DIR] [--types "sha mha ..."] [--seeds N]
#                       [--tasks TASK ...] [--gpus N] [--gpus-per-node P] [--gpu a100|h100|h200]
#                       [--bench-bin PATH] [key=value ...]
#
# --configs  pretraining configs bert-base-<type>.yaml and task files finetune/*.yaml
#            (default configs/paper, the paper's settings with their sources)
# --types    attention types (default: the paper's sha mha el_att mqa skv mhe_add mhe_mul)
# --seeds N  fine-tuning seeds per (type, task), train.seed + k - 1 (default 3); pretraining is
#            one run per type
# --tasks    task YAMLs or a tests/finetune/make_tasks.py folder (repeatable; default
#            CONFIGS/finetune/*.yaml, whose data is read from benchmarks/ in the working directory)
# --gpus N, --gpus-per-node P, --gpu KIND   the machine the plan and the time estimate are for
#            (default 8 GPUs, 8 per node, h100): the estimate is `mhetrain bench --gpu KIND
#            --ranks P`'s cost-result line (a single node's all-reduce) per pretraining step
# --bench-bin  mhetrain built with the CUDA backend (-DMHE_CUDA=ON) for the estimate (default
#            MHETRAIN); a build without it gives the plan without times, saying so
# --run      execute the plan here: resumable (a finished run is skipped, a partial one resumes
#            from its checkpoint); MHE_LAUNCH replaces "mhetrain train" for pretraining, e.g.
#            MHE_LAUNCH="launch/mpirun.sh -n 8 -p 8"
# key=value  overrides for pretraining (fine-tuning inherits the pretrained config; its task
#            file's keys come after)
#
# Environment: MHETRAIN (default build/mhetrain).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
util=(/usr/bin/python3 "$here/launch/compare/compare_util.py")
ftu=(/usr/bin/python3 "$here/launch/compare/finetune_util.py")
die() { echo "reproduce: $*" >&2; exit 2; }

run=0 outdir=out/paper configs="$here/configs/paper" seeds=3 gpus=8 per_node="" gpu=h100 bench_bin=""
types=(sha mha el_att mqa skv mhe_add mhe_mul) tasks_in=() user=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    --run) run=1; shift ;;
    -o) [ $# -ge 2 ] || die "-o needs a folder"; outdir="$2"; shift 2 ;;
    --configs) [ -d "${2:-}" ] || die "--configs needs a folder"; configs="$(cd "$2" && pwd)"; shift 2 ;;
    --types) [ -n "${2:-}" ] || die "--types needs a list"; read -r -a types <<<"$2"; shift 2 ;;
    --seeds) [[ "${2:-}" =~ ^[0-9]+$ && "$2" -ge 1 && "$2" -le 100 ]] || die "--seeds needs an integer in [1, 100]"
             seeds="$2"; shift 2 ;;
    --tasks) [ -n "${2:-}" ] || die "--tasks needs a task .yaml or a make_tasks folder"; tasks_in+=("$2"); shift 2 ;;
    --gpus) [[ "${2:-}" =~ ^[0-9]+$ && "$2" -ge 1 ]] || die "--gpus needs a positive integer"; gpus="$2"; shift 2 ;;
    --gpus-per-node) [[ "${2:-}" =~ ^[0-9]+$ && "$2" -ge 1 ]] || die "--gpus-per-node needs a positive integer"
                     per_node="$2"; shift 2 ;;
    --gpu) [[ "${2:-}" =~ ^(a100|h100|h200)$ ]] || die "--gpu needs a100, h100 or h200"; gpu="$2"; shift 2 ;;
    --bench-bin) [ -x "${2:-}" ] || die "--bench-bin needs an mhetrain executable"; bench_bin="$2"; shift 2 ;;
    *=*) user+=("$1"); shift ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
bin="${MHETRAIN:-$here/build/mhetrain}"
[ -x "$bin" ] || die "$bin is not built (cmake --build build), or set MHETRAIN"
[ -n "$bench_bin" ] || bench_bin="$bin"
[ -n "$per_node" ] || per_node=$(( gpus < 8 ? gpus : 8 ))
[ $(( gpus % per_node )) = 0 ] || die "--gpus $gpus is not a multiple of --gpus-per-node $per_node"
nodes=$(( gpus / per_node ))
((${#tasks_in[@]})) || for f in "$configs"/finetune/*.yaml; do [ -e "$f" ] && tasks_in+=("$f"); done
((${#tasks_in[@]})) || die "no task files in $configs/finetune and no --tasks"
cfg_of() { echo "$configs/bert-base-${1//_/-}.yaml"; }
# Each type once: a repeated one would train the same run twice into one folder.
dup=$(printf '%s\n' "${types[@]}" | sort | uniq -d | tr '\n' ' ')
[ -z "$dup" ] || die "--types names ${dup% } more than once"
for t in "${types[@]}"; do [ -r "$(cfg_of "$t")" ] || die "no pretraining config $(cfg_of "$t") for type $t"; done
mkdir -p "$outdir"
outdir="$(cd "$outdir" && pwd)"
mapfile -t tasks < <("${ftu[@]}" tasks "$outdir" "${tasks_in[@]}")
((${#tasks[@]})) || die "the task list is empty"

hours() { awk -v s="$1" 'BEGIN { printf "%.1f h", s / 3600 }'; }
# cost KEY LINE: the value of KEY= in a cost-result line (empty when absent).
cost() { sed -n "s/.* $1=\([0-9.e+-]*\).*/\1/p" <<<" $2"; }

echo "reproduce: ${#types[@]} types (${types[*]}) x ${#tasks[@]} tasks (${tasks[*]}) x $seeds seeds into $outdir"
echo "reproduce: $((${#types[@]})) pretraining runs on $gpus x $gpu ($nodes node(s) x $per_node), then $(( ${#types[@]} * ${#tasks[@]} * seeds )) fine-tuning runs (one GPU each)"
echo
echo "1. pretraining, one run per type:"
total_s=0 estimated=1
for t in "${types[@]}"; do
  cfg="$(cfg_of "$t")" dir="$outdir/pretrain/$t"
  ov=(train.out_dir="$dir" "${user[@]+"${user[@]}"}")
  "$bin" train "$cfg" "${ov[@]}" --dry-run >"$outdir/pretrain-$t.resolved.yaml"
  read -r steps gb mb seq < <("${util[@]}" resolved "$outdir/pretrain-$t.resolved.yaml" steps train.global_batch \
    train.micro_batch data.seq_len)
  echo "  $t: $steps steps x $gb sequences x $seq tokens = $(( steps * gb * seq )) tokens"
  echo "    mpirun: launch/mpirun.sh -H hostfile -n $gpus -p $per_node $cfg ${ov[*]}"
  echo "    SLURM:  sbatch --nodes=$nodes --ntasks-per-node=$per_node --gpus-per-node=$per_node launch/slurm.sbatch $cfg ${ov[*]}"
  # The cost model's step: one micro-batch per GPU plus the optimizer and the all-reduce; an
  # optimizer step of global_batch needs gb / (mb * gpus) of them (an upper bound: the
  # all-reduce and the update run once per optimizer step, not per micro-batch).
  accum=$(( gb / (mb * gpus) ))
  if [ "$accum" -lt 1 ] || [ $(( gb % (mb * gpus) )) != 0 ]; then
    echo "    time: not estimated: global batch $gb is not a multiple of micro-batch $mb x $gpus GPUs (set train.micro_batch=)"
    estimated=0; continue
  fi
  line=$("$bench_bin" bench "$cfg" "${user[@]+"${user[@]}"}" runtime.device=cuda --gpu "$gpu" --ranks "$per_node" 2>&1 || true)
  res=$(grep '^cost-result:' <<<"$line" | tail -n 1 || true)
  if [ -z "$res" ]; then
    echo "    time: not estimated: $(grep -m1 -v '^$' <<<"$line" | cut -c1-200) (--bench-bin a -DMHE_CUDA=ON build)"
    estimated=0; continue
  fi
  chosen=""
  for key in expected_step_ms predicted_step_ms; do
    ms=$(cost "$key" "$res")
    [ -n "$ms" ] || continue
    s=$(awk -v ms="$ms" -v a="$accum" -v n="$steps" 'BEGIN { printf "%.0f", ms * a * n / 1000 }')
    echo "    time ($key=$ms, x $accum micro-batches per step): $(hours "$s") on $gpus x $gpu"
    [ -n "$chosen" ] || { chosen="$key"; total_s=$(( total_s + s )); }
  done
  [ -n "$chosen" ] || { echo "    time: not estimated: no step time in '$res'"; estimated=0; }
done
echo
echo "2. fine-tuning: every type x task x seed k = 1..$seeds (train.seed + k - 1), one GPU each (or mpirun -n 1):"
sk="/seed-K"; [ "$seeds" -gt 1 ] || sk=""
echo "    $bin finetune $outdir/TYPE$sk/ft-TASK/finetune.yaml train.init_from=$outdir/pretrain/TYPE train.out_dir=$outdir/TYPE$sk/ft-TASK train.seed=SEED"
echo "    (finetune.yaml = base: the pretrained run's resolved.yaml, then the task file; SLURM: sbatch --gpus=1 --wrap \"<that line>\")"
echo "3. the table: $outdir/results.md and paper_table.csv (per task and group: score, PRR vs mha, PEoP vs sha)"
if [ "$estimated" = 1 ]; then
  echo "reproduce: pretraining expected to take $(hours "$total_s") on $gpus x $gpu (the cost model's cost-result; expected_step_ms where printed, else predicted_step_ms; fine-tuning not included)"
else
  echo "reproduce: no time estimate for every type (see above)"
fi
[ "$run" = 1 ] || { echo "reproduce: a plan only; add --run to execute it"; exit 0; }

# --- run: pretraining (resumable), fine-tuning (skips finished runs), the table ---
if [ -n "${MHE_LAUNCH:-}" ]; then read -r -a launch <<<"$MHE_LAUNCH"; else launch=("$bin" train); fi
command -v "${launch[0]:-}" >/dev/null ||
  die "MHE_LAUNCH=$MHE_LAUNCH: expected a launcher command that runs like \"mhetrain train\" (e.g. \"launch/mpirun.sh -n 2\"); '${launch[0]:-}' is not a command"
for t in "${types[@]}"; do
  cfg="$(cfg_of "$t")" dir="$outdir/pretrain/$t"
  mkdir -p "$dir"
  read -r steps < <("${util[@]}" resolved "$outdir/pretrain-$t.resolved.yaml" steps)
  if [ -f "$dir/resolved.yaml" ] && ! diff -q <(grep -v '^#' "$dir/resolved.yaml") \
      <(grep -v '^#' "$outdir/pretrain-$t.resolved.yaml") >/dev/null; then
    die "$dir was pretrained under another config; use another -o or remove it"
  fi
  cp "$outdir/pretrain-$t.resolved.yaml" "$dir/resolved.yaml"
  "$bin" params "$cfg" "${user[@]+"${user[@]}"}" >"$dir/params.txt"
  if "${util[@]}" complete "$dir" "$steps"; then echo "reproduce: $t pretrained, skipped" >&2; continue; fi
  echo "reproduce: pretraining $t into $dir" >&2
  "${launch[@]}" "$cfg" train.out_dir="$dir" "${user[@]+"${user[@]}"}" 2>>"$dir/train.log" \
    || die "pretraining $t failed (status $?; log $dir/train.log); run the same command to resume"
  "${util[@]}" complete "$dir" "$steps" || die "pretraining $t ended without its final evaluation ($dir)"
done
read -r seed0 < <("${util[@]}" resolved "$outdir/pretrain-${types[0]}.resolved.yaml" train.seed)
for t in "${types[@]}"; do
  for ((k = 1; k <= seeds; k++)); do
    home="$outdir/$t/seed-$k"
    [ "$seeds" -gt 1 ] || home="$outdir/$t"   # finetune_util.py's layout
    mkdir -p "$home"
    cp "$outdir/pretrain/$t/params.txt" "$home/params.txt"
    for task in "${tasks[@]}"; do
      ft="$home/ft-$task"
      if "${ftu[@]}" done "$ft"; then echo "reproduce: $t seed $k $task: done, skipped" >&2; continue; fi
      mkdir -p "$ft"
      { echo "# generated by reproduce.sh: the pretrained run's config, then the task's"
        echo "base: $outdir/pretrain/$t/resolved.yaml"
        cat "$outdir/tasks/$task.yaml"; } >"$ft/finetune.yaml"
      echo "reproduce: $t seed $k: fine-tuning on $task" >&2
      "$bin" finetune "$ft/finetune.yaml" train.init_from="$outdir/pretrain/$t" train.out_dir="$ft" \
        train.seed=$((seed0 + k - 1)) >>"$ft/finetune.log" 2>&1 \
        || die "fine-tuning $t seed $k $task failed (status $?; log $ft/finetune.log); run the same command to resume"
      "${ftu[@]}" done "$ft" || die "fine-tuning $t seed $k $task ended without a result ($ft)"
    done
  done
done
: >"$outdir/results.md"
"${ftu[@]}" summarise "$outdir" "$seeds" "$(IFS=,; echo "${tasks[*]}")" "${types[@]}"
echo "reproduce: wrote $outdir/results.md and paper_table.csv" >&2
