#!/usr/bin/env bash
# fuzz-smoke.sh: runs every Go fuzz target in the module for FUZZTIME
# (default 10s) each. `go test -fuzz` takes one target per run, so this lists
# them with `go test -list` first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
n=0
while read -r pkg; do
	while read -r target; do
		[[ $target == Fuzz* ]] || continue
		echo "fuzz-smoke: $pkg $target ($FUZZTIME)"
		"$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"
		n=$((n + 1))
	done < <("$GO" test -list '^Fuzz' "$pkg")
done < <("$GO" list ./...)
echo "fuzz-smoke: $n fuzz targets ran"
