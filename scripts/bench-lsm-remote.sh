#!/usr/bin/env bash
# Issue 16's figures: lsm remote mode vs local mode against a real S3 server
# (versitygw, started here with scripts/s3-server.sh into a temporary
# directory and stopped on exit), at the sizes given (default 1GiB,4GiB).
#
#   scripts/bench-lsm-remote.sh [sizes] [extra go test flags]
#   scripts/bench-lsm-remote.sh 64MiB,256MiB      # a quick check
#
# Each size and mode writes its state once (1 KiB values) and measures, in
# order: the checkpoint after a 1% change, restore to first get, cold and
# warm gets, rescale 3 -> 4, and (remote mode) a state twice the secondary
# cache (backend/lsm/remote_bench_test.go says what each figure is). The
# state lives in the S3 server's directory and in the test's temporary
# directories, both under TMPDIR: 4 GiB needs about 20 GB free there.
set -euo pipefail
cd "$(dirname "$0")/.."

sizes=${1:-1GiB,4GiB}
shift || true

s3dir=""
cleanup() {
	if [ -n "$s3dir" ]; then
		scripts/s3-server.sh stop "$s3dir" >/dev/null 2>&1 || true
		rm -rf "$s3dir"
	fi
}
trap cleanup EXIT

echo "== free space in ${TMPDIR:-/tmp}"
df -h "${TMPDIR:-/tmp}"
echo "== starting versitygw (S3) on 127.0.0.1"
s3dir=$(mktemp -d)
eval "$(scripts/s3-server.sh start "$s3dir")"
echo "S3 endpoint: $STATED_TEST_S3_ENDPOINT bucket: $STATED_TEST_S3_BUCKET"

echo "== go test ./backend/lsm/ -bench BenchmarkRemote, sizes $sizes"
set -x
STATED_BENCH_REMOTE_SIZES=$sizes go test ./backend/lsm/ -run '^$' -bench 'BenchmarkRemote$' \
	-benchtime 1x -timeout 120m "$@"
