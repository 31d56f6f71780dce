"""What the real-trainer tests (test_trainers_*.py, `make test-trainers`) share: a tiny Qwen2
model and byte-level BPE tokenizer built at test time (no weights committed, no hub), an instant
OpenAI-compatible judge, the sandbox grade the tests recompute, and the Go stages as processes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conftest import HERE

from wmrl_client import is_anchor

if TYPE_CHECKING:
    from test_reward_e2e import Stages

# No hub on this machine or in CI: transformers must never try to download (the Makefile sets it too).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

GRADE_SH = HERE / "data" / "grade_task.sh"
WORDS = ("add the numbers and answer with one digit think step by step the result is seven three "
         "five nine two four code test passes fails returns value list sum of").split()  # fmt: skip


def grade(artifact: str, n: int) -> float:
    """tests/data/grade_task.sh's grade of a rollout whose task number (meta) is n."""
    return ((len(artifact.encode()) + n) % 10) / 10


def judge_score(artifact: str) -> float:
    """The fake judge's score of a rollout: a stable hash of its artifact, in tenths."""
    return (hashlib.sha256(artifact.encode()).digest()[0] % 10) / 10


def artifact_in(content: str) -> str:
    """The artifact in a prompt rendered from the world model's DefaultPromptTemplate."""
    m = re.search(r"(?s)\nCandidate solution:\n(.*)\n\nPredict the execution score", content)
    return m.group(1) if m else content


class ChatEndpoint(BaseHTTPRequestHandler):
    """An instant OpenAI-compatible chat endpoint: a subclass's answer() replies to the last
    message; the subclass's ``requests`` counts the requests served."""

    requests = 0

    def answer(self, content: str) -> str:
        raise NotImplementedError

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests += 1
        reply = self.answer(body["messages"][-1]["content"])
        choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}
        out = json.dumps({"id": "t", "object": "chat.completion", "choices": [choice]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


class Judge(ChatEndpoint):
    """The fake judge: it answers judge_score(the prompt's artifact)."""

    def answer(self, content: str) -> str:
        return json.dumps({"score": judge_score(artifact_in(content))})


class Server(ThreadingHTTPServer):
    # socketserver's listen backlog of 5 would drop the world model's concurrent connections
    # (each retried after 1 s).
    request_queue_size = 256
    daemon_threads = True


def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serves handler on a loopback port while the generator runs; yields the /v1 base URL."""
    srv = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def judge() -> Iterator[str]:
    yield from serve(Judge)


def start_stages(st: Stages, judge_url: str, label: str, log_dir: Path, *correct_flags: str) -> None:
    """The Go stages of a trainer test: worldmodel asking the judge, sandbox grading with
    grade_task.sh in its grade step (label: the meta key of the expected answer, private to it), and
    correct with --min-pairs 5000, which keeps the calibration the identity (a world-model row's
    reward is the judge's score)."""
    st.start("worldmodel", "worldmodel", "--base-url", judge_url, "--model", "m", log_dir=log_dir)
    grade = ["/bin/sh", str(GRADE_SH), "{dir}", label]
    st.start("sandbox", "sandbox", "--argv", json.dumps(["/bin/cat", "{artifact}"]), "--grade-argv", json.dumps(grade),
             "--timeout", "30s", log_dir=log_dir)  # fmt: skip
    st.start("correct", "correct", "--transactional-id", f"{st.unique}-txn", "--redis-prefix", st.unique,
             "--min-pairs", "5000", *correct_flags, log_dir=log_dir)  # fmt: skip


def tiny_model(out: Path) -> Path:
    """A ~100k-parameter Qwen2 and a byte-level BPE tokenizer, trained and saved under out."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    lines = [" ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(12)) for i in range(300)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    bpe = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<eos>", "<unk>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(lines, bpe)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    cfg = Qwen2Config(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                      pad_token_id=fast.pad_token_id, eos_token_id=fast.eos_token_id, bos_token_id=None)  # fmt: skip
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    fast.save_pretrained(out)
    return out


def mixed_run(prefix: str, group_ids: list[str], fraction: float) -> str:
    """A run id under which group_ids get both anchor and world-model groups (the anchor hash is
    of the run id: a random id could make every group one kind)."""
    for _ in range(1000):
        run = f"{prefix}-{uuid.uuid4().hex[:6]}"
        flags = {is_anchor(run, g, fraction) for g in group_ids}
        if flags == {True, False}:
            return run
    raise AssertionError("no run id mixes anchors and world-model groups")
