#!/usr/bin/env bash
# Builds the Flink example job (clients/java/stated-flink-jobs) and runs its
# MiniCluster tests: the job on hashmap, rocksdb and forst, with an injected
# failure, a lost TaskManager, a JobManager failover, a savepoint restored at
# other parallelisms and moved between backends (docs/flink.md). About 2
# minutes on 2 cores once Maven's local repository holds Flink; the first
# run downloads Flink 2.3.0 (a few hundred MB).
# Usage: scripts/flink-jobs.sh [extra Maven arguments, e.g. -Pstated -Dstated.socket=...]
set -euo pipefail
cd "$(dirname "$0")/../clients/java"

for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is required (JDK 17 and Maven 3.8) for the Flink jobs"; exit 1
  fi
done

mvn -B -q -pl stated-flink-jobs -am verify "$@"
