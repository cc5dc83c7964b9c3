# Shared by the training tests: paths, the tiny config with the fixture corpus, helpers.
set -euo pipefail
: "${MHETRAIN:?}" "${MHE_SOURCE_DIR:?}" "${MHE_BINARY_DIR:?}"
CORPUS="$MHE_BINARY_DIR/test-corpus"
TINY="$MHE_SOURCE_DIR/tests/train/tiny.yaml"
DATA=(data.train="[$CORPUS/shards/train]" data.valid="[$CORPUS/shards/valid]"
      data.tokenizer="$CORPUS/tokenizer/tokenizer.json")
PY=/usr/bin/python3
CHECK="$MHE_SOURCE_DIR/tests/train/check.py"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mhe-train-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
