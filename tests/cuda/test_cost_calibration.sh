#!/usr/bin/env bash
# The cost model's expected step against the real GPU (kernels/cuda/CALIBRATION.md, run 1 on an
# H100 SXM): BERT-base mhe_mul at 128 x 64, bf16, recorded here in record-only mode, must come
# within 25% of the 52.0 ms gpu_bench measured there, and its bound must stay below it (the
# roofline is an upper bound on speed).  When the kernels change, a new GPU run refits the table
# (cuda_cost_expect.cu) and this figure.
set -euo pipefail
: "${MHETRAIN_EMU:?}" "${MHE_SOURCE_DIR:?}"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir cost-calibration
measured_ms=52.0
# runtime.attention_core=flash: the core that run was measured with (auto would price cuDNN's).
"$MHETRAIN_EMU" bench "$MHE_SOURCE_DIR/configs/bert-base-mhe-mul.yaml" runtime.device=cuda runtime.precision=bf16 \
  runtime.attention_core=flash data.seq_len=128 train.micro_batch=64 --gpu h100 --steps 1 >"$WORK/bench.txt" 2>&1 ||
  { cat "$WORK/bench.txt"; fail "bench --gpu h100"; }
/usr/bin/python3 - "$WORK/bench.txt" "$measured_ms" <<'PYEOF' || { cat "$WORK/bench.txt"; fail "calibration"; }
import re, sys
text = open(sys.argv[1]).read()
kv = dict(x.split("=") for x in re.search(r"^cost-result: (.*)$", text, re.M).group(1).split())
measured = float(sys.argv[2])
bound, expected = float(kv["predicted_step_ms"]), float(kv["expected_gpu_ms"])
print(f"bound {bound:.2f} ms, expected {expected:.2f} ms, measured on the H100 {measured:.2f} ms "
      f"({100 * (expected / measured - 1):+.1f}%), host {float(kv['host_ms']):.2f} ms")
assert bound < measured, "the roofline bound must be below the measured step"
assert abs(expected / measured - 1) <= 0.25, "expected step more than 25% from the measured one"
assert float(kv["expected_step_ms"]) >= expected
PYEOF
