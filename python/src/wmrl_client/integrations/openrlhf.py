"""OpenRLHF: a remote reward model for ``--remote_rm_url`` backed by wmrl.

OpenRLHF 0.11 (``SingleTurnAgentExecutor``) posts **one sample per request**, right after each
generation, concurrently from its rollout actors: ``{"query": [q], "prompts": [p], "labels":
[l]}`` (query = prompt + response as rendered by the chat template), and reads ``rewards`` (used
for the advantage), ``scores`` (0–1, for dynamic filtering) and ``extra_logs`` from the JSON
reply. It waits 180 s per request and retries any error 5 times (1 s apart); after that the sample
has reward None, which crashes OpenRLHF's batch merge — hence the failure answer below.

The server files each sample with a ``Grouper``: the ``--group-size`` samples of one prompt form a
group, complete groups form wmrl steps (``--groups-per-step`` = ``rollout_batch_size`` publishes a
step as soon as a batch's groups are in; otherwise after ``--flush-after`` seconds without a new
sample), and each request is answered with its own samples' rewards::

    python -m wmrl_client.integrations.openrlhf --brokers kafka:9092 --run run-0042 \
        --group openrlhf-0042 --group-size 8 --groups-per-step 64 --port 5000
    # then: --remote_rm_url http://<host>:5000/get_reward

* The response text (query minus its prompt) is the rollout's artifact, the prompt its prompt and
  the label its ``meta["label"]`` — what the sandbox's grade step grades against (``{meta.label}``,
  ``{dir}/rollout.json``; private: the run step never sees it) and the world model's prompt template
  sees as ``.Meta.label``.
* ``rewards``/``scores``: wmrl's corrected reward; a row without a graded reward gets its group's
  mean over graded rows (so it adds nothing to OpenRLHF's group baseline) and ``wmrl_mask`` 0 in
  ``extra_logs`` (with ``wmrl_advantage``, ``wmrl_weight``, ``wmrl_anchor``, ``wmrl_step``).
* Special tokens are stripped from the response: OpenRLHF decodes prompt + response with
  ``skip_special_tokens=False``, so a response ends in the EOS token's text (``"print(40)<eos>"``)
  and a grader would see it. Stripped are ``--strip TEXT`` (repeatable), the special tokens of
  ``--tokenizer DIR`` (a Hugging Face tokenizer directory: its ``all_special_tokens``) and, unless
  either is given, ``DEFAULT_STRIP`` (common end/pad markers: ``<|im_end|>``, ``<|endoftext|>``,
  ``</s>``, ``<|eot_id|>``, ...); ``--no-strip`` keeps the response as sent.
* A sample with no reward to give — its whole group has no graded reward, or its step did not
  complete within ``--timeout`` (default 170 s, inside OpenRLHF's 180 s) or failed — is answered
  (``--on-failure reward``, the default) **HTTP 200** with ``rewards``/``scores`` ``--failure-reward``
  (default 0.0) and ``wmrl_failed`` 1, ``wmrl_mask`` 0 in ``extra_logs``, and a WARNING in the
  server's log. Why not an HTTP error: OpenRLHF 0.11's ``SingleTurnAgentExecutor`` retries any
  error 5 times (each waiting for the answer again: 5 × 170 s for a stuck step) and then trains
  the sample with reward None, which crashes its batch merge (``Experience.concat_experiences``:
  ``AttributeError: 'NoneType' object has no attribute 'size'``); ``null`` crashes it earlier
  (``torch.tensor``) and NaN turns the whole group's normalised advantage into NaN. A failure is
  group-wide (the grouper publishes whole groups only), so every sample of the group gets the same
  value and GRPO-style baselines (group_norm, rloo, reinforce_baseline, dr_grpo) give the group
  advantage 0: it trains on nothing rather than on a made-up reward. ``--on-failure error`` answers
  **422** (ungraded group) and **504** (timeout) instead, for clients that handle errors (verl's
  ``server_url`` path raises on either answer). A malformed request is always **400**.
* ``--mode batch`` keeps the older shape, where one request holds whole groups and becomes one
  step (400 when it does not).
* Hostile edges (the server is aiohttp's, with the bounds of ``Limits``): a connection has
  ``--header-timeout`` (10 s) to send a request's head and ``--body-timeout`` (30 s) to send an
  authorized body; at ``--max-connections`` (4096) a new connection closes the oldest one that has
  not sent a request, so half-open connections cannot keep a client out. A bad request line or
  header, or deeply nested JSON, is answered 400, a head over 8 KiB a line or 64 lines 431, a POST
  without a Content-Length 411, a body over ``--max-body-bytes`` (default 8 MiB) 413 before it is
  read, a compressed body 415: each logged as one line, never a traceback. With ``--token-file``
  (or WMRL_RM_TOKEN) every request must carry the token, as ``Authorization: Bearer <token>`` or,
  because OpenRLHF only takes a URL, ``?token=<token>`` in ``--remote_rm_url``; it is checked once
  the head is in, before any of the body is read (401 and the connection closes). Query strings
  are never logged.

``reward_func`` is the same for OpenRLHF's reward-function file mode (``--remote_rm_url <path of
this file>``; OpenRLHF loads the file by path, so it imports wmrl_client absolutely). Its grouper
lives in the calling process, so it sees whole groups only when every sample of a prompt is scored
in that one process; with several rollout processes use the server, which groups across them. It
uses the grouper given to ``configure`` or, on first use, builds one from the environment: WMRL_BROKERS,
WMRL_TOPIC_PREFIX (and the other WMRL_* connection variables), WMRL_RUN, WMRL_TRAINER_GROUP,
WMRL_GROUP_SIZE, WMRL_GROUPS_PER_STEP, WMRL_ANCHOR_FRACTION and WMRL_START_STEP.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import hmac
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_request import BaseRequest

from wmrl_client.errors import StepTimeoutError, WmrlError
from wmrl_client.integrations._batch import BatchScorer, fill_masked, task_meta
from wmrl_client.integrations._grouper import DEFAULT_FLUSH_AFTER, Grouper, SampleResult
from wmrl_client.integrations._server import (
    DEFAULT_MAX_BODY,
    Limits,
    Reply,
    RewardServer,
    add_client_args,
    client_from_args,
    json_reply,
    read_json,
    serve,
    token_from,
)
from wmrl_client.options import KafkaOptions
from wmrl_client.reward import RewardClient

log = logging.getLogger("wmrl_client.openrlhf")

DEFAULT_TIMEOUT = 170.0
"""Seconds a request waits for its samples' step: inside OpenRLHF's 180 s request timeout."""

DEFAULT_STRIP = ("<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|end|>", "<|im_start|>",
                 "</s>", "<eos>", "<pad>", "<|pad|>")  # fmt: skip
"""Special-token texts stripped from responses when neither ``--strip`` nor ``--tokenizer`` is given:
the end, turn and pad markers of the common chat models (Qwen, Llama 3, Mistral/Llama 2, Gemma, Phi)."""

FAILURE_MODES = ("reward", "error")
"""``--on-failure``: answer 200 with the failure reward (default), or an HTTP error (422/504)."""

_grouper: Grouper | None = None


class UngradedError(WmrlError):
    """A sample's whole group has no graded reward: there is nothing honest to answer."""


