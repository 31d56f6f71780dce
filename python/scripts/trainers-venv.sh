#!/usr/bin/env bash
# Builds (or finds) the virtualenv that `make test-trainers` runs in and prints its path.
#
# The venv holds torch, TRL, transformers and verl (≈ 6 GB; ≈ 6–9 min cold, 2–3 min from cached wheels), so it is cached under
# ${WMRL_CACHE:-~/.cache/wmrl}/trainers-venv-<sha256 of the requirements and constraints files>: a warm run is a stat of
# the marker file. pip's download cache lives beside it, so a new key (a changed pin) re-installs from
# local wheels instead of downloading 3 GB again. A half-built venv (no marker) is deleted and rebuilt;
# concurrent callers wait on a lock.
#
# wmrl-client is installed into the venv only for its dependencies: the tests put the checkout's
# python/src first on PYTHONPATH, so the cached venv never runs a stale copy of the client. A new runtime
# dependency of the client therefore needs a line in requirements-trainers.txt too (that changes the key).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
req=$here/requirements-trainers.txt
nodeps=$here/requirements-trainers-nodeps.txt
constraints=$here/constraints-trainers.txt
cache=${WMRL_CACHE:-$HOME/.cache/wmrl}
python=${PYTHON:-$(command -v python3.11 || command -v python3)}

key=$(cat "$req" "$nodeps" "$constraints" | sha256sum | cut -c1-16)
venv=$cache/trainers-venv-$key
marker=$venv/.wmrl-complete

if [[ -f $marker ]]; then
	echo "$venv"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/trainers-venv.lock"
flock 9
if [[ ! -f $marker ]]; then
	start=$(date +%s)
	echo "trainers-venv: building $venv (cold: ≈ 3 GB download, ≈ 9 min)" >&2
	rm -rf "$venv"
	"$python" -m venv "$venv"
	export PIP_CACHE_DIR=$cache/pip PIP_DISABLE_PIP_VERSION_CHECK=1
	"$venv/bin/python" -m pip install --quiet --upgrade pip >&2
	"$venv/bin/python" -m pip install --quiet -c "$constraints" -r "$req" "$here[test]" >&2
	"$venv/bin/python" -m pip install --quiet --no-deps -r "$nodeps" >&2
	"$venv/bin/python" -m pip freeze --exclude wmrl-client >"$venv/freeze.txt"
	touch "$marker"
	echo "trainers-venv: built in $(( $(date +%s) - start )) s" >&2
fi
echo "$venv"
