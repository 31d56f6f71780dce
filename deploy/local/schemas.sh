#!/usr/bin/env bash
# Generates the code of schemas/wmrl/v1/*.proto (the single source of the topics' schemas):
#   schemas.sh gen DIR   writes DIR/topics/wirepb/*.pb.go and DIR/python/src/wmrl_client/wirepb/*_pb2.py
#   schemas.sh check     generates into a temporary directory and diffs against the checked-in files
# Needs protoc (Debian's protobuf-compiler, 3.21) and protoc-gen-go at the go.mod version
# (installed into GOPATH/bin when missing), so the output depends only on pinned tools.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
GO=${GO:-go}
PGG_VERSION=v1.36.12
PGG=$($GO env GOPATH)/bin/protoc-gen-go
command -v protoc >/dev/null || { echo "schemas: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
if ! [[ -x $PGG ]] || [[ $("$PGG" --version 2>/dev/null) != "protoc-gen-go $PGG_VERSION" ]]; then
	$GO install "google.golang.org/protobuf/cmd/protoc-gen-go@$PGG_VERSION"
fi

gen() {
	local out=$1
	mkdir -p "$out/topics/wirepb" "$out/python/src/wmrl_client/wirepb"
	rm -f "$out"/topics/wirepb/*.pb.go "$out"/python/src/wmrl_client/wirepb/*_pb2.py
	protoc -I schemas --plugin=protoc-gen-go="$PGG" \
		--go_out="$out" --go_opt=module=github.com/wmrl/wmrl \
		schemas/wmrl/v1/*.proto
	local py
	py=$(mktemp -d)
	protoc -I schemas --python_out="$py" schemas/wmrl/v1/*.proto
	# protoc writes wmrl/v1/x_pb2.py importing `from wmrl.v1 import ...`; the client ships them as
	# the package wmrl_client.wirepb, so the sibling imports are made package-relative.
	for f in "$py"/wmrl/v1/*_pb2.py; do
		sed -E 's/^from wmrl\.v1 import ([a-z_]+_pb2)/from . import \1/' "$f" >"$out/python/src/wmrl_client/wirepb/$(basename "$f")"
	done
	rm -rf "$py"
}

case ${1:-} in
gen) gen "${2:-.}" ;;
check)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	gen "$tmp"
	rc=0
	for f in "$tmp"/topics/wirepb/*.pb.go "$tmp"/python/src/wmrl_client/wirepb/*_pb2.py; do
		rel=${f#"$tmp"/}
		diff -u "$rel" "$f" || { echo "schemas-check: $rel is stale: run make schemas" >&2; rc=1; }
	done
	for f in topics/wirepb/*.pb.go python/src/wmrl_client/wirepb/*_pb2.py; do
		[[ -e $tmp/$f ]] || { echo "schemas-check: $f has no schema: run make schemas" >&2; rc=1; }
	done
	[[ $rc == 0 ]] && echo "schemas-check: generated code matches schemas/"
	exit $rc
	;;
*) echo "usage: $0 gen [DIR] | check" >&2; exit 2 ;;
esac