def response_of(query: str, prompt: str) -> str:
    """The response part of a query (OpenRLHF sends prompt + response)."""
    return query[len(prompt) :] if prompt and query.startswith(prompt) else query


def strip_special(text: str, tokens: Sequence[str]) -> str:
    """``text`` without any occurrence of ``tokens`` (longest first, so ``<|im_end|>`` goes whole
    before a shorter token inside it could): what ``decode(skip_special_tokens=True)`` would have
    given for a response whose special tokens are these."""
    for t in sorted({t for t in tokens if t}, key=len, reverse=True):
        text = text.replace(t, "")
    return text


def tokenizer_specials(path: str) -> list[str]:
    """The special tokens of a Hugging Face tokenizer directory (``all_special_tokens`` plus its added
    special tokens); needs ``transformers``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    added = [str(t) for t in getattr(tok, "added_tokens_decoder", {}).values() if getattr(t, "special", False)]
    return sorted({*map(str, tok.all_special_tokens), *added})


@dataclass(frozen=True)
class Failure:
    """How a sample without a reward is answered (see the module doc): ``mode`` "reward" (HTTP 200 with
    ``reward`` and ``wmrl_failed`` 1) or "error" (HTTP 422/504)."""

    mode: str = "reward"
    reward: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in FAILURE_MODES:
            raise ValueError(f"on_failure {self.mode!r}: want one of {FAILURE_MODES}")
        if not math.isfinite(self.reward):
            raise ValueError(f"failure reward {self.reward}: want a finite number (NaN poisons the group)")

    def reply(self, n: int) -> dict[str, Any]:
        """The 200 reply for n samples that have no reward."""
        vals = [self.reward] * n
        logs = {"wmrl_advantage": [0.0] * n, "wmrl_weight": [0.0] * n, "wmrl_mask": [0.0] * n,
                "wmrl_anchor": [0.0] * n, "wmrl_step": [-1.0] * n, "wmrl_failed": [1.0] * n}  # fmt: skip
        return {"rewards": vals, "scores": list(vals), "extra_logs": logs}


def parse_request(
    request: Mapping[str, Any], strip: Sequence[str] = ()
) -> tuple[list[str], list[str], list[Any]]:
    """(responses, prompts, labels) of a --remote_rm_url request (ValueError when malformed); the
    ``strip`` texts are removed from each response (see strip_special).

    Two optional wmrl fields ride along (sent by ``integrations.verl`` with ``server_url``, ignored by
    OpenRLHF): ``keys``, one group key per sample (default: the prompt), and ``meta``, one dict of
    task fields per sample (merged with the label's); see ``extensions``."""
    queries = request.get("query")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise ValueError('request field "query": want a list of strings')
    prompts = request.get("prompts")
    if prompts is None:
        prompts = queries
    if not isinstance(prompts, list) or len(prompts) != len(queries) or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f'request field "prompts": want a list of {len(queries)} strings, one per query')
    labels = request.get("labels")
    if labels is None:
        labels = [None] * len(queries)
    if not isinstance(labels, list) or len(labels) != len(queries):
        raise ValueError(f'request field "labels": want a list of {len(queries)} labels, one per query')
    responses = [strip_special(response_of(q, p), strip) for q, p in zip(queries, prompts, strict=True)]
    return responses, prompts, labels


