#!/usr/bin/env bash
# Open MPI's rsh agent for the two-host test: "ssh" into a host by entering the network
# namespace that owns its address.  Called as: netns_agent.sh [options] HOST COMMAND...
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done   # ssh-style options
host="$1"; shift
ns=$(cat "${MHE_NETNS_MAP:?}" | awk -v h="$host" '$1 == h {print $2}')
[ -n "$ns" ] || { echo "netns_agent: unknown host $host" >&2; exit 255; }
exec ip netns exec "$ns" /bin/sh -c "$*"
