#!/usr/bin/env bash
# The side-by-side benchmark: the example Flink job (clients/java/
# stated-flink-jobs) on HashMap, EmbeddedRocksDB (incremental), ForSt and
# stated, one after the other in one JVM; prints records/s, checkpoint
# duration (p50, p99) and size, recovery time after an injected failure, and
# each backend's throughput and recovery as ratios to RocksDB's and ForSt's
# of the same run. docs/flink.md ("Benchmark") says what each column
# measures; docs/performance.md (Flink section) has the figures.
#
# Usage: scripts/flink-bench.sh [--state-mib 100] [--payload-bytes 1024]
#          [--events N, default 8 per key] [--parallelism 2] [--checkpoint-interval-ms 150]
#          [--fail-at 0.8] [--backends hashmap,rocksdb,forst; also rocksdb-heap-timers]
#          [--managed-memory 512m] [--stated-socket PATH | --no-stated]
#          [--stated-cache-size 64m] [--stated-kind file] [--stated-timer-service daemon|heap]
#          [--stated-modes full,incremental,incremental-no-read-ahead]
#          [--restore-parallelism 3] [--dir DIR]
# Without --stated-socket the script builds stated from the tree (needs Go)
# and starts one daemon on a temporary data dir for the stated run, stopped
# on exit, with --external-dir set to the benchmark's directory (--dir, or a
# temporary one) so that stated's incremental mode can write Flink's files
# there; --no-stated leaves stated out. --restore-parallelism N makes the
# failure terminal and restores a second job at parallelism N from the
# retained checkpoint (a rescale; docs/flink.md, "Benchmark").
# JAVA_HEAP sets the JVM's -Xmx (default 4g; give 1 GiB of state 10g or more,
# the hashmap backend holds it on the heap). JAVA_OPTS adds JVM options, e.g.
# -XX:StartFlightRecording=filename=bench.jfr,settings=profile to profile.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

args=()
socket=
benchdir=
stated=1
prev=
for a in "$@"; do
  case "$a" in
    --no-stated) stated=0; prev=; continue ;;
  esac
  if [ "$prev" = "--stated-socket" ]; then socket=$a; fi
  if [ "$prev" = "--dir" ]; then benchdir=$a; fi
  args+=("$a")
  prev=$a
done

tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ "$stated" = 1 ] && [ -z "$socket" ]; then
  if ! command -v go >/dev/null 2>&1; then
    echo "Go is required to build the stated daemon for the stated run (or give --stated-socket, or --no-stated)"
    exit 1
  fi
  (cd "$root" && go build -o "$tmp/stated" ./cmd/stated)
  if [ -z "$benchdir" ]; then
    benchdir=$tmp/bench
    args+=(--dir "$benchdir")
  fi
  mkdir -p "$benchdir"
  args+=(--stated-external-dir "$benchdir")
  "$tmp/stated" serve --data-dir "$tmp/data" --socket "$tmp/s.sock" --metrics-addr "" \
    --external-dir "$benchdir" --log-level warn >"$tmp/daemon.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    [ -S "$tmp/s.sock" ] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "stated serve exited:"; cat "$tmp/daemon.log"; exit 1
    fi
    sleep 0.1
  done
  [ -S "$tmp/s.sock" ] || { echo "stated serve did not create $tmp/s.sock within 30 s"; exit 1; }
  socket=$tmp/s.sock
  args+=(--stated-socket "$socket")
fi

profile=()
if [ "$stated" = 1 ]; then profile=(-Pstated); fi

# One reactor build, so that -Pstated resolves stated's backend from its
# module. Every module of the reactor writes the classpath file; the jobs
# module, which depends on all others, comes last and its list stays.
cd "$root/clients/java"
cp_file=$PWD/stated-flink-jobs/target/bench.classpath
mvn -B -q -pl stated-flink-jobs -am "${profile[@]}" -DskipTests package \
  dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile="$cp_file"
# Not exec: the trap stops the daemon when the benchmark ends.
# shellcheck disable=SC2086 # JAVA_OPTS is a list of options
java -Xmx"${JAVA_HEAP:-4g}" ${JAVA_OPTS:-} \
  -cp "stated-flink-jobs/target/classes:$(cat "$cp_file")" \
  io.stated.flink.jobs.SideBySideBenchmark "${args[@]}"
