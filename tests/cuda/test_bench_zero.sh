#!/usr/bin/env bash
# The cost model's prediction of ZeRO-1 through NCCL (bench --gpu --ranks N dist.zero=1, one
# process playing rank 0): it must say it reduces onto the shard owners and broadcasts, and its
# peak device memory must drop by what the sharded optimizer state frees: m, v and LAMB's u, 3 x 4
# bytes per parameter, (N-1)/N of them.
set -euo pipefail
: "${MHETRAIN_EMU:?}" "${MHE_SOURCE_DIR:?}"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir bench-zero
N=4
for z in 0 1; do
  "$MHETRAIN_EMU" bench "$MHE_SOURCE_DIR/configs/tiny-bert-mha.yaml" runtime.device=cuda runtime.precision=bf16 \
    model.layers=2 data.seq_len=64 train.micro_batch=4 --gpu h100 --ranks $N dist.zero=$z >"$WORK/z$z.txt" 2>&1 ||
    { cat "$WORK/z$z.txt"; fail "bench dist.zero=$z"; }
done
grep -q "reduces + broadcasts under dist.zero: 1" "$WORK/z1.txt" || { cat "$WORK/z1.txt"; fail "no collectives line"; }
/usr/bin/python3 - "$WORK/z0.txt" "$WORK/z1.txt" $N <<'PYEOF' || fail "ZeRO-1 prediction"
import re, sys
def result(p):
    text = open(p).read()
    kv = dict(x.split("=") for x in re.search(r"^cost-result: (.*)$", text, re.M).group(1).split())
    params = int(re.search(r"params=(\d+)", text).group(1))
    return kv, params
a, params = result(sys.argv[1])
b, _ = result(sys.argv[2])
n = int(sys.argv[3])
want = 3 * 4 * params * (n - 1) / n / 2**30
got = float(a["peak_device_gib"]) - float(b["peak_device_gib"])
print(f"peak {a['peak_device_gib']} -> {b['peak_device_gib']} GiB: {got:.5f} freed, sharded state {want:.5f}")
assert int(b["ranks"]) == n and float(b["comm_ms"]) > 0, b
assert abs(got - want) <= 0.02 * want, (got, want)
PYEOF
echo PASS
