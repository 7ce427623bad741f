#!/usr/bin/env bash
# test-times.sh LOG...: the time of every test package in go test's output,
# slowest first, then their sum — printed at the end of make test, so a
# package that grows shows where the suite's minutes go.
set -euo pipefail
times=$(awk -F'\t' '$1 ~ /^(ok|FAIL) *$/ && $3 ~ /^[0-9.]+s/ {
  t = $3; sub(/s.*/, "", t); st = $1; gsub(/ /, "", st); printf "%8.1f s  %-4s %s\n", t, st, $2 }' "$@" | sort -rn)
[ -n "$times" ] || exit 0
echo "time per test package (slowest first):"
echo "$times"
echo "$times" | awk '{ s += $1 } END { printf "%8.1f s  in all (packages run side by side, so more than the wall time)\n", s }'
