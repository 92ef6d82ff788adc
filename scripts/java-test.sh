#!/usr/bin/env bash
# Builds the Java modules (clients/java: the thin client and the Flink state
# backend) and runs their tests against a real daemon: builds stated and the
# Go client's cross-check helper from the tree, then `mvn verify`, whose
# tests start `stated serve` on temporary data dirs (verify also writes the
# backend's plugin jar and runs ShadedPluginIT on it, docs/flink.md). Maven's local
# repository (~/.m2) is reused between runs; the first run downloads gRPC,
# protoc and Flink.
# Usage: scripts/java-test.sh [extra mvn arguments, e.g. -pl stated-client]
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is required (JDK 17 and Maven 3.8 or later) for the Java client's tests"; exit 1
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/stated" ./cmd/stated
go build -o "$tmp/xcheck" ./clients/node/xcheck
# The client, the backend and the savepoint tools (stated-flink-tools: a
# job on stated, hashmap and rocksdb stopped with a savepoint, read back);
# the Flink jobs module has its own stage (scripts/flink-jobs.sh, which also
# runs it on stated), so it is not run twice. Arguments with their own -pl
# choose other modules.
modules=(-pl stated-client,stated-flink,stated-flink-tools)
for a in "$@"; do
  case "$a" in -pl|--projects|-pl*) modules=() ;; esac
done
(cd clients/java && mvn -B -q verify "${modules[@]}" -Dstated.bin="$tmp/stated" -Dstated.xcheck="$tmp/xcheck" "$@")
