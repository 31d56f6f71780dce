"""Grade a math answer against the rollout's meta label (docs/stages.md, "A math task").

Usage: python3 math_grade.py {dir}/rollout.json {artifact}

The last number in the completion (or the content of its last \\boxed{...}) is compared with
meta["label"], numerically when both parse as numbers, else as trimmed strings. Prints
{"score": 1} or {"score": 0} as the last stdout line; a rollout without a label is an error
(exit 2), never a silent 0.
"""
import json
import re
import sys

rollout = json.load(open(sys.argv[1], encoding="utf-8"))
label = (rollout.get("meta") or {}).get("label")
if label is None:
    print(f"rollout {rollout.get('rollout_id')} has no meta label", file=sys.stderr)
    sys.exit(2)
text = open(sys.argv[2], encoding="utf-8", errors="replace").read()
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
