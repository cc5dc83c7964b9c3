# Shared by the training tests: paths and the tiny config with the fixture corpus (fail, WORK
# and MPIRUN come from tests/common/lib.sh).
set -euo pipefail
: "${MHETRAIN:?}" "${MHE_SOURCE_DIR:?}" "${MHE_BINARY_DIR:?}"
CORPUS="$MHE_BINARY_DIR/test-corpus"
TINY="$MHE_SOURCE_DIR/tests/train/tiny.yaml"
DATA=(data.train="[$CORPUS/shards/train]" data.valid="[$CORPUS/shards/valid]"
      data.tokenizer="$CORPUS/tokenizer/tokenizer.json")
PY=/usr/bin/python3
CHECK="$MHE_SOURCE_DIR/tests/train/check.py"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir train-test
