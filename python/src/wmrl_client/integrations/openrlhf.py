"""OpenRLHF: a remote reward model for ``--remote_rm_url`` backed by wmrl.

OpenRLHF posts ``{"query": [...], "prompts": [...], "labels": [...]}`` (query = prompt +
response, as rendered by the chat template) to the URL and reads ``rewards`` (used for the
advantage), ``scores`` (0–1, for dynamic filtering) and ``extra_logs`` (logged per sample) from
the JSON reply. The server turns each request into one wmrl step: samples with the same prompt
form a group (OpenRLHF samples ``n_samples_per_prompt`` per prompt), the response text (query
minus its prompt) is the rollout's artifact, and the reply carries wmrl's corrected rewards
(a masked-out row gets its group's mean over graded rows) and, in ``extra_logs``,
``wmrl_advantage``, ``wmrl_weight``, ``wmrl_mask`` and ``wmrl_anchor``.

    python -m wmrl_client.integrations.openrlhf --brokers kafka:9092 --run run-0042 \\
        --group openrlhf-0042 --group-size 8 --port 5000
    # then: --remote_rm_url http://<host>:5000/get_reward

Each request must hold whole groups (size ``--group-size``); a request that does not is answered
400 with the reason, a step that does not complete in time 504. Requests are scored one at a
time, in arrival order, as consecutive steps.

``reward_func`` is the same for OpenRLHF's reward-function file mode (``--remote_rm_url
<path of this file>``; OpenRLHF loads the file by path, so it imports wmrl_client absolutely).
It uses the scorer given to ``configure`` or, on first use, builds one from the environment:
WMRL_BROKERS, WMRL_TOPIC_PREFIX (and the other WMRL_* connection variables), WMRL_RUN,
WMRL_TRAINER_GROUP, WMRL_GROUP_SIZE, WMRL_ANCHOR_FRACTION and WMRL_START_STEP.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from wmrl_client.errors import StepTimeoutError, WmrlError
from wmrl_client.integrations._batch import BatchScorer, fill_masked
from wmrl_client.options import KafkaOptions
from wmrl_client.reward import RewardClient

log = logging.getLogger("wmrl_client.openrlhf")

_scorer: BatchScorer | None = None


def response_of(query: str, prompt: str) -> str:
    """The response part of a query (OpenRLHF sends prompt + response)."""
    return query[len(prompt) :] if prompt and query.startswith(prompt) else query


def answer(scorer: BatchScorer, request: dict[str, Any]) -> dict[str, Any]:
    """The reply to one --remote_rm_url request (raises ValueError for a malformed one)."""
    queries = request.get("query")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise ValueError('request field "query": want a list of strings')
    prompts = request.get("prompts")
    if prompts is None:
        prompts = queries
    if not isinstance(prompts, list) or len(prompts) != len(queries):
        raise ValueError(f'request field "prompts": want a list of {len(queries)} strings, one per query')
    responses = [response_of(q, p) for q, p in zip(queries, prompts, strict=True)]
    res = scorer.score(responses, prompts, prompts)
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


def configure(scorer: BatchScorer) -> None:
    """Set the scorer reward_func uses."""
    global _scorer
    _scorer = scorer


def scorer_from_env(env: Mapping[str, str] | None = None) -> BatchScorer:
    """A scorer configured by the WMRL_* environment (see the module doc)."""
    e = os.environ if env is None else env
    missing = [k for k in ("WMRL_RUN", "WMRL_TRAINER_GROUP") if not e.get(k)]
    if missing:
        raise RuntimeError(
            f"wmrl reward_func: set {' and '.join(missing)} (the run id and this trainer's consumer group), "
            "or call wmrl_client.integrations.openrlhf.configure(scorer)"
        )
    client = RewardClient(
        None, e["WMRL_RUN"], e["WMRL_TRAINER_GROUP"], kafka=KafkaOptions.from_env(e),
        anchor_fraction=float(e.get("WMRL_ANCHOR_FRACTION", "0.25")),
    )  # fmt: skip
    size = e.get("WMRL_GROUP_SIZE")
    return BatchScorer(client, group_size=int(size) if size else None, start_step=int(e.get("WMRL_START_STEP", "0")))


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **_: Any) -> dict[str, Any]:
    """OpenRLHF's reward-function file interface: the same reply as the server, as torch tensors."""
    global _scorer
    if _scorer is None:
        _scorer = scorer_from_env()
    import torch

    out = answer(_scorer, {"query": list(queries), "prompts": list(prompts), "labels": list(labels)})
    return {
        "rewards": torch.tensor(out["rewards"]),
        "scores": torch.tensor(out["scores"]),
        "extra_logs": {k: torch.tensor(v) for k, v in out["extra_logs"].items()},
    }


def make_server(scorer: BatchScorer, host: str = "127.0.0.1", port: int = 5000) -> ThreadingHTTPServer:
    """An HTTP server answering POST (any path) with the reward reply; serve_forever() runs it."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            try:
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(n) or b"null")
                if not isinstance(req, dict):
                    raise ValueError("request body: want a JSON object")
                self._reply(200, answer(scorer, req))
            except StepTimeoutError as e:
                self._reply(504, {"error": str(e)})
            except (ValueError, WmrlError) as e:
                self._reply(400, {"error": str(e)})

        def _reply(self, code: int, body: dict[str, Any]) -> None:
            out = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.info("%s " + fmt, self.address_string(), *args)

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description="wmrl remote reward model for OpenRLHF --remote_rm_url", allow_abbrev=False
    )
    ap.add_argument("--brokers", default=None, help="seed brokers (default: WMRL_BROKERS)")
    ap.add_argument("--topic-prefix", default=None)
    ap.add_argument("--run", required=True, help="wmrl run id")
    ap.add_argument("--group", required=True, help="consumer group of this trainer job")
    ap.add_argument("--group-size", type=int, default=None, help="n_samples_per_prompt (checks whole groups)")
    ap.add_argument("--anchor-fraction", type=float, default=0.25)
    ap.add_argument("--start-step", type=int, default=0, help="wmrl step of the first request (resume)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a request waits for its step")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5000)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    opts = KafkaOptions.from_env()
    if args.topic_prefix is not None:
        opts.topic_prefix = args.topic_prefix
    try:
        client = RewardClient(args.brokers, args.run, args.group, kafka=opts, anchor_fraction=args.anchor_fraction)
    except WmrlError as e:
        sys.exit(f"wmrl openrlhf: {e}")
    scorer = BatchScorer(client, group_size=args.group_size, start_step=args.start_step, timeout=args.timeout)
    srv = make_server(scorer, args.host, args.port)
    log.info("serving OpenRLHF reward requests on http://%s:%d/ for run %s", args.host, srv.server_address[1], args.run)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        client.close()


if __name__ == "__main__":
    main()