def extensions(request: Mapping[str, Any], n: int) -> tuple[list[Any] | None, list[dict[str, str]]]:
    """The optional ``keys`` and ``meta`` of a request (see parse_request), checked."""
    keys = request.get("keys")
    if keys is not None and (not isinstance(keys, list) or len(keys) != n
                             or not all(isinstance(k, str | int) for k in keys)):  # fmt: skip
        raise ValueError(f'request field "keys": want a list of {n} strings, one per query')
    meta = request.get("meta")
    if meta is None:
        return keys, [{} for _ in range(n)]
    if not isinstance(meta, list) or len(meta) != n or not all(isinstance(m, dict) for m in meta):
        raise ValueError(f'request field "meta": want a list of {n} objects, one per query')
    return keys, [task_meta(m, what="request meta") for m in meta]


def label_meta(label: Any) -> dict[str, str]:
    """A sample's label as rollout meta: ``{"label": text}`` (JSON text unless a string)."""
    if label is None:
        return {}
    text = label if isinstance(label, str) else json.dumps(label, sort_keys=True, default=str)
    return task_meta({"label": text}, what="OpenRLHF label")


def reply_of(results: Sequence[SampleResult]) -> dict[str, Any]:
    """The JSON reply for a request's samples (UngradedError when one's group has no graded row)."""
    bad = [r for r in results if not r.group_graded]
    if bad:
        r = bad[0]
        raise UngradedError(  # the server turns it into its failure answer (Failure)
            f"group {r.group_id} of wmrl step {r.step} has no graded reward (the world model and the sandbox "
            "failed every sample of it): no reward to give"
        )
    rewards = [r.reward for r in results]
    return {
        "rewards": rewards,
        "scores": rewards,
        "extra_logs": {k: [r.extra()[k] for r in results] for k in results[0].extra()} | {
            "wmrl_failed": [0.0] * len(results)} if results else {},
    }  # fmt: skip


