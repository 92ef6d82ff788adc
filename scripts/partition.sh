#!/usr/bin/env bash
# The partition suite (tests/partition; docs/cluster.md, "Partition suite"):
# five real `stated serve` processes, each in a network namespace of its
# own, links cut and healed while a job checkpoints through them. It needs
# Linux, root and iproute2 (ip netns, veth, bridge, ip rule); without them
# it fails when CI=true and is skipped with a message otherwise.
#
# Usage: scripts/partition.sh [cycles] [-partition.* flags]
#   scripts/partition.sh          every scenario once, short (-short: 1 s
#                                 cuts, one probe each; CI runs this)
#   scripts/partition.sh 20       a longer run: every scenario 20 times, in
#                                 full (3 s cuts, two probes each)
#   scripts/partition.sh 5 -partition.seed=123 -partition.nodes=3
#
# Every address (10.213.0.0/24) exists only inside the namespaces the suite
# creates; the bridge lives in a namespace of its own with no uplink.
set -euo pipefail
cd "$(dirname "$0")/.."

# A fresh Debian machine may lack iproute2: install it when we can (root
# and apt-get); otherwise the suite says what is missing.
if ! command -v ip >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing iproute2 (apt-get)"
  env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null ||
    { apt-get update -qq >/dev/null && env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null; } ||
    echo "could not install iproute2"
fi

cycles=""
if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then
  cycles=$1
  shift
fi
if [ -z "$cycles" ]; then
  flags=(-short -timeout 10m)
  cycles=1
else
  flags=(-timeout "$((cycles * 4 + 10))m")
fi

# A run killed before its cleanup (a test timeout, kill -9) leaves its
# namespaces; its stated processes die with it (they carry a parent-death
# signal). The suite deletes such leftovers at its start, and so does this
# at its end: every namespace of the suite whose owning test process (the
# pid in its name) is gone, after killing by pid what still runs in it.
cleanup() {
  local ns pid p
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^stated-part-' || true); do
    pid=${ns#stated-part-}
    pid=${pid%%-*}
    if ! kill -0 "$pid" 2>/dev/null; then
      for p in $(ip netns pids "$ns" 2>/dev/null || true); do
        kill -9 "$p" 2>/dev/null || true
      done
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
}
trap cleanup EXIT

STATED_PARTITION=1 go test -count=1 -v "${flags[@]}" -run '^TestPartition$' ./tests/partition/ \
  -args -partition.cycles="$cycles" "$@"
