#!/usr/bin/env python3
"""Prints docs/capacity.md's tables from the raw outputs bench/capacity.sh writes to a folder:
the measured figures (min/median/max over the repetitions) and the fleet estimate, with its
arithmetic, from the medians. Standard library only.

Usage: python3 bench/capacity_table.py OUT_DIR
"""

import glob
import math
import os
import re
import statistics
import sys

# The step shape of bench/capacity.sh's correction benchmark (its WORKLOAD).
BENCH_RECORDS_PER_STEP = 1 + 64 * 8 + 16 * 8
# The correction default window (correction.DefaultConfig().Window).
WINDOW = 5000


def env(name, default):
    return type(default)(os.environ.get(name, default))


# The fleet estimate's assumptions; docs/capacity.md explains each.
FLEET = {
    "runs": env("FLEET_RUNS", 10000),
    "step_seconds": env("FLEET_STEP_SECONDS", 60.0),
    "groups": env("FLEET_GROUPS", 64),
    "group_size": env("FLEET_GROUP_SIZE", 8),
    "anchor": env("FLEET_ANCHOR", 0.25),
    "streams": env("FLEET_STREAMS", 2),
    "pod_gib": env("FLEET_POD_GIB", 4.0),
    "pod_reserved_gib": env("FLEET_POD_RESERVED_GIB", 0.5),
    "partitions": env("FLEET_PARTITIONS", 64),
    "redis_shard_gib": env("FLEET_REDIS_SHARD_GIB", 4.0),
    "replication": env("FLEET_REPLICATION", 3),
    "retention_days": env("FLEET_RETENTION_DAYS", 7.0),
}


def stats(xs):
    if not xs:
        raise SystemExit("capacity_table: a measurement has no values; see the raw outputs")
    return min(xs), statistics.median(xs), max(xs)


def duration_ms(s):
    """Parses a Go duration as printed (4.437ms, 812µs, 1.2s) into milliseconds."""
    m = re.fullmatch(r"([0-9.]+)(ns|µs|us|ms|s)", s)
    if not m:
        raise ValueError(f"not a duration: {s}")
    return float(m.group(1)) * {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1, "s": 1e3}[m.group(2)]


def correction_runs(out, pattern):
    runs = []
    for path in sorted(glob.glob(os.path.join(out, pattern))):
        text = open(path, encoding="utf-8").read()
        r = {"topics": {}, "sparse": {}}
        for line in text.splitlines():
            if line.startswith("correction records per CPU-second"):
                r["rec_per_cpu_s"] = float(line.split()[-1])
            elif line.startswith("correction consumer "):
                r["wall_rec_s"] = float(line.split()[2])
            elif line.startswith("CPU per step when each step is its own transaction"):
                r["sparse_cpu_ms"] = duration_ms(line.split()[-1])
            elif line.startswith("broker log bytes per run step, backlog"):
                r["topics"] = dict((k, float(v)) for k, v in re.findall(r"(\S+)=([0-9.]+)", line))
            elif line.startswith("broker log bytes per run step, one step per transaction"):
                r["sparse"] = dict((k, float(v)) for k, v in re.findall(r"(\S+)=([0-9.]+)", line))
        runs.append(r)
    return runs


def bench_metrics(path, name):
    """Every line of benchmark name in a `go test -bench` output, as {unit: value}."""
    out = []
    for line in open(path, encoding="utf-8"):
        f = line.split()
        if not f or not re.fullmatch(name + r"(-\d+)?", f[0]):
            continue
        out.append({f[i + 1]: float(f[i]) for i in range(2, len(f) - 1, 2)})
    return out


