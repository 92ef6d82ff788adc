#!/usr/bin/env bash
# Runs the Node client's conformance script (clients/node) against a real
# daemon: builds stated and the Go cross-check helper from the tree, installs
# the client's packages from its package-lock.json (npm ci), and runs
# conformance.js, which starts `stated serve` on a temporary data dir.
# Usage: scripts/node-conformance.sh [--bench [--bench-keys N]]
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is required (Node.js 20 or later) for the Node client's conformance"; exit 1
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/stated" ./cmd/stated
go build -o "$tmp/xcheck" ./clients/node/xcheck
# --ignore-scripts: no package here needs an install script (protobufjs's
# only checks versions), and CI should run none.
(cd clients/node && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
node clients/node/conformance.js --stated "$tmp/stated" --xcheck "$tmp/xcheck" "$@"
