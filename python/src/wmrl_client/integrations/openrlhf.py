"""OpenRLHF: a remote reward model for ``--remote_rm_url`` backed by wmrl.

OpenRLHF 0.11 (``SingleTurnAgentExecutor``) posts **one sample per request**, right after each
generation, concurrently from its rollout actors: ``{"query": [q], "prompts": [p], "labels":
[l]}`` (query = prompt + response as rendered by the chat template), and reads ``rewards`` (used
for the advantage), ``scores`` (0–1, for dynamic filtering) and ``extra_logs`` from the JSON
reply. It waits 180 s per request and retries 5 times; a failed request is logged and the sample
trains without a reward.

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
* Never a silent 0: a sample whose whole group has no graded reward is answered **HTTP 422**, a
  step that does not complete within ``--timeout`` (default 170 s, inside OpenRLHF's 180 s) **504**,
  a malformed request **400** — OpenRLHF logs each and trains that sample without a reward.
* ``--mode batch`` keeps the older shape, where one request holds whole groups and becomes one
  step (400 when it does not).
* Hostile edges: bodies over ``--max-body-bytes`` (default 8 MiB) are refused with 413 before they
  are read; with ``--token-file`` (or WMRL_RM_TOKEN) every request must carry the token, as
  ``Authorization: Bearer <token>`` or, because OpenRLHF only takes a URL, ``?token=<token>`` in
  ``--remote_rm_url`` (query strings are never logged).

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
import hmac
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from wmrl_client.errors import StepTimeoutError, WmrlError
from wmrl_client.integrations._batch import BatchScorer, fill_masked, task_meta
from wmrl_client.integrations._grouper import DEFAULT_FLUSH_AFTER, Grouper, SampleResult
from wmrl_client.options import KafkaOptions
from wmrl_client.reward import RewardClient

log = logging.getLogger("wmrl_client.openrlhf")

DEFAULT_TIMEOUT = 170.0
"""Seconds a request waits for its samples' step: inside OpenRLHF's 180 s request timeout."""

DEFAULT_MAX_BODY = 8 << 20
"""Largest request body read (bytes); a per-sample request is a few KiB."""

_grouper: Grouper | None = None


class UngradedError(WmrlError):
    """A sample's whole group has no graded reward: there is nothing honest to answer."""


def response_of(query: str, prompt: str) -> str:
    """The response part of a query (OpenRLHF sends prompt + response)."""
    return query[len(prompt) :] if prompt and query.startswith(prompt) else query


def parse_request(request: Mapping[str, Any]) -> tuple[list[str], list[str], list[Any]]:
    """(responses, prompts, labels) of a --remote_rm_url request (ValueError when malformed).

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
    return [response_of(q, p) for q, p in zip(queries, prompts, strict=True)], prompts, labels


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
        raise UngradedError(
            f"group {r.group_id} of wmrl step {r.step} has no graded reward (the world model and the sandbox "
            "failed every sample of it): no reward to give"
        )
    rewards = [r.reward for r in results]
    return {
        "rewards": rewards,
        "scores": rewards,
        "extra_logs": {k: [r.extra()[k] for r in results] for k in results[0].extra()} if results else {},
    }


def answer_samples(
    grouper: Grouper, request: Mapping[str, Any], timeout: float | None = DEFAULT_TIMEOUT
) -> dict[str, Any]:
    """The reply to one request, each sample scored in its group through the grouper."""
    responses, prompts, labels = parse_request(request)
    keys, extra = extensions(request, len(responses))
    metas = [{**x, **label_meta(lb)} for lb, x in zip(labels, extra, strict=True)]
    keys = keys if keys is not None else prompts
    futs: list[Future[SampleResult]] = [
        grouper.submit(k, r, prompt=p, meta=m) for k, r, p, m in zip(keys, responses, prompts, metas, strict=True)
    ]
    deadline = None if timeout is None else time.monotonic() + timeout
    try:  # one deadline for the request, however many samples it holds
        results = [f.result(timeout=None if deadline is None else max(0.0, deadline - time.monotonic())) for f in futs]
    except FutureTimeout:
        grouper.withdraw(futs)  # OpenRLHF retries: the retry must not meet this copy in the group
        raise StepTimeoutError(
            f"no wmrl reward within {timeout:g}s for {len(futs)} sample(s) (pending: {grouper.pending}; a group "
            f"completes when its {grouper.group_size} samples are in)"
        ) from None
    return reply_of(results)


def answer(scorer: BatchScorer, request: Mapping[str, Any]) -> dict[str, Any]:
    """The reply to one request holding whole groups, scored as one wmrl step (``--mode batch``)."""
    responses, prompts, labels = parse_request(request)
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


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **_: Any) -> dict[str, Any]:
    """OpenRLHF's reward-function file interface: the same reply as the server, as torch tensors."""
    global _grouper
    if _grouper is None:
        _grouper = grouper_from_env()
    import torch

    out = answer_samples(_grouper, {"query": list(queries), "prompts": list(prompts), "labels": list(labels)})
    return {
        "rewards": torch.tensor(out["rewards"]),
        "scores": torch.tensor(out["scores"]),
        "extra_logs": {k: torch.tensor(v) for k, v in out["extra_logs"].items()},
    }