def fmt(x):
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def main(out):
    print(open(os.path.join(out, "machine.txt"), encoding="utf-8").read().rstrip())
    print()
    corr = correction_runs(out, "correction.[0-9]*.txt")
    corr1 = correction_runs(out, "correction-1p.[0-9]*.txt")
    state = bench_metrics(os.path.join(out, "correct.bench.txt"), "BenchmarkCapacityStateBytes")
    rebuild = bench_metrics(os.path.join(out, "correct.bench.txt"), "BenchmarkRebuildFromChangelog1000")
    redis = bench_metrics(os.path.join(out, "statestore.bench.txt"), "BenchmarkCapacityRedisState")

    rows = []  # (what, values, unit, how)

    def row(what, values, unit, how):
        rows.append((what, stats(values), unit, how))
        return statistics.median(values)

    rps = row("`wmrl correct` records per CPU-second (= records/s per core), backlog",
              [r["rec_per_cpu_s"] for r in corr], "records/s/core",
              "bench correction: input records ÷ process CPU time of the correction phase")
    row("`wmrl correct` records/s wall clock, GOMAXPROCS=1, backlog", [r["wall_rec_s"] for r in corr1],
        "records/s", "bench correction under GOMAXPROCS=1")
    sparse_ms = row("CPU per step, one step per transaction (upper bound: probe included)",
                    [r["sparse_cpu_ms"] for r in corr], "ms/step", "bench correction latency phase")
    heap = row("live heap per full-window (run, stream) state",
               [m["heap-bytes/state"] for m in state], "bytes", "BenchmarkCapacityStateBytes")
    row("heap per state decoded from its encoding", [m["decoded-heap-bytes/state"] for m in state], "bytes",
        "BenchmarkCapacityStateBytes")
    row("heap per decoded state after one more step", [m["decoded-stepped-heap-bytes/state"] for m in state],
        "bytes", "BenchmarkCapacityStateBytes")
    row("heap per state just rebuilt from the changelog",
        [m["MiB-held"] * 2**20 / 1000 for m in rebuild], "bytes", "BenchmarkRebuildFromChangelog1000")
    row("active full-window states per GiB of live heap", [2**30 / m["heap-bytes/state"] for m in state],
        "states/GiB", "2^30 ÷ live heap per state")
    rebuild_s = row("rebuild from the changelog, per 1,000 full-window states",
                    [m["sec/op"] if "sec/op" in m else m["ns/op"] / 1e9 for m in rebuild], "s",
                    "BenchmarkRebuildFromChangelog1000 (1 partition, real broker)")
    changelog = row("compacted changelog per state (record keys + values + headers)",
                    [m["changelog-bytes/state"] for m in state], "bytes", "BenchmarkCapacityStateBytes")
    redis_b = row("Redis memory per full-window state (MEMORY USAGE, 8 kept snapshots)",
                  [m["redis-bytes/state"] for m in redis], "bytes", "BenchmarkCapacityRedisState")
    row("Redis keys per state", [m["keys/state"] for m in redis], "keys", "BenchmarkCapacityRedisState")
    row("Redis INFO used_memory delta per state (cross-check; shared server)",
        [m["used-memory-delta-bytes/state"] for m in redis], "bytes", "BenchmarkCapacityRedisState")
    topics = sorted({t for r in corr for t in r["topics"]} - {"rollouts.v1", "dlq.v1"})
    sparse = {}
    for t in topics:
        row(f"broker bytes per run step, {t}, backlog", [r["topics"][t] for r in corr], "bytes/step",
            "bench correction, DescribeLogDirs, one replica")
        sparse[t] = row(f"broker bytes per run step, {t}, one step per transaction",
                        [r["sparse"][t] for r in corr], "bytes/step", "bench correction latency phase")

    print("| measured | min | median | max | unit | how |")
    print("| --- | ---: | ---: | ---: | --- | --- |")
    for what, (lo, mid, hi), unit, how in rows:
        print(f"| {what} | {fmt(lo)} | {fmt(mid)} | {fmt(hi)} | {unit} | {how} |")
    print()
    fleet(rps, sparse_ms, heap, rebuild_s, redis_b, changelog, sparse)


