#!/usr/bin/env bash
# A local S3 server for tests and local setups: versitygw (posix backend) on
# 127.0.0.1, with fixed dummy test credentials (not real ones).
#
#   eval "$(scripts/s3-server.sh start <datadir> [port])"
#   go test ./tiered/... ./tests/s3e2e/...
#   scripts/s3-server.sh stop [<datadir>]
#
# start installs versitygw with `go install` if it is missing, starts it on
# the given port or a free one, waits until an anonymous GET answers 403,
# creates the bucket, and prints export lines for STATED_TEST_S3_ENDPOINT,
# STATED_TEST_S3_BUCKET, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_REGION and STATED_TEST_S3_DATADIR. Everything else goes to stderr.
# stop kills the server recorded in <datadir> (default
# $STATED_TEST_S3_DATADIR) and waits for it to exit.
set -euo pipefail

VERSITYGW_VERSION=v1.8.0
ACCESS_KEY=testkey
SECRET_KEY=testsecret
BUCKET=${STATED_TEST_S3_BUCKET:-stated-test}
REGION=us-east-1

log() { echo "s3-server: $*" >&2; }
die() { log "$*"; exit 1; }

find_versitygw() {
	if command -v versitygw >/dev/null 2>&1; then
		command -v versitygw
		return
	fi
	local gobin
	gobin=$(go env GOBIN)
	[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"
	if [ ! -x "$gobin/versitygw" ]; then
		log "installing versitygw $VERSITYGW_VERSION (a few minutes the first time)"
		go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2
	fi
	echo "$gobin/versitygw"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
	local p
	for _ in $(seq 1 50); do
		p=$((20000 + RANDOM % 30000))
		if ! port_in_use "$p"; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

http_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$@" || true; }

start() {
	local dir=${1:-}
	[ -n "$dir" ] || die "usage: $0 start <datadir> [port]"
	mkdir -p "$dir/root"
	dir=$(cd "$dir" && pwd)
	if [ -f "$dir/versitygw.pid" ] && kill -0 "$(cat "$dir/versitygw.pid")" 2>/dev/null; then
		die "a server from $dir is already running (pid $(cat "$dir/versitygw.pid")); stop it first"
	fi
	command -v curl >/dev/null || die "curl is needed (apt-get install curl)"
	local bin port pid endpoint code
	bin=$(find_versitygw)
	for attempt in 1 2 3; do
		port=${2:-$(free_port)}
		endpoint="http://127.0.0.1:$port"
		"$bin" --access "$ACCESS_KEY" --secret "$SECRET_KEY" --port "127.0.0.1:$port" \
			posix "$dir/root" >"$dir/versitygw.log" 2>&1 &
		pid=$!
		echo "$pid" >"$dir/versitygw.pid"
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			code=$(http_code "$endpoint/")
			[ "$code" = 403 ] && break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null && [ "$code" = 403 ]; then
			break
		fi
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		rm -f "$dir/versitygw.pid"
		[ -z "${2:-}" ] || die "versitygw did not start on port $port: $(tail -5 "$dir/versitygw.log")"
		[ "$attempt" -lt 3 ] || die "versitygw did not start: $(tail -5 "$dir/versitygw.log")"
		log "port $port did not work, trying another"
	done
	# Create the bucket with a SigV4-signed PUT (an existing one is fine).
	# S3 wants the payload hash in a header; this one is of the empty body.
	local empty_sha=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
	code=$(http_code -X PUT --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
		-H "x-amz-content-sha256: $empty_sha" "$endpoint/$BUCKET")
	case "$code" in
	200 | 409) ;;
	*) kill "$pid"; die "create bucket $BUCKET answered HTTP $code" ;;
	esac
	# Wrong credentials must be refused, or the tests prove nothing.
	code=$(http_code --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY:wrong" \
		-H "x-amz-content-sha256: $empty_sha" "$endpoint/$BUCKET")
	[ "$code" = 403 ] || { kill "$pid"; die "bad credentials answered HTTP $code, want 403"; }
	log "versitygw pid $pid serving $dir/root at $endpoint, bucket $BUCKET"
	cat <<OUT
export STATED_TEST_S3_ENDPOINT=$endpoint
export STATED_TEST_S3_BUCKET=$BUCKET
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_REGION=$REGION
export STATED_TEST_S3_DATADIR=$dir
OUT
}

stop() {
	local dir=${1:-${STATED_TEST_S3_DATADIR:-}}
	[ -n "$dir" ] || die "usage: $0 stop <datadir> (or set STATED_TEST_S3_DATADIR)"
	local pidfile="$dir/versitygw.pid"
	[ -f "$pidfile" ] || { log "no server recorded in $dir"; return 0; }
	local pid
	pid=$(cat "$pidfile")
	if kill "$pid" 2>/dev/null; then
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
	log "stopped versitygw pid $pid"
}

case "${1:-}" in
start) shift; start "$@" ;;
stop) shift; stop "$@" ;;
*) die "usage: $0 start <datadir> [port] | stop [<datadir>]" ;;
esac