def make_server(
    scorer: Grouper | BatchScorer,
    host: str = "127.0.0.1",
    port: int = 5000,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    max_body: int = DEFAULT_MAX_BODY,
    token: str | None = None,
) -> ThreadingHTTPServer:
    """An HTTP server answering POST (any path) with the reward reply; serve_forever() runs it.

    A Grouper answers per sample (OpenRLHF 0.11), a BatchScorer per request of whole groups.
    ``token`` requires ``Authorization: Bearer <token>`` or ``?token=<token>``; ``max_body``
    bounds the body read (413 above it, 411 without a Content-Length)."""
    want = token.encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if want is not None and not self._authorized():
                self._reply(401, {"error": "missing or wrong token"})
                return
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self._reply(411, {"error": "a Content-Length is required"})
                return
            if int(length) > max_body:
                self._reply(413, {"error": f"body of {length} bytes exceeds the {max_body} byte limit"})
                return
            try:
                req = json.loads(self.rfile.read(int(length)) or b"null")
                if not isinstance(req, dict):
                    raise ValueError("request body: want a JSON object")
                if isinstance(scorer, Grouper):
                    self._reply(200, answer_samples(scorer, req, timeout))
                else:
                    self._reply(200, answer(scorer, req))
            except StepTimeoutError as e:
                self._reply(504, {"error": str(e)})
            except UngradedError as e:
                self._reply(422, {"error": str(e)})
            except (ValueError, WmrlError) as e:
                self._reply(400, {"error": str(e)})

        def _authorized(self) -> bool:
            auth = self.headers.get("Authorization", "")
            query = parse_qs(urlsplit(self.path).query).get("token") or [""]
            got = auth[7:] if auth.startswith("Bearer ") else query[0]
            return want is not None and hmac.compare_digest(got.encode(), want)

        def _reply(self, code: int, body: dict[str, Any]) -> None:
            out = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            if code in (411, 413):
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(out)

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            # The request line without its query string: a ?token= never reaches the log.
            level = logging.INFO if str(code).startswith("2") else logging.WARNING
            log.log(level, "%s %s %s -> %s", self.address_string(), self.command, urlsplit(self.path).path, code)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.info("%s " + fmt, self.address_string(), *args)

    class Server(ThreadingHTTPServer):
        request_queue_size = 1024  # OpenRLHF's actors connect all at once; the default backlog is 5
        daemon_threads = True

    return Server((host, port), Handler)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description="wmrl remote reward model for OpenRLHF --remote_rm_url", allow_abbrev=False
    )
    ap.add_argument("--brokers", default=None, help="seed brokers (default: WMRL_BROKERS)")
    ap.add_argument("--topic-prefix", default=None)
    ap.add_argument("--run", required=True, help="wmrl run id")
    ap.add_argument("--group", required=True, help="consumer group of this trainer job")
    ap.add_argument("--group-size", type=int, default=None, help="n_samples_per_prompt (required in sample mode)")
    ap.add_argument("--groups-per-step", type=int, default=None, help="prompts per batch (rollout_batch_size)")
    ap.add_argument("--flush-after", type=float, default=DEFAULT_FLUSH_AFTER,
                    help="seconds without a sample after which complete groups are published")  # fmt: skip
    ap.add_argument("--mode", choices=("sample", "batch"), default="sample",
                    help="sample: a request per sample (OpenRLHF 0.11); batch: requests hold whole groups")  # fmt: skip
    ap.add_argument("--anchor-fraction", type=float, default=0.25)
    ap.add_argument("--start-step", type=int, default=0, help="wmrl step of the first request (resume)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds a request waits for its step")
    ap.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY)
    ap.add_argument("--token-file", default=None, help="file holding the bearer token (default: WMRL_RM_TOKEN)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5000)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    if args.mode == "sample" and not args.group_size:
        ap.error("--group-size is required in sample mode (OpenRLHF's n_samples_per_prompt)")
    token = os.environ.get("WMRL_RM_TOKEN") or None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip() or None
    opts = KafkaOptions.from_env()
    if args.topic_prefix is not None:
        opts.topic_prefix = args.topic_prefix
    try:
        client = RewardClient(args.brokers, args.run, args.group, kafka=opts, anchor_fraction=args.anchor_fraction)
    except WmrlError as e:
        sys.exit(f"wmrl openrlhf: {e}")
    scorer: Grouper | BatchScorer
    if args.mode == "sample":
        scorer = Grouper(client, group_size=args.group_size, groups_per_step=args.groups_per_step,
                         flush_after=args.flush_after, start_step=args.start_step, timeout=args.timeout)  # fmt: skip
    else:
        scorer = BatchScorer(client, group_size=args.group_size, start_step=args.start_step, timeout=args.timeout)
    srv = make_server(scorer, args.host, args.port, timeout=args.timeout, max_body=args.max_body_bytes, token=token)
    log.info("serving OpenRLHF reward requests (%s mode%s) on http://%s:%d/ for run %s", args.mode,
             ", token required" if token else "", args.host, srv.server_address[1], args.run)  # fmt: skip
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        if isinstance(scorer, Grouper):
            scorer.close()
        client.close()


if __name__ == "__main__":
    main()
