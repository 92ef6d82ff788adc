#!/usr/bin/env bash
# Runs one fuzz target for a while. Usage: scripts/fuzz.sh TARGET DURATION [go test flags]
#
#   scripts/fuzz.sh FuzzRestoreLSM 10m
#   scripts/fuzz.sh FuzzRestoreFile 1h -parallel 4
#
# TARGET is a fuzz target of the fuzz/ package (the restore path:
# FuzzRestoreHeap, FuzzRestoreFile, FuzzRestoreLSM), or PACKAGE:TARGET for
# another package's (./dstl:FuzzDecodeSegment). DURATION is a Go duration
# or Nx (N executions). A failing input is written to the package's
# testdata/fuzz/TARGET/; commit it with the fix, as a regression seed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 2 ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
target=$1 duration=$2
shift 2
pkg=./fuzz
if [[ $target == *:* ]]; then
  pkg=${target%%:*} target=${target#*:}
fi
exec go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$duration" -timeout 0 "$@"
