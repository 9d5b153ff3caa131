"""Honest workloads: prompts of exactly N tokens of the target's tokenizer (`--tokenizer`), a summary that says
when lengths are approximate and shows what the server counted, real prompts from a dataset, and authenticated
endpoints (`--header`, `OPENAI_API_KEY`)."""

from __future__ import annotations

import http.server
import json
import random
import threading

import pytest
from click.testing import CliRunner

from budgetscope.commands.load import load
from budgetscope.loadgen import Arrivals, Workload, build_plan
from budgetscope.loadgen.dataset import apply_dataset, read_dataset
from budgetscope.loadgen.prompts import _WORDS, Prompts
from budgetscope.loadgen.stub_server import StubServer
from budgetscope.loadgen.tokenizer import TargetTokenizer

tokenizers = pytest.importorskip("tokenizers")


def _byte_tokenizer(path) -> str:
    """A tokenizer.json that counts like the reference engine's byte tokenizer: one token a UTF-8 byte."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(path))
    return str(path)


def _bpe_tokenizer(path) -> str:
    """A small byte-level BPE (the kind GPT, Llama 3 and Qwen use), trained here on the prompt vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    rng = random.Random(0)
    corpus = [" ".join(rng.choices(_WORDS, k=40)) for _ in range(300)]
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    tok.save(str(path))
    return str(path)


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    return TargetTokenizer(_bpe_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json"))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 31, 128, 500])
def test_prompts_have_exactly_n_tokens(bpe, n):
    prompts = Prompts(seed=3, tokenizer=bpe)
    for seed in range(5):
        assert bpe.count(prompts.prompt(seed, n)) == n
    assert prompts.exact and "exact" in prompts.length_basis


def test_shared_prefix_prompts_count_exactly_as_a_whole(bpe):
    prompts = Prompts(seed=1, tokenizer=bpe)
    a, b = prompts.prompt(10, 20, prefix_id=0, prefix_tokens=64), prompts.prompt(11, 33, prefix_id=0, prefix_tokens=64)
    assert bpe.count(a) == 84 and bpe.count(b) == 97
    prefix = prompts._prefixes[0]
    assert a.startswith(prefix) and b.startswith(prefix) and bpe.count(prefix) == 64


def test_a_folder_with_tokenizer_json_and_bad_paths(tmp_path):
    _byte_tokenizer(tmp_path / "tokenizer.json")
    assert TargetTokenizer(tmp_path).count("héllo") == 6  # bytes
    from budgetscope.loadgen.errors import LoadgenError

    with pytest.raises(LoadgenError, match="no tokenizer.json there"):
        TargetTokenizer(tmp_path / "..")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(LoadgenError, match="not a Hugging Face tokenizer.json"):
        TargetTokenizer(tmp_path / "bad.json")


def _run(args, **env):
    return CliRunner().invoke(load, args, env=env or None)


@pytest.mark.slow
def test_exact_lengths_on_the_reference_engine(tmp_path):
    """The issue's case: --prompt-tokens 128 against a byte-tokenizer server. With its tokenizer every request
    carries exactly 128 tokens (129 with the BOS the server adds); without, the summary says approximate and
    shows the server's own count."""
    pytest.importorskip("torch")
    from engine_fixtures import running_server

    tok = _byte_tokenizer(tmp_path / "bytes.json")
    with running_server() as (url, _engine):
        common = [
            url,
            "--rate",
            "50",
            "--requests",
            "6",
            "--prompt-tokens",
            "128",
            "--output-tokens",
            "2",
            "--format",
            "json",
        ]
        r = _run([*common, "--tokenizer", tok, "--out", str(tmp_path / "exact.json")])
        assert r.exit_code == 0, r.output
        records = json.loads((tmp_path / "exact.json").read_text())["requests"]
        assert [rec["input_tokens"] for rec in records] == [129] * 6
        summary = json.loads(r.stdout)["prompt_tokens"]
        assert summary["exact"] is True and summary["server_counted"]["max"] == 129
        approx = [*common[:6], "64", *common[7:]]  # 64 words are ~350 bytes: inside the fixture's 512
        r = _run(approx)
        assert r.exit_code == 0, r.output
        summary = json.loads(r.stdout)["prompt_tokens"]
        assert summary["exact"] is False and summary["basis"].startswith("approximate")
        assert summary["planned"]["p50"] == 64 and summary["server_counted"]["p50"] > 200  # ~5 bytes a word
        r = _run(approx[:-2])
        assert "prompts  APPROXIMATE lengths" in r.stdout and "the server counted p50" in r.stdout


def test_dataset_sharegpt_json_and_jsonl(tmp_path, bpe):
    share = [
        {
            "id": "a",
            "conversations": [
                {"from": "human", "value": "What is a KV cache?"},
                {"from": "gpt", "value": "It stores keys and values."},
            ],
        },
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "Explain prefill"}]},
    ]
    (tmp_path / "s.json").write_text(json.dumps(share))
    ds = read_dataset(tmp_path / "s.json", bpe)
    assert [p.prompt for p in ds.prompts] == ["What is a KV cache?", "Explain prefill"] and ds.skipped == 1
    assert ds.prompts[0].prompt_tokens == bpe.count("What is a KV cache?")
    assert ds.prompts[0].output_tokens == bpe.count("It stores keys and values.")
    assert ds.prompts[1].output_tokens is None and ds.exact
    (tmp_path / "d.jsonl").write_text(
        '{"prompt": "abcdefgh", "output_tokens": 7}\n# a comment\n\n'
        '{"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 3}\n'
        '{"text": "xyz", "completion": "0123456789ab"}\n'
    )
    ds = read_dataset(tmp_path / "d.jsonl")  # no tokenizer: 4 characters a token
    assert [(p.prompt, p.prompt_tokens, p.output_tokens) for p in ds.prompts] == [
        ("abcdefgh", 2, 7),
        ("hi there", 2, 3),
        ("xyz", 1, 3),
    ]
    plan = apply_dataset(build_plan(Arrivals.parse("constant", 10), Workload(), seed=5, num_requests=5), ds)
    assert sorted({r.prompt for r in plan.requests}) == ["abcdefgh", "hi there", "xyz"]
    assert all(r.prompt_tokens == {"abcdefgh": 2, "hi there": 2, "xyz": 1}[r.prompt] for r in plan.requests)
    assert plan.meta["prompt_lengths"]["exact"] is False


