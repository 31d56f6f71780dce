#!/usr/bin/env bash
# bench/capacity.sh — reruns every measurement behind docs/capacity.md and prints its tables
# (markdown), with the fleet estimate's arithmetic. Not part of CI: it takes about 3 minutes and
# wants a quiet machine. `make capacity` runs it.
#
# Needs the real services: a Kafka broker and redis-server (`make services-up`), named by
# WMRL_TEST_KAFKA (default 127.0.0.1:9092) and WMRL_TEST_REDIS (default redis://127.0.0.1:6379/0).
# Every measurement uses topics and Redis keys of its own and deletes them afterwards.
#
# Environment:
#   CAPACITY_RUNS   repetitions of each measurement (default 3; the tables give min/median/max)
#   CAPACITY_OUT    folder for the raw outputs (default: a fresh temporary folder)
#   FLEET_RUNS, FLEET_STEP_SECONDS, FLEET_GROUPS, FLEET_GROUP_SIZE, FLEET_ANCHOR, FLEET_STREAMS,
#   FLEET_POD_GIB, FLEET_PARTITIONS, FLEET_REDIS_SHARD_GIB: the fleet estimate's assumptions
#   (defaults in capacity_table.py).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
RUNS=${CAPACITY_RUNS:-3}
export WMRL_TEST_KAFKA=${WMRL_TEST_KAFKA:-127.0.0.1:9092}
export WMRL_TEST_REDIS=${WMRL_TEST_REDIS:-redis://127.0.0.1:6379/0}
export WMRL_REQUIRE_SERVICES=1
OUT=${CAPACITY_OUT:-$(mktemp -d -t wmrl-capacity.XXXXXX)}
mkdir -p "$OUT"

# The correction benchmark's workload has the fleet estimate's step shape: 64 groups × 8 rollouts,
# every 4th group an anchor (anchor fraction 0.25: 128 executed rewards a step), so a step is
# 1 + 512 + 128 = 641 input records; 2 runs × 120 steps, one stream (the workload puts group g
# in stream g mod streams, so with anchor-every 4 a second stream would get no anchors), whose
# 5,000-pair window is full from step 40 on.
WORKLOAD=(--runs 2 --steps 120 --groups 64 --group-size 8 --anchor-every 4 --streams 1)

{
	echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+dirty')"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "loadavg: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "go: $($GO env GOVERSION)"
	echo "kafka: $WMRL_TEST_KAFKA  redis: $WMRL_TEST_REDIS  runs: $RUNS"
} | tee "$OUT/machine.txt" >&2

echo "building wmrl…" >&2
$GO build -o "$OUT/wmrl" ./cmd/wmrl

for i in $(seq "$RUNS"); do
	echo "bench correction $i/$RUNS…" >&2
	"$OUT/wmrl" bench correction --brokers "$WMRL_TEST_KAFKA" --redis "$WMRL_TEST_REDIS" "${WORKLOAD[@]}" \
		--rounds 1 --latency-steps 50 --target 0 --log-level error >"$OUT/correction.$i.txt"
	echo "bench correction, GOMAXPROCS=1, $i/$RUNS…" >&2
	GOMAXPROCS=1 "$OUT/wmrl" bench correction --brokers "$WMRL_TEST_KAFKA" --redis "$WMRL_TEST_REDIS" "${WORKLOAD[@]}" \
		--rounds 1 --latency-steps 0 --target 0 --log-level error >"$OUT/correction-1p.$i.txt"
done

echo "state bytes and rebuild (go test -bench)…" >&2
$GO test -count="$RUNS" -run '^$' -benchtime 1x -timeout 20m \
	-bench '^(BenchmarkCapacityStateBytes|BenchmarkRebuildFromChangelog1000)$' ./consumers/correct >"$OUT/correct.bench.txt"
$GO test -count="$RUNS" -run '^$' -benchtime 1x -timeout 10m \
	-bench '^BenchmarkCapacityRedisState$' ./statestore >"$OUT/statestore.bench.txt"

python3 bench/capacity_table.py "$OUT"
echo "raw outputs: $OUT" >&2
