#!/usr/bin/env bash
# The side-by-side benchmark: the example Flink job (clients/java/
# stated-flink-jobs) on HashMap, EmbeddedRocksDB (incremental) and ForSt, and
# on stated when its backend is built and a daemon is given, one after the
# other in one JVM; prints records/s, checkpoint duration (p50, p99) and size,
# and recovery time after an injected failure. docs/flink.md ("Benchmark")
# has the figures and what each column measures.
#
# Usage: scripts/flink-bench.sh [--state-mib 100] [--payload-bytes 1024]
#          [--events N, default 8 per key] [--parallelism 2] [--checkpoint-interval-ms 150]
#          [--fail-at 0.8] [--backends hashmap,rocksdb,forst]
#          [--managed-memory 512m] [--stated-socket PATH]
# JAVA_HEAP sets the JVM's -Xmx (default 4g; give 1 GiB of state 10g or more,
# the hashmap backend holds it on the heap).
set -euo pipefail
cd "$(dirname "$0")/../clients/java"

profile=()
for a in "$@"; do
  if [ "$a" = "--stated-socket" ]; then profile=(-Pstated); fi
done

# One reactor build, so that -Pstated resolves stated's backend from its
# module. Every module of the reactor writes the classpath file; the jobs
# module, which depends on all others, comes last and its list stays.
cp_file=$PWD/stated-flink-jobs/target/bench.classpath
mvn -B -q -pl stated-flink-jobs -am "${profile[@]}" -DskipTests package \
  dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile="$cp_file"
exec java -Xmx"${JAVA_HEAP:-4g}" \
  -cp "stated-flink-jobs/target/classes:$(cat "$cp_file")" \
  io.stated.flink.jobs.SideBySideBenchmark "$@"
