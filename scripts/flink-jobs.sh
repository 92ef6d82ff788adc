#!/usr/bin/env bash
# Builds the Flink example job (clients/java/stated-flink-jobs) and runs its
# MiniCluster tests: the job on hashmap, rocksdb, forst and stated, with an
# injected failure, a lost TaskManager, a JobManager failover, a savepoint
# restored at other parallelisms and moved between backends, a kill -9 of
# the daemon mid-job, and a job with every keyed state kind and timers
# rescaled 2 -> 3 -> 1 through savepoints, and Flink's own AutoRescalingITCase and
# KeyedStateCheckpointingITCase on stated (docs/flink.md). The script builds stated from the tree
# and starts one daemon on a temporary data dir for the stated variants (the
# kill -9 test starts its own from the same binary); it is stopped on exit.
# The first run downloads Flink 2.3.0 (a few hundred MB).
# Usage: [STATED_SERVE_FLAGS="--lsm-cache-size 512MiB ..."] scripts/flink-jobs.sh [extra Maven
# arguments, e.g. -Dtest=...]; STATED_SERVE_FLAGS are added to the daemon's `stated serve`.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in java mvn go; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is required (JDK 17, Maven 3.8, Go) for the Flink jobs"; exit 1
  fi
done

tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/stated" ./cmd/stated
read -r -a serve_flags <<<"${STATED_SERVE_FLAGS:-}"
"$tmp/stated" serve --data-dir "$tmp/data" --socket "$tmp/s.sock" --metrics-addr "" --log-level warn \
  ${serve_flags[@]+"${serve_flags[@]}"} \
  >"$tmp/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [ -S "$tmp/s.sock" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "stated serve exited:"; cat "$tmp/daemon.log"; exit 1
  fi
  sleep 0.1
done
[ -S "$tmp/s.sock" ] || { echo "stated serve did not create $tmp/s.sock within 30 s"; exit 1; }

# -am builds the modules the jobs depend on; their own tests are
# scripts/java-test.sh's, so only the jobs module's tests run here.
cd clients/java
mvn -B -q -pl stated-flink-jobs -am verify -Pstated \
  -Dstated.socket="$tmp/s.sock" -Dstated.bin="$tmp/stated" \
  -Dtest='io/stated/flink/jobs/**' -Dsurefire.failIfNoSpecifiedTests=false "$@" \
  || { echo "daemon log ($tmp/daemon.log):"; tail -50 "$tmp/daemon.log"; exit 1; }
