#!/usr/bin/env bash
# Runs everything the tests need, then the tests. Usage: scripts/test.sh [go test flags]
#
# 1. checks formatting, that go.mod is tidy, and go vet;
# 2. installs Debian's chromium if it is missing (the web page's test drives
#    it headless), in the background while step 1 compiles, and makes that
#    test required (STATED_REQUIRE_BROWSER=1);
# 3. starts a real S3-protocol server (versitygw, installed with `go install`
#    the first time) on 127.0.0.1 for the S3 acceptance suite, unless
#    STATED_TEST_S3_ENDPOINT already points at one;
# 4. runs `go test ./...` (plain `go test ./...` also passes without steps 2
#    and 3: the S3 tests then use an in-process server, and the browser test
#    is skipped with a message), then every package but a short deny-list
#    once more with -race;
# 5. runs the Node client's conformance script against a real daemon
#    (scripts/node-conformance.sh; needs node and npm);
# 6. runs every restore-path fuzz target of fuzz/ briefly (FUZZTIME each,
#    default 300x: 300 new inputs after the corpus, a count rather than a
#    duration, because a duration that ends while the fuzzer still gathers
#    its corpus's baseline coverage fails with "context deadline exceeded"
#    on a slow machine; scripts/fuzz.sh runs one for longer);
# 7. builds the Java client and the Flink backend and runs their tests
#    against real daemons (scripts/java-test.sh; needs java and mvn).
# 8. runs the Flink example job's MiniCluster tests on Flink's own state
#    backends and on stated (scripts/flink-jobs.sh; needs JDK 17 and Maven).
# 9. runs the partition suite briefly (scripts/partition.sh: needs root and
#    iproute2; fails without them when CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$(go env GOPATH)/bin:$PATH"

# stage prints a stage's title with the seconds since the start, so that a
# slow run shows where its time went.
stage() { echo "== $* (at ${SECONDS}s)"; }

# The web page's browser test needs Chromium; plain `go test ./...` skips it
# without one, but here it must run. apt-get runs in the background while
# the checks below compile the code: on a fresh machine the two take
# minutes each, and one waits on the network, the other on the CPU.
install_chromium() {
  local sudo=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "no apt-get: install chromium (or set STATED_CHROMIUM); the browser test will fail"
    return 0
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null ||
    { $sudo apt-get update -qq >/dev/null && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } ||
    echo "could not install chromium: the browser test will fail"
}
chromium_pid=""
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 && [ -z "${STATED_CHROMIUM:-}" ]; then
  stage "installing chromium (apt-get, in the background)"
  install_chromium &
  chromium_pid=$!
fi

stage "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

stage "go mod tidy"
if ! go mod tidy -diff; then
  echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1
fi

stage "go vet"
go vet ./...

if [ -n "$chromium_pid" ]; then
  wait "$chromium_pid" || echo "could not install chromium: the browser test will fail"
  stage "chromium install ended"
fi
export STATED_REQUIRE_BROWSER=1

s3dir=""
cleanup() {
  if [ -n "$s3dir" ]; then
    scripts/s3-server.sh stop "$s3dir" >/dev/null 2>&1 || true
    rm -rf "$s3dir"
  fi
}
trap cleanup EXIT

if [ -z "${STATED_TEST_S3_ENDPOINT:-}" ] && [ -x scripts/s3-server.sh ]; then
  stage "starting versitygw (S3) on 127.0.0.1"
  s3dir=$(mktemp -d)
  eval "$(scripts/s3-server.sh start "$s3dir")"
  echo "S3 endpoint: $STATED_TEST_S3_ENDPOINT bucket: $STATED_TEST_S3_BUCKET"
fi
if [ -n "${STATED_TEST_S3_ENDPOINT:-}" ]; then
  # A server is there: the checks only a real server can make must run.
  export STATED_TEST_S3_REQUIRE=1
fi

stage "go test ./..."
go test -count=1 -timeout 20m "$@" ./...

