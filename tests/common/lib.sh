# Sourced by the shell tests (after `set -euo pipefail`): the failure line, a scratch directory
# removed on exit, and mpirun as the tests call it (root in CI containers, more ranks than cores).
fail() { echo "FAIL: $*" >&2; exit 1; }
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
# mhe_workdir NAME: WORK becomes a fresh directory under $TMPDIR, removed when the script exits.
mhe_workdir() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/mhe-$1.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
}
