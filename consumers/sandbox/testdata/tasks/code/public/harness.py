"""Run step of a code task (docs/stages.md, "A code task with hidden tests"): runs the solution
once per public test case, each as its own process with the case's input on stdin and a per-case
timeout, and writes what came back to the output directory for the grade step.

Usage: python3 -I harness.py {artifact} CASES_DIR {dir}/out

CASES_DIR is public (the sandbox passes /…/public/{meta.task}/cases; `task` is an --input-meta
key). For case NAME (CASES_DIR/NAME.in) it writes OUT/NAME.stdout and OUT/NAME.exit (the exit
status, or "timeout"). It judges nothing: the expected outputs are the grade step's, which the
solution never sees. An unknown task exits 2 (the task, not the solution, is broken).
"""
import os
import subprocess
import sys

solution, cases_dir, out = sys.argv[1:4]
case_timeout = float(os.environ.get("CASE_TIMEOUT", "10"))
if not os.path.isdir(cases_dir):
    print(f"no test cases at {cases_dir}", file=sys.stderr)
    sys.exit(2)
for name in sorted(os.listdir(cases_dir)):
    if not name.endswith(".in"):
        continue
    case = name[: -len(".in")]
    with open(os.path.join(cases_dir, name), "rb") as stdin, open(os.path.join(out, case + ".stdout"), "wb") as stdout:
        try:
            status = str(subprocess.run([sys.executable, "-I", solution], stdin=stdin, stdout=stdout, timeout=case_timeout).returncode)
        except subprocess.TimeoutExpired:
            status = "timeout"
    with open(os.path.join(out, case + ".exit"), "w", encoding="utf-8") as f:
        f.write(status + "\n")
