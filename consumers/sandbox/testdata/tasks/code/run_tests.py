"""Run a code task's tests against a solution (docs/stages.md, "A code task").

Usage: python3 run_tests.py {artifact} TESTS_FILE

TESTS_FILE names the task's tests (the sandbox passes /…/tasks/code/{meta.task}/test.py): every
function named test_* in it is called with the solution module as its argument. The score is the
fraction that passed. A solution that does not import scores 0; a tests file that does not
exist is an error (exit 2): the task, not the solution, is broken.
"""
import importlib.util
import json
import os
import sys


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


solution_path, tests_path = sys.argv[1], sys.argv[2]
if not os.path.isfile(tests_path):
    print(f"no tests at {tests_path}", file=sys.stderr)
    sys.exit(2)
tests = load("task_tests", tests_path)
cases = [getattr(tests, n) for n in sorted(dir(tests)) if n.startswith("test_")]
try:
    solution = load("solution", solution_path)
except Exception as e:  # the solution's own failure: score 0, not an error
    print(f"solution does not import: {e!r}", file=sys.stderr)
    print(json.dumps({"score": 0}))
    sys.exit(0)
passed = 0
for case in cases:
    try:
        case(solution)
        passed += 1
    except Exception as e:
        print(f"{case.__name__}: {e!r}", file=sys.stderr)
print(json.dumps({"score": passed / len(cases) if cases else 0}))
