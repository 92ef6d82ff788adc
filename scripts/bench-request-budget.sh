#!/usr/bin/env bash
# Issue 39's request-budget figures: node's BenchmarkRequestBudget against a
# real S3 server (versitygw, started here with scripts/s3-server.sh into a
# temporary directory and stopped on exit): one daemon, 16 file-backend tasks
# of one job, a checkpoint a second, changelog off and on; PUTs per
# checkpoint, per second between checkpoints and overall, and checkpoint
# p50/p99 (host/budget_bench_test.go says what each figure is).
#
#   scripts/bench-request-budget.sh [state] [seconds] [extra go test flags]
#   scripts/bench-request-budget.sh                 # 256MiB, 30 s per mode
#   scripts/bench-request-budget.sh 4MiB 3          # the smoke run CI makes
#
# STATED_BENCH_BUDGET_RATE sets the keys each task updates per second
# (default 200, 1 KiB values). With STATED_TEST_S3_ENDPOINT already set, that
# server is used and no other is started.
set -euo pipefail
cd "$(dirname "$0")/.."

state=${1:-256MiB}
secs=${2:-30}
shift 2 || shift $# || true

s3dir=""
cleanup() {
	if [ -n "$s3dir" ]; then
		scripts/s3-server.sh stop "$s3dir" >/dev/null 2>&1 || true
		rm -rf "$s3dir"
	fi
}
trap cleanup EXIT

if [ -z "${STATED_TEST_S3_ENDPOINT:-}" ]; then
	echo "== starting versitygw (S3) on 127.0.0.1"
	s3dir=$(mktemp -d)
	eval "$(scripts/s3-server.sh start "$s3dir")"
fi
echo "S3 endpoint: $STATED_TEST_S3_ENDPOINT bucket: $STATED_TEST_S3_BUCKET"

echo "== go test ./host -bench BenchmarkRequestBudget, state $state, $secs s per mode"
set -x
STATED_BENCH_BUDGET_STATE=$state STATED_BENCH_BUDGET_SECONDS=$secs \
	go test ./host -run '^$' -bench 'BenchmarkRequestBudget$' -benchtime 1x -timeout 60m -v "$@"