def _submit_samples(
    grouper: Grouper, request: Mapping[str, Any], strip: Sequence[str] = ()
) -> list[Future[SampleResult]]:
    """File each sample of a request with the grouper (ValueError when the request is malformed)."""
    responses, prompts, labels = parse_request(request, strip)
    keys, extra = extensions(request, len(responses))
    metas = [{**x, **label_meta(lb)} for lb, x in zip(labels, extra, strict=True)]
    keys = keys if keys is not None else prompts
    return [grouper.submit(k, r, prompt=p, meta=m) for k, r, p, m in zip(keys, responses, prompts, metas, strict=True)]


def _step_timeout(grouper: Grouper, futs: list[Future[SampleResult]], timeout: float | None) -> StepTimeoutError:
    grouper.withdraw(futs)  # OpenRLHF retries: the retry must not meet this copy in the group
    return StepTimeoutError(
        f"no wmrl reward within {timeout:g}s for {len(futs)} sample(s) (pending: {grouper.pending}; a group "
        f"completes when its {grouper.group_size} samples are in)"
    )


def answer_samples(
    grouper: Grouper, request: Mapping[str, Any], timeout: float | None = DEFAULT_TIMEOUT, *,
    strip: Sequence[str] = (),
) -> dict[str, Any]:  # fmt: skip
    """The reply to one request, each sample scored in its group through the grouper (errors raised:
    StepTimeoutError, UngradedError, the step's own)."""
    futs = _submit_samples(grouper, request, strip)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:  # one deadline for the request, however many samples it holds
        results = [f.result(timeout=None if deadline is None else max(0.0, deadline - time.monotonic())) for f in futs]
    except FutureTimeout:
        raise _step_timeout(grouper, futs, timeout) from None
    return reply_of(results)


async def answer_samples_async(
    grouper: Grouper, request: Mapping[str, Any], timeout: float | None = DEFAULT_TIMEOUT, *,
    strip: Sequence[str] = (),
) -> dict[str, Any]:  # fmt: skip
    """answer_samples for the server's event loop: the wait for the step holds no thread."""
    futs = _submit_samples(grouper, request, strip)
    try:
        async with asyncio.timeout(timeout):
            results = [await asyncio.wrap_future(f) for f in futs]
    except TimeoutError:
        raise _step_timeout(grouper, futs, timeout) from None
    except asyncio.CancelledError:  # the server is stopping
        grouper.withdraw(futs)
        raise
    return reply_of(results)


def answer(scorer: BatchScorer, request: Mapping[str, Any], *, strip: Sequence[str] = ()) -> dict[str, Any]:
    """The reply to one request holding whole groups, scored as one wmrl step (``--mode batch``)."""
    responses, prompts, labels = parse_request(request, strip)
    res = scorer.score(responses, prompts, prompts, meta=[label_meta(lb) for lb in labels])
    used = [float(u) for u in fill_masked(res)]
    return {
        "rewards": used,
        "scores": used,
        "extra_logs": {
            "wmrl_advantage": [float(a) for a in res.advantage],
            "wmrl_weight": [float(w) for w in res.weight],
            "wmrl_mask": [float(m) for m in res.mask],
            "wmrl_anchor": [float(s == "anchor") for s in res.source],
        },
    }


def configure(grouper: Grouper) -> None:
    """Set the grouper reward_func uses."""
    global _grouper
    _grouper = grouper


def grouper_from_env(env: Mapping[str, str] | None = None) -> Grouper:
    """A grouper configured by the WMRL_* environment (see the module doc)."""
    e = os.environ if env is None else env
    missing = [k for k in ("WMRL_RUN", "WMRL_TRAINER_GROUP", "WMRL_GROUP_SIZE") if not e.get(k)]
    if missing:
        raise RuntimeError(
            f"wmrl reward_func: set {' and '.join(missing)} (the run id, this trainer's consumer group and "
            "n_samples_per_prompt), or call wmrl_client.integrations.openrlhf.configure(grouper)"
        )
    client = RewardClient(
        None, e["WMRL_RUN"], e["WMRL_TRAINER_GROUP"], kafka=KafkaOptions.from_env(e),
        anchor_fraction=float(e.get("WMRL_ANCHOR_FRACTION", "0.25")),
    )  # fmt: skip
    per_step = e.get("WMRL_GROUPS_PER_STEP")
    return Grouper(client, group_size=int(e["WMRL_GROUP_SIZE"]), groups_per_step=int(per_step) if per_step else None,
                   start_step=int(e.get("WMRL_START_STEP", "0")))  # fmt: skip


