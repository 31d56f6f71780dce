"""Grade step of a math task (docs/stages.md, "A math task graded against label").

Usage: python3 -I grade.py {dir}

{dir} is the grade step's directory: rollout.json is the rollout record (meta["label"] is the
answer, private: the run step never sees it) and run/stdout what the run step printed (`cat
{artifact}`: the completion). The last number of the completion (or the content of its last
\\boxed{...}) is compared with the label, numerically when both parse as numbers, else as trimmed
strings. Prints {"score": 1} or {"score": 0}; a rollout without a label is an error (exit 2), never
a silent 0.
"""
import json
import os
import re
import sys

grade_dir = sys.argv[1]
with open(os.path.join(grade_dir, "rollout.json"), encoding="utf-8") as f:
    rollout = json.load(f)
label = (rollout.get("meta") or {}).get("label")
if label is None:
    print(f"rollout {rollout.get('rollout_id')} has no meta label", file=sys.stderr)
    sys.exit(2)
try:
    with open(os.path.join(grade_dir, "run", "stdout"), encoding="utf-8", errors="replace") as f:
        text = f.read()
except OSError:  # the run step brought nothing back: nothing to credit
    text = ""
boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
numbers = re.findall(r"-?\d+(?:\.\d+)?(?:/\d+)?", text)
answer = boxed[-1] if boxed else (numbers[-1] if numbers else "")


def number(s):
    s = s.strip().replace(",", "")
    if "/" in s:
        n, d = s.split("/", 1)
        return float(n) / float(d)
    return float(s)


try:
    correct = abs(number(answer) - number(label)) < 1e-9
except (ValueError, ZeroDivisionError):
    correct = answer.strip() == label.strip()
print(f"answer {answer!r}, label {label!r}", file=sys.stderr)
print(json.dumps({"score": 1 if correct else 0}))
