#!/usr/bin/env bash
# Launches data-parallel training with Open MPI on one or many hosts.
#
#   launch/mpirun.sh [-n RANKS] [-H HOSTFILE] [-p RANKS_PER_NODE] [-t THREADS_PER_RANK] \
#                    CONFIG.yaml [key=value ...]
#
# -n    total ranks (default: ranks per node x hosts in the hostfile, or 2 on one host)
# -H    Open MPI hostfile ("host slots=N" per line; see launch/hostfile.example)
# -p    ranks per node (default: one per GPU when runtime.device is cuda, else 1)
# -t    OpenMP threads per rank (default: cores of a node / ranks per node)
# Extra mpirun options go in MHE_MPIRUN_ARGS, e.g. MHE_MPIRUN_ARGS="--mca btl tcp,self".
# NCCL_*, UCX_*, OMP_*, CUDA_* and MHE_* variables are passed through to every rank.
# SIGTERM, SIGINT or SIGHUP sent to this script reaches the ranks (not mpirun, which would abort
# the job with status 1): every rank checkpoints at its next step and the script exits
# 128 + the signal (143 for TERM), as a single-process `mhetrain train` does.
set -euo pipefail
case "${1:-}" in --help) sed -n '2,16p' "$0"; exit 0 ;; esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ranks="" hostfile="" per_node="" threads=""
while getopts "n:H:p:t:h" opt; do
  case "$opt" in
    n) ranks="$OPTARG" ;; H) hostfile="$OPTARG" ;; p) per_node="$OPTARG" ;; t) threads="$OPTARG" ;;
    h) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "launch/mpirun.sh: unknown option (see -h)" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
die() { echo "launch/mpirun.sh: $*" >&2; exit 2; }
# Every argument is checked before anything runs: a 0 or a word would otherwise reach bash's
# arithmetic (division by zero, "unbound variable") or mpirun (OMP_NUM_THREADS=0).
count() {  # count FLAG VALUE MAX: a whole number in [1, MAX]
  [[ "$2" =~ ^[0-9]+$ ]] && [ "${#2}" -le 7 ] && [ "$2" -ge 1 ] && [ "$2" -le "$3" ] ||
    die "$1 expects a whole number in [1, $3], got '$2'"
}
[ -z "$ranks" ] || count -n "$ranks" 1000000
[ -z "$per_node" ] || count -p "$per_node" 4096
[ -z "$threads" ] || count -t "$threads" 4096
[ $# -ge 1 ] || die "expected CONFIG.yaml (see -h)"
[ -f "$1" ] && [ -r "$1" ] || die "cannot read the config $1"

bin="${MHETRAIN:-$here/build/mhetrain}"
[ -x "$bin" ] || { echo "launch/mpirun.sh: $bin not built (run tests/run.sh or cmake --build build)" >&2; exit 2; }
cores=$(nproc)
nodes=1
if [ -n "$hostfile" ]; then
  [ -r "$hostfile" ] || { echo "launch/mpirun.sh: cannot read hostfile $hostfile" >&2; exit 2; }
  nodes=$(grep -cvE '^\s*(#|$)' "$hostfile" || true)
  [ "$nodes" -ge 1 ] || die "hostfile $hostfile names no host"
fi
if [ -z "$per_node" ]; then
  per_node=1
  if grep -qE '^\s*device:\s*cuda' "$1" 2>/dev/null && command -v nvidia-smi >/dev/null; then
    per_node=$(nvidia-smi -L | wc -l)
    [ "$per_node" -ge 1 ] || per_node=1
  fi
  # One host: every rank runs here (-n, or 2 by default).
  if [ -z "$hostfile" ]; then per_node="${ranks:-2}"; fi
fi
[ -n "$ranks" ] || ranks=$((per_node * nodes))
[ -n "$threads" ] || threads=$(( cores / per_node > 0 ? cores / per_node : 1 ))

args=(-np "$ranks" --map-by "ppr:${per_node}:node:PE=${threads}" --bind-to core -x OMP_NUM_THREADS="$threads")
[ -n "$hostfile" ] && args+=(--hostfile "$hostfile")
[ "$(id -u)" = 0 ] && args+=(--allow-run-as-root)
# Oversubscribe only on a single host with more ranks x threads than cores (testing).
if [ -z "$hostfile" ] && [ $((per_node * threads)) -gt "$cores" ]; then
  args=(-np "$ranks" --oversubscribe --bind-to none -x OMP_NUM_THREADS="$threads")
  [ "$(id -u)" = 0 ] && args+=(--allow-run-as-root)
fi
for v in $(env | cut -d= -f1 | grep -E '^(NCCL_|UCX_|OMP_|CUDA_|MHE_)' || true); do args+=(-x "$v"); done
# mpirun in the background, so that a signal to this script can go to the ranks themselves
# (mpirun's children here; the trainers all-reduce the stop request, so ranks on other hosts
# stop at the same step): each checkpoints and exits 128 + the signal, which mpirun returns.
# shellcheck disable=SC2086
mpirun "${args[@]}" ${MHE_MPIRUN_ARGS:-} "$bin" train "$@" runtime.threads="$threads" &
mpi=$!
forward() {
  local kids
  kids=$(pgrep -P "$mpi" || true)
  # shellcheck disable=SC2086
  if [ -n "$kids" ]; then kill -"$1" $kids 2>/dev/null || true; else kill -"$1" "$mpi" 2>/dev/null || true; fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT
trap 'forward HUP' HUP
while :; do
  wait "$mpi" && status=0 || status=$?
  # wait returns early (128 + signal) when a trapped signal arrives; mpirun still runs then.
  kill -0 "$mpi" 2>/dev/null || break
done
exit "$status"
