"""RewardClient.close_run and the context manager's end of run, against a fake producer."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from client_codecs import decode_record
from test_reward import RUN, fakes  # noqa: F401 (the fixture)

from wmrl_client import RunEndedError, reason


def ends(producer: Any) -> list[tuple[str, bytes, int, bool, int]]:
    """(topic, key, step, end_of_run, groups) of every steps- and run-control-topic record the
    producer sent."""
    out = []
    for m in producer.produced:
        if m["topic"].endswith(("steps.v1", "runs.v1")):
            rec = decode_record("wmrl.step.v1", m["value"])
            out.append((m["topic"], m["key"], rec.step, rec.end_of_run, len(rec.groups)))
    return out


def test_close_run_publishes_the_end_once_keyed_like_the_manifests(fakes: Any) -> None:  # noqa: F811
    producers, _, make = fakes
    client = make()
    client.publish(3, [["a", "b"]])
    client.publish(1, [["a", "b"]])  # a re-sent earlier step does not move the last step back
    first = client.close_run()
    assert (first.step, first.end_of_run, first.groups) == (3, True, [])
    assert client.close_run() is first  # twice: a no-op
    sent = ends(producers[-1])
    assert sent == [("wmrl.steps.v1", RUN.encode(), 3, False, 1), ("wmrl.steps.v1", RUN.encode(), 1, False, 1),
                    ("wmrl.runs.v1", RUN.encode(), 3, True, 0)]  # fmt: skip
    headers = dict(producers[-1].produced[-1]["headers"])
    assert headers["wmrl-run"] == RUN.encode() and headers["wmrl-step"] == b"3"
    with pytest.raises(RunEndedError, match="ended after step 3") as ei:
        client.publish(4, [["a"]])
    assert reason(ei.value) == "run_ended" and ei.value.last_step == 3
    client.close()
    assert len(ends(producers[-1])) == 3


@pytest.mark.parametrize(
    "case,body,want_end",
    [
        ("clean exit ends the run", lambda c: c.publish(5, [["a"]]), 5),
        ("exception does not", lambda c: (c.publish(5, [["a"]]), 1 / 0), None),
        ("nothing published, nothing to end", lambda c: None, None),
        ("closed by hand first", lambda c: (c.publish(5, [["a"]]), c.close_run(7)), 7),
    ],
)
def test_context_manager_ends_the_run_only_on_a_clean_exit(
    fakes: Any,  # noqa: F811
    case: str,
    body: Any,
    want_end: int | None,
) -> None:
    producers, _, make = fakes
    with pytest.raises(ZeroDivisionError) if "exception" in case else contextlib.nullcontext():
        with make() as client:
            body(client)
    got = [step for _, _, step, end, _ in ends(producers[-1]) if end]
    assert got == ([] if want_end is None else [want_end]), case


def test_end_run_on_exit_false_leaves_the_run_open(fakes: Any) -> None:  # noqa: F811
    producers, _, make = fakes
    with make(end_run_on_exit=False) as client:
        client.publish(2, [["a"]])
    assert [end for *_, end, _ in ends(producers[-1])] == [False]


@pytest.mark.parametrize(
    "published,last_step,err",
    [
        (None, None, "published no step"),
        (None, -1, "want a step >= 0"),
        (4, 3, "is before step 4"),
    ],
)
def test_close_run_refuses_an_unknown_or_contradicting_last_step(
    fakes: Any,  # noqa: F811
    published: int | None,
    last_step: int | None,
    err: str,
) -> None:
    producers, _, make = fakes
    client = make()
    if published is not None:
        client.publish(published, [["a"]])
    with pytest.raises(ValueError, match=err):
        client.close_run(last_step)
    assert not any(end for *_, end, _ in ends(producers[-1]))
    client.close()