def fleet(rps, sparse_ms, heap, rebuild_s, redis_b, changelog, sparse):
    a = FLEET
    rollouts = a["groups"] * a["group_size"]
    executed = round(a["anchor"] * rollouts)
    records = 1 + rollouts + executed
    steps_s = a["runs"] / a["step_seconds"]
    states = a["runs"] * a["streams"]
    lines = []

    def say(s):
        lines.append(s)

    say(f"Assumptions: {a['runs']:,} concurrent runs, one step every {a['step_seconds']:g} s each, "
        f"{a['groups']} groups × {a['group_size']} rollouts a step, anchor fraction {a['anchor']:g}, "
        f"{a['streams']} streams a run, every window full ({WINDOW:,} pairs), pods of {a['pod_gib']:g} GiB "
        f"({a['pod_reserved_gib']:g} GiB reserved for the runtime, clients and pending-step buffers), "
        f"GOGC=100, {a['partitions']} partitions, Redis masters of {a['redis_shard_gib']:g} GiB of data, "
        f"replication factor {a['replication']}, {a['retention_days']:g} days' retention of the non-compacted topics.")
    say("")
    say(f"* steps/s = {a['runs']:,} ÷ {a['step_seconds']:g} = **{steps_s:,.1f}**; records a step = 1 manifest + "
        f"{rollouts} predicted + {executed} executed = {records}; records/s = {steps_s:,.1f} × {records} = "
        f"**{steps_s * records:,.0f}**")
    cores_lo = steps_s * records / rps
    # The measured one-step-per-transaction CPU is for the benchmark's step shape; scale its
    # per-record part to the fleet's step shape.
    per_rec_ms = 1e3 / rps
    fixed_ms = max(sparse_ms - BENCH_RECORDS_PER_STEP * per_rec_ms, 0)
    step_ms = fixed_ms + records * per_rec_ms
    cores_hi = steps_s * step_ms / 1e3
    say(f"* CPU, backlog rate: {steps_s * records:,.0f} ÷ {rps:,.0f} records/s/core = **{cores_lo:.2f} cores**; "
        f"one step per transaction: ({fixed_ms:.2f} ms fixed + {records} × {per_rec_ms * 1e3:.2f} µs) × "
        f"{steps_s:,.1f} steps/s = **{cores_hi:.2f} cores** (upper bound)")
    heap_total = states * heap
    per_pod = math.floor((a["pod_gib"] - a["pod_reserved_gib"]) * 2**30 / (2 * heap))
    inst_mem = math.ceil(states / per_pod)
    say(f"* states = {a['runs']:,} × {a['streams']} = **{states:,}**; live heap = {states:,} × {heap / 1024:,.0f} KiB = "
        f"**{heap_total / 2**30:.2f} GiB** (≈ {2 * heap_total / 2**30:.1f} GiB of RSS at GOGC=100)")
    say(f"* states per pod = ({a['pod_gib']:g} − {a['pod_reserved_gib']:g}) GiB ÷ (2 × {heap / 1024:,.0f} KiB) = "
        f"{per_pod:,}; instances for memory = ⌈{states:,} ÷ {per_pod:,}⌉ = **{inst_mem}**; for CPU "
        f"⌈{cores_hi:.2f}⌉ = {math.ceil(cores_hi)} at one core each; plus one spare so a lost pod's "
        f"partitions fit: **{max(inst_mem, math.ceil(cores_hi)) + 1} instances**")
    per_part = states / a["partitions"]
    say(f"* partitions: {a['partitions']} → {per_part:,.0f} states a partition; a partition moving on a "
        f"rebalance rebuilds in ≈ {per_part:,.0f} × {rebuild_s:.2f} s ÷ 1,000 = **{per_part * rebuild_s / 1000:.2f} s**; "
        f"a whole pod's {per_pod:,} states in ≈ **{per_pod * rebuild_s / 1000:.1f} s** at the measured rate "
        f"(one reader)")
    redis_total = states * redis_b
    shards = max(1, math.ceil(redis_total / (a["redis_shard_gib"] * 2**30)))
    say(f"* Redis = {states:,} × {redis_b / 1024:,.0f} KiB = **{redis_total / 2**30:.2f} GiB** → "
        f"⌈{redis_total / 2**30:.2f} ÷ {a['redis_shard_gib']:g}⌉ = **{shards} master(s)** by memory "
        f"(a Redis Cluster needs 3); writes: {steps_s:,.1f} steps/s × {a['streams']} streams = "
        f"{steps_s * a['streams']:,.0f} scripts/s, in at most one round trip a transaction")
    calib = changelog * states
    say(f"* compacted changelog = {states:,} × {changelog / 1024:,.0f} KiB = **{calib / 2**30:.2f} GiB** a replica "
        f"(what a full rebuild of every state reads)")
    per_step = sum(sparse.values())
    say(f"* broker writes = {steps_s:,.1f} steps/s × {per_step:,.0f} bytes (one step per transaction, "
        f"{' + '.join(f'{t} {v:,.0f}' for t, v in sparse.items())}) = **{steps_s * per_step / 2**20:.1f} MiB/s** "
        f"a replica, {a['replication']} × = {a['replication'] * steps_s * per_step / 2**20:.1f} MiB/s across the "
        f"cluster; per day {steps_s * per_step * 86400 / 2**30:,.0f} GiB a replica before compaction "
        f"(the rollouts topic, user payloads, comes on top)")
    day = steps_s * (per_step - sparse.get("calibration.v1", 0)) * 86400
    disk = day * a["retention_days"] + calib
    say(f"* broker disk = {a['retention_days']:g} days × {day / 2**30:,.0f} GiB (non-compacted topics) + "
        f"{calib / 2**30:.2f} GiB (compacted changelog) = **{disk / 2**40:.2f} TiB** a replica, "
        f"{a['replication'] * disk / 2**40:.2f} TiB across the cluster")
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
