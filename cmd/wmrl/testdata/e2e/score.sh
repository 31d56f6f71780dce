#!/bin/sh
# Sandbox program of the end-to-end test (cmd/wmrl/e2e_test.go). Its argument is the rollout's
# artifact, a one-line JSON object the test wrote: the job reports the artifact's "exec" value as
# its score, and sleeps "sleep" seconds first when that key is present, so one rollout overruns
# the stage's --timeout. Only sed and sleep are used: the sandbox passes an empty environment.
set -eu
art=$1
pause=$(sed -n 's/.*"sleep": *\([0-9][0-9]*\).*/\1/p' "$art")
if [ -n "$pause" ]; then
	sleep "$pause"
fi
score=$(sed -n 's/.*"exec": *\([0-9][0-9.]*\).*/\1/p' "$art")
if [ -z "$score" ]; then
	echo "no exec value in $art" >&2
	exit 3
fi
echo "evaluated $art"
printf '{"score": %s}\n' "$score"
