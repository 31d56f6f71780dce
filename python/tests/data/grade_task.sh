#!/bin/sh
# Grade step of the trainer tests (test_trainers_*.py): grades a rollout against its task. The run
# step is `cat {artifact}`, so {dir}/run/stdout is the completion; {dir}/rollout.json is the rollout
# record `wmrl sandbox` hands the grade step (every meta key: the run step never sees it). Usage:
# grade_task.sh {dir} KEY, where meta.KEY is a number n (the task's answer, or OpenRLHF's label).
# The grade is ((bytes of the completion) + n) mod 10, over 10: it depends on the completion and on
# the task, so a test can recompute it from both. Only sed and wc: the sandbox passes an empty
# environment.
set -eu
dir=$1
key=$2
n=$(sed -n "s/.*\"$key\": *\"\([0-9][0-9]*\)\".*/\1/p" "$dir/rollout.json")
if [ -z "$n" ]; then
	echo "no meta.$key in $dir/rollout.json" >&2
	exit 3
fi
len=$(wc -c <"$dir/run/stdout")
printf '{"score": 0.%d}\n' $(((len + n) % 10))
