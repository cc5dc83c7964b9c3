#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces joined by a veth pair, Open MPI restricted to
# TCP between them and launched through an rsh agent that enters the namespaces.  2 ranks across
# the two hosts must give the same losses and weights as 2 ranks on one host.
source "$(dirname "$0")/../train/lib.sh"
id=$$
ns0="mhe${id}a" ns1="mhe${id}b" ip0=10.231.$((id % 200)).1 ip1=10.231.$((id % 200)).2
cleanup() { ip netns del "$ns0" 2>/dev/null; ip netns del "$ns1" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
ip netns add "$ns0" && ip netns add "$ns1" || fail "cannot create network namespaces (needs root and iproute2)"
ip link add "v${id}a" type veth peer name "v${id}b"
ip link set "v${id}a" netns "$ns0"
ip link set "v${id}b" netns "$ns1"
ip -n "$ns0" addr add "$ip0/24" dev "v${id}a"
ip -n "$ns1" addr add "$ip1/24" dev "v${id}b"
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set "v${id}a" up
ip -n "$ns1" link set "v${id}b" up
printf '%s %s\n%s %s\n' "$ip0" "$ns0" "$ip1" "$ns1" > "$WORK/netns.map"
export MHE_NETNS_MAP="$WORK/netns.map"
net="${ip0%.1}.0/24"
args=("$TINY" "${DATA[@]}")
# Reference: 2 ranks on one host (shared memory allowed).
"${MPIRUN[@]}" -np 2 "$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/local" 2>"$WORK/local.log" ||
  { cat "$WORK/local.log"; fail "local run"; }
# Two hosts: one rank each, TCP only, daemons started through the namespace agent.
ip netns exec "$ns0" mpirun --allow-run-as-root -np 2 --host "$ip0:1,$ip1:1" \
  --mca plm_rsh_agent "$MHE_SOURCE_DIR/tests/dist/netns_agent.sh" \
  --mca btl tcp,self --mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net" \
  -x OMP_NUM_THREADS -x PATH -x LD_LIBRARY_PATH \
  "$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/hosts" 2>"$WORK/hosts.log" ||
  { cat "$WORK/hosts.log"; fail "two-host run"; }
grep -q "replicas identical" "$WORK/hosts.log" || fail "no replica check"
"$MHETRAIN" info >/dev/null
ip netns exec "$ns0" mpirun --allow-run-as-root -np 2 --host "$ip0:1,$ip1:1" \
  --mca plm_rsh_agent "$MHE_SOURCE_DIR/tests/dist/netns_agent.sh" --mca btl tcp,self \
  --mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net" "$MHETRAIN" info | grep "^rank" | tee "$WORK/map.txt"
[ "$(grep -c 'local rank 0' "$WORK/map.txt")" = 2 ] || fail "each host should run local rank 0"
$PY "$CHECK" losses-close "$WORK/hosts/metrics.jsonl" "$WORK/local/metrics.jsonl" 1e-5
$PY "$CHECK" weights-close "$WORK/hosts/checkpoints/step_00000008/model.safetensors" \
  "$WORK/local/checkpoints/step_00000008/model.safetensors" 1e-5
echo PASS
