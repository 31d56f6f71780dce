#!/bin/sh
# Sandbox job of the trainer tests (test_trainers_*.py): grades a rollout against its task, which it
# reads from {dir}/rollout.json, the rollout record `wmrl sandbox` writes for every job (meta
# included). Usage: grade_task.sh {dir} {artifact} KEY, where meta.KEY is a number n (the task's
# answer, or OpenRLHF's label). The grade is ((bytes of the artifact) + n) mod 10, over 10: it
# depends on the completion and on the task, so a test can recompute it from both. Only sed and wc:
# the sandbox passes an empty environment.
set -eu
dir=$1
art=$2
key=$3
n=$(sed -n "s/.*\"$key\": *\"\([0-9][0-9]*\)\".*/\1/p" "$dir/rollout.json")
if [ -z "$n" ]; then
	echo "no meta.$key in $dir/rollout.json" >&2
	exit 3
fi
len=$(wc -c <"$art")
printf '{"score": 0.%d}\n' $(((len + n) % 10))
