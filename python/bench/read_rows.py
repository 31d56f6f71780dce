"""Rows per second the client reads from the real broker.

    python bench/read_rows.py --brokers 127.0.0.1:9092 [--steps 200 --groups 8 --group-size 8]

Builds tests/gohelper, writes --steps steps of groups×group-size rows into fresh topics (one
transaction per step, as the correction consumer does), then times AdvantageStream from the
first poll until the last step is acknowledged (decode, validation, reassembly and one
synchronous commit per step included) and prints one JSON line. The topics are deleted after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa

from wmrl_client import AdvantageStream
from wmrl_client.digest import digest_and_count

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", default="127.0.0.1:9092")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--chunk-bytes", type=int, default=768 << 10)
    ap.add_argument("--no-validate", action="store_true", help="skip row validation (measures its cost)")
    ap.add_argument("--no-ack", action="store_true", help="do not ack (no commits)")
    ap.add_argument("--async-commit", action="store_true", help="ack with asynchronous commits")
    args = ap.parse_args(argv)
    go = shutil.which("go")
    if go is None:
        sys.exit("go not on PATH")
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    with tempfile.TemporaryDirectory() as tmp:
        exe = str(Path(tmp) / "gohelper")
        subprocess.run([go, "build", "-o", exe, "./python/tests/gohelper"], cwd=ROOT, check=True)
        run = "bench-run"
        produced = json.loads(subprocess.run(
            [exe, "produce", "--brokers", args.brokers, "--prefix", prefix, "--run", run, "--steps", str(args.steps),
             "--groups", str(args.groups), "--group-size", str(args.group_size), "--chunk-bytes", str(args.chunk_bytes),
             "--partitions", "1", "--abort=false"],
            check=True, capture_output=True, text=True,
        ).stdout)  # fmt: skip
        try:
            tables = []
            with AdvantageStream(args.brokers, run, f"bench-{uuid.uuid4().hex[:8]}", topic_prefix=prefix,
                                 idle_timeout=30, validate=not args.no_validate,
                                 async_commit=args.async_commit) as stream:  # fmt: skip
                it = iter(stream)
                first = next(it)  # group join and first fetch are not part of the rate
                t0 = time.perf_counter()
                tables.append(first.table)
                if not args.no_ack:
                    first.ack()
                for st in it:
                    tables.append(st.table)
                    if not args.no_ack:
                        st.ack()
                    if len(tables) == args.steps:
                        break
                elapsed = time.perf_counter() - t0
                stats = stream.stats
            digest, rows = digest_and_count(pa.concat_tables(tables))
        finally:
            subprocess.run([exe, "delete-topics", "--brokers", args.brokers, "--prefix", prefix], check=False)
    timed_rows = rows - tables[0].num_rows
    out = {
        "steps": len(tables),
        "rows": rows,
        "rows_per_s": round(timed_rows / elapsed),
        "steps_per_s": round((len(tables) - 1) / elapsed, 1),
        "mb_per_s": round(stats.bytes / elapsed / 1e6 * (len(tables) - 1) / len(tables), 2),
        "seconds": round(elapsed, 3),
        "validate": not args.no_validate,
        "ack": "none" if args.no_ack else ("async" if args.async_commit else "sync"),
        "digest_matches_go": digest == produced["digest"] and rows == produced["rows"],
    }
    print(json.dumps(out))
    return 0 if out["digest_matches_go"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
