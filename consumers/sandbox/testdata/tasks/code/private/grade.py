"""Grade step of a code task (docs/stages.md, "A code task with hidden tests"): compares what the
run step's harness brought back with the hidden expected outputs.

Usage: python3 -I grade.py {dir}/run EXPECTED_DIR

EXPECTED_DIR is private (the sandbox passes /…/private/{meta.task}; the run step never sees it).
Case NAME (EXPECTED_DIR/NAME.out) passes when RUN/out/NAME.exit is 0 and RUN/out/NAME.stdout
equals the expected output token for token. The score is the fraction of cases passed. Nothing
under RUN is executed or imported: it is the solution's data. An unknown task exits 2.
"""
import json
import os
import sys

run_dir, expected_dir = sys.argv[1:3]
if not os.path.isdir(expected_dir):
    print(f"no expected outputs at {expected_dir}", file=sys.stderr)
    sys.exit(2)


def read(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


cases = sorted(n[: -len(".out")] for n in os.listdir(expected_dir) if n.endswith(".out"))
passed = 0
for case in cases:
    want = read(os.path.join(expected_dir, case + ".out"))
    got = read(os.path.join(run_dir, "out", case + ".stdout"))
    status = read(os.path.join(run_dir, "out", case + ".exit"))
    ok = got is not None and status is not None and status.strip() == b"0" and got.split() == want.split()
    passed += ok
    print(f"{case}: {'pass' if ok else 'fail'}", file=sys.stderr)
print(json.dumps({"score": passed / len(cases) if cases else 0}))