# Every package once more under the race detector, so that a new
# concurrent package is covered by default, but for this deny-list (the
# reason for each):
#   backend            the state model: codecs and key groups on one
#                      goroutine; its property tests take ~6 min under
#                      the detector
#   tools/bench, tools/bench/checkpointsim
#                      tools above the product (~3 min); the daemon, API
#                      and host they drive run under the detector here
#   fuzz               restore-path checks on one goroutine; its power-
#                      loss suite runs under the detector on the next line
#   dstl/changelog     the backends' conformance suite once more through
#                      the changelog wrapper (~2.5 min under the detector);
#                      its concurrent part, the one log writer, is dstl's,
#                      which runs here, and the daemon's changelog tests
#                      drive the wrapper under the detector
# and, by -skip, rescale's two exhaustive matrices (every parallelism pair
# up to 8, random larger ones: ~3 min under the detector); the other
# rescale tests take its concurrent restore path under the detector.
# Three remote-lsm suites run in the pass above only, as each takes
# minutes under the detector: the spikes of Pebble's own shared storage,
# the ownership property test and the backend conformance suite in remote
# mode (over memory and S3); remote mode's concurrent parts (hand-offs
# written while compactions run, restores, rescale) meet the detector in
# the hand-off tests.
stage "go test -race (every package but a deny-list)"
race_deny='^github.com/statedhq/stated/(backend|tools/bench|tools/bench/checkpointsim|fuzz|dstl/changelog)$'
go test -count=1 -race -timeout 20m -skip '^(TestRemotePebble|TestRemoteOwnershipProperty|TestConformanceRemote|TestRescaleEveryPairUpTo8|TestRescaleRandomLarger)' "$@" \
  $(go list ./... | grep -Ev "$race_deny")
# The power-loss suite briefly: the lsm directories and the cache on a
# MemFS that, in race builds, scrambles every buffer it was asked to
# write (vfs.File allows it), while Pebble and the daemon work in the
# background.
go test -count=1 -race "$@" -run TestPowerLoss ./fuzz/ -powerloss.points=10

# A second client, in Node.js, written from api/stated.proto alone, against
# a real daemon (clients/node/conformance.js): the protocol works for a
# client that is not the Go one.
stage "Node client conformance"
scripts/node-conformance.sh

# The restore-path fuzz targets, briefly: new inputs beyond the committed
# corpus (which step 3 already ran).
stage "fuzz (restore path, ${FUZZTIME:-300x} each)"
for target in $(go test ./fuzz -list '^Fuzz' | grep '^Fuzz'); do
  scripts/fuzz.sh "$target" "${FUZZTIME:-300x}"
done
# The Java thin client (clients/java/stated-client), generated from
# api/stated.proto at build time, against real daemons: every state kind,
# barriers, restore modes, the Go client's data, TCP with the token and TLS,
# kill -9 of the daemon; and the Flink state backend's tests
# (scripts/java-test.sh; needs java and mvn, ~/.m2 cached between runs).
stage "Java client and Flink backend"
scripts/java-test.sh

# The Flink example job in a MiniCluster on hashmap, rocksdb, forst and
# stated (the script builds stated and starts its own daemon): an injected
# failure, a lost TaskManager, a JobManager failover, a savepoint restored at
# other parallelisms and on another backend, a kill -9 of the daemon mid-job,
# each compared with a reference model (docs/flink.md). About 2 minutes; the first run on a
# machine downloads Flink 2.3.0 into Maven's local repository.
stage "Flink jobs (MiniCluster)"
scripts/flink-jobs.sh

# The partition suite, briefly (every scenario once, 1 s cuts): five real
# `stated serve` processes in network namespaces of their own, links cut
# and healed (tests/partition, docs/cluster.md "Partition suite"). It needs
# root and iproute2's ip; with CI=true and no `ip netns` it fails, saying
# why. It prints its figures (time to a new leader, completions the
# minority refused, time to converge). A longer run: scripts/partition.sh 20.
stage "partition suite (network namespaces)"
scripts/partition.sh

# Issue 39's request budget, a smoke run (4 MiB of state, 3 s per mode,
# about 20 s with the build): host's BenchmarkRequestBudget end to end on the
# S3 server started above, printing PUTs per checkpoint and per second with the
# changelog off and on. The figures in docs/performance.md ("Request budget:
# changelog and merged files") come from scripts/bench-request-budget.sh.
stage "request budget smoke (S3)"
scripts/bench-request-budget.sh 4MiB 3

stage "all passed"