def test_dataset_errors_name_the_place(tmp_path):
    from budgetscope.loadgen.errors import LoadgenError

    (tmp_path / "bad.jsonl").write_text('{"prompt": "a"}\n{not json\n')
    with pytest.raises(LoadgenError, match=r"bad.jsonl:2: not JSON"):
        read_dataset(tmp_path / "bad.jsonl")
    (tmp_path / "n.jsonl").write_text('{"prompt": "a", "output_tokens": "many"}\n')
    with pytest.raises(LoadgenError, match=r"n.jsonl:1: output_tokens must be a positive integer"):
        read_dataset(tmp_path / "n.jsonl")
    (tmp_path / "e.json").write_text('[{"nothing": 1}]')
    with pytest.raises(LoadgenError, match="no prompts in it"):
        read_dataset(tmp_path / "e.json")


def test_dataset_run_sends_the_real_prompts(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"prompt": "alpha beta", "output_tokens": 3}\n')
    stub = StubServer().start_in_thread()
    try:
        r = _run(
            [stub.url, "--rate", "50", "--requests", "3", "--dataset", str(tmp_path / "d.jsonl"), "--format", "json"]
        )
    finally:
        stub.stop_thread()
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert "prompts from" in s["plan"] and s["ok"] == 3
    assert s["prompt_tokens"]["exact"] is False and "estimated at 4 characters a token" in s["prompt_tokens"]["basis"]
    r = _run([stub.url, "--rate", "5", "--requests", "1", "--dataset", str(tmp_path / "d.jsonl"), "--replay", "x"])
    assert r.exit_code == 2 and "--dataset gives the prompts" in r.output


class _Capture(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):  # noqa: N802 - the name http.server calls
        self.seen.append(("GET", self.headers.get("Authorization"), self.headers.get("X-Org")))
        self._reply(200, b'{"data": [{"id": "m"}]}', "application/json")

    def do_POST(self):  # noqa: N802 - the name http.server calls
        self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append(("POST", self.headers.get("Authorization"), self.headers.get("X-Org")))
        body = (
            b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[],"usage":{"prompt_tokens":5,'
            b'"completion_tokens":1}}\n\ndata: [DONE]\n\n'
        )
        self._reply(200, body, "text/event-stream")

    def _reply(self, status, body, ctype):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def capture():
    _Capture.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Capture.seen
    server.shutdown()


def test_openai_api_key_and_headers_reach_the_endpoint(capture):
    url, seen = capture
    r = _run([url, "--rate", "20", "--requests", "2", "-H", "X-Org: acme"], OPENAI_API_KEY="sk-test")
    assert r.exit_code == 0, r.output
    assert set(seen) == {("GET", "Bearer sk-test", "acme"), ("POST", "Bearer sk-test", "acme")}
    assert "sk-test" not in r.output
    seen.clear()
    r = _run(
        [url, "--rate", "20", "--requests", "1", "--header", "Authorization: Bearer other"], OPENAI_API_KEY="sk-test"
    )
    assert r.exit_code == 0 and {s[1] for s in seen} == {"Bearer other"}