def strip_from_env(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The texts reward_func strips: WMRL_STRIP (whitespace-separated; set but empty: strip nothing),
    else DEFAULT_STRIP."""
    e = os.environ if env is None else env
    v = e.get("WMRL_STRIP")
    return DEFAULT_STRIP if v is None else tuple(v.split())


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **_: Any) -> dict[str, Any]:
    """OpenRLHF's reward-function file interface: the same reply as the server, as torch tensors.

    Special tokens: WMRL_STRIP (see strip_from_env). A sample without a reward gets the server's
    default failure answer (reward WMRL_FAILURE_REWARD, default 0.0, and ``wmrl_failed`` 1): an
    exception here would make OpenRLHF train it with reward None and crash its batch merge."""
    global _grouper
    if _grouper is None:
        _grouper = grouper_from_env()
    import torch

    req = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
    try:
        out = answer_samples(_grouper, req, strip=strip_from_env())
    except (StepTimeoutError, UngradedError, WmrlError, RuntimeError) as e:
        log.warning("wmrl reward_func: no reward for %d sample(s), answering the failure reward: %s", len(queries), e)
        out = Failure(reward=float(os.environ.get("WMRL_FAILURE_REWARD", "0"))).reply(len(queries))
    return {
        "rewards": torch.tensor(out["rewards"]),
        "scores": torch.tensor(out["scores"]),
        "extra_logs": {k: torch.tensor(v) for k, v in out["extra_logs"].items()},
    }


def _authorized(request: BaseRequest, want: bytes) -> bool:
    auth = request.headers.get("Authorization", "")
    got = auth[7:] if auth.startswith("Bearer ") else request.query.get("token", "")
    return hmac.compare_digest(got.encode(), want)


def make_server(
    scorer: Grouper | BatchScorer,
    host: str = "127.0.0.1",
    port: int = 5000,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    max_body: int = DEFAULT_MAX_BODY,
    token: str | None = None,
    limits: Limits | None = None,
    strip: Sequence[str] = DEFAULT_STRIP,
    failure: Failure | None = None,
) -> RewardServer:
    """An HTTP server answering POST (any path) with the reward reply; serve_forever() runs it.

    A Grouper answers per sample (OpenRLHF 0.11), a BatchScorer per request of whole groups.
    ``token`` requires ``Authorization: Bearer <token>`` or ``?token=<token>``, checked before any
    of the body is read (401, and the connection closes); ``max_body`` bounds the body (413 above
    it, 411 without a Content-Length); ``limits`` the rest (Limits). ``strip``: texts removed from
    each response (``()``: none); ``failure``: the answer for a sample without a reward (default
    ``Failure()``: HTTP 200 with reward 0.0 and ``wmrl_failed`` 1; ``Failure("error")``: 422/504)."""
    want = token.encode() if token else None
    fail = failure or Failure()
    strip = tuple(strip)
    lim = dataclasses.replace(limits or Limits(), max_body=max_body)
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="wmrl-rm")  # batch mode's blocking steps

    async def handle(request: BaseRequest) -> web.StreamResponse:
        if want is not None and not _authorized(request, want):
            return json_reply(401, {"error": "missing or wrong token"}, close=True)
        try:
            req = await read_json(request, lim)
        except Reply as e:
            return json_reply(e.status, {"error": str(e)}, close=e.status != 400)
        n = len(req["query"]) if isinstance(req.get("query"), list) else 0
        try:
            if isinstance(scorer, Grouper):
                return json_reply(200, await answer_samples_async(scorer, req, timeout, strip=strip))
            loop = asyncio.get_running_loop()
            return json_reply(200, await loop.run_in_executor(pool, functools.partial(answer, strip=strip),
                                                               scorer, req))  # fmt: skip
        except ValueError as e:  # malformed: the client's bug, never a reward
            return json_reply(400, {"error": str(e)})
        except (StepTimeoutError, UngradedError, WmrlError) as e:
            if fail.mode == "reward":
                log.warning("no reward for %d sample(s), answering the failure reward %g: %s", n, fail.reward, e)
                return json_reply(200, fail.reply(n))
            if isinstance(e, StepTimeoutError):
                return json_reply(504, {"error": str(e)})
            if isinstance(e, UngradedError):
                return json_reply(422, {"error": str(e)})
            return json_reply(400, {"error": str(e)})

    return RewardServer(handle, host, port, lim)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description="wmrl remote reward model for OpenRLHF --remote_rm_url", allow_abbrev=False
    )
    add_client_args(ap)
    ap.add_argument("--group-size", type=int, default=None, help="n_samples_per_prompt (required in sample mode)")
    ap.add_argument("--groups-per-step", type=int, default=None, help="prompts per batch (rollout_batch_size)")
    ap.add_argument("--flush-after", type=float, default=DEFAULT_FLUSH_AFTER,
                    help="seconds without a sample after which complete groups are published")  # fmt: skip
    ap.add_argument("--mode", choices=("sample", "batch"), default="sample",
                    help="sample: a request per sample (OpenRLHF 0.11); batch: requests hold whole groups")  # fmt: skip
    ap.add_argument("--start-step", type=int, default=0, help="wmrl step of the first request (resume)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds a request waits for its step")
    ap.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY)
    ap.add_argument("--header-timeout", type=float, default=Limits.header_timeout,
                    help="seconds a connection may take to send a request's head")  # fmt: skip
    ap.add_argument("--body-timeout", type=float, default=Limits.body_timeout,
                    help="seconds an authorized request may take to send its body")  # fmt: skip
    ap.add_argument("--max-connections", type=int, default=Limits.max_connections,
                    help="open connections at most (the oldest idle one is closed for a new one)")  # fmt: skip
    ap.add_argument("--token-file", default=None, help="file holding the bearer token (default: WMRL_RM_TOKEN)")
    ap.add_argument("--strip", action="append", default=None, metavar="TEXT",
                    help="a special-token text to remove from responses (repeatable; default: DEFAULT_STRIP)")  # fmt: skip
    ap.add_argument("--tokenizer", default=None, metavar="DIR",
                    help="strip this Hugging Face tokenizer's special tokens (with any --strip texts)")  # fmt: skip
    ap.add_argument("--no-strip", action="store_true", help="keep responses as OpenRLHF sends them")
    ap.add_argument("--on-failure", choices=FAILURE_MODES, default="reward",
                    help="a sample without a reward: 200 with --failure-reward and wmrl_failed 1 (reward), "
                         "or HTTP 422/504 (error), which OpenRLHF 0.11 retries 5 times and then crashes on")  # fmt: skip
    ap.add_argument("--failure-reward", type=float, default=0.0, help="the reward of --on-failure reward")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5000)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    if args.mode == "sample" and not args.group_size:
        ap.error("--group-size is required in sample mode (OpenRLHF's n_samples_per_prompt)")
    if args.no_strip and (args.strip or args.tokenizer):
        ap.error("--no-strip contradicts --strip/--tokenizer")
    try:
        failure = Failure(args.on_failure, args.failure_reward)
    except ValueError as e:
        ap.error(str(e))
    strip: tuple[str, ...] = ()
    if not args.no_strip:
        strip = tuple(args.strip or ()) + tuple(tokenizer_specials(args.tokenizer) if args.tokenizer else ())
        strip = strip or DEFAULT_STRIP
    token = token_from(args.token_file)
    client = client_from_args(args, "wmrl openrlhf")
    scorer: Grouper | BatchScorer
    if args.mode == "sample":
        scorer = Grouper(client, group_size=args.group_size, groups_per_step=args.groups_per_step,
                         flush_after=args.flush_after, start_step=args.start_step, timeout=args.timeout)  # fmt: skip
    else:
        scorer = BatchScorer(client, group_size=args.group_size, start_step=args.start_step, timeout=args.timeout)
    limits = Limits(header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                    max_connections=args.max_connections)  # fmt: skip
    srv = make_server(scorer, args.host, args.port, timeout=args.timeout, max_body=args.max_body_bytes, token=token,
                      limits=limits, strip=strip, failure=failure)  # fmt: skip
    log.info("stripping %d special-token text(s) from responses: %s", len(strip), " ".join(strip) or "none")
    log.info("serving OpenRLHF reward requests (%s mode%s) on http://%s:%d/ for run %s", args.mode,
             ", token required" if token else "", args.host, srv.server_address[1], args.run)  # fmt: skip
    serve(srv, *([scorer] if isinstance(scorer, Grouper) else []), client)


if __name__ == "__main__":
    main()
