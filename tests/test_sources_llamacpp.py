"""llama.cpp: `timings` on the client span → `llamacpp` rows; and a real server on CPU, driven by `budgetscope load`.

The real-server tests write a tiny GGUF model themselves (random weights, llama architecture, a 264-token byte
vocabulary; nothing is downloaded) and run
  - llama-cpp-python's server (`python -m llama_cpp.server`; skipped when llama_cpp is not installed): no
    server timings in streams (client-only rows), `openai-processing-ms` on non-streaming responses;
  - llama.cpp's own server (`llama-server`, found through $LLAMA_SERVER or PATH; skipped otherwise): `timings`.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from budgetscope.sources.importers import KIND_CLIENT, document, span
from conftest import rows

T0 = 1_800_000_000_000_000_000
MS = 1_000_000
# the last event of a llama.cpp stream, as tools/server/server-task.cpp writes it (result_timings::to_json)
LAST_EVENT = (
    b'{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"object":"text_completion",'
    b'"usage":{"completion_tokens":4,"prompt_tokens":10,"total_tokens":14,'
    b'"prompt_tokens_details":{"cached_tokens":2}},"id":"chatcmpl-x","timings":{"cache_n":2,"prompt_n":8,'
    b'"prompt_ms":12.5,"prompt_per_token_ms":1.5625,"prompt_per_second":640.0,"predicted_n":4,'
    b'"predicted_ms":30.25,"predicted_per_token_ms":7.5625,"predicted_per_second":132.2}}'
)


def test_loadgen_reads_timings_from_the_last_stream_event():
    from budgetscope.loadgen.server_report import timings_attributes
    from budgetscope.loadgen.sse import read_chunk

    chunk = read_chunk(LAST_EVENT)
    assert not chunk.is_token and chunk.completion_tokens == 4
    attrs = timings_attributes(chunk.timings)
    assert attrs["llama_cpp.timings.prompt_ms"] == 12.5 and attrs["llama_cpp.timings.predicted_n"] == 4
    assert attrs["llama_cpp.timings.cache_n"] == 2 and len(attrs) == 9


def test_timings_on_the_client_span_feed_prefill_and_decode(archive_path, ingest_text):
    attrs = {
        "budgetscope.client.first_token_unix_nano": T0 + 20 * MS,
        "http.response.status_code": 200,
        "gen_ai.usage.output_tokens": 4,
        "budgetscope.client.stream": True,
        "llama_cpp.timings.prompt_n": 8,
        "llama_cpp.timings.cache_n": 2,
        "llama_cpp.timings.prompt_ms": 12.5,
        "llama_cpp.timings.predicted_n": 4,
        "llama_cpp.timings.predicted_ms": 30.25,
    }
    s = span(f"{7:032x}", f"{7:016x}", "llm.client.request", KIND_CLIENT, T0, T0 + 50 * MS, attrs)
    ingest_text(archive_path, document("budgetscope-loadgen", [s]).decode())
    (r,) = rows(
        archive_path,
        """SELECT source, prefill_ms, ttft_prefill_ms, decode_ms, queue_ms, frontend_ms,
        postprocess_ms, network_ms, ttft_ms, e2e_ms, unaccounted_ms, ttft_unaccounted_ms, input_tokens,
        cached_tokens, output_tokens, tpot_ms FROM requests""",
    )
    assert r[:4] == ("llamacpp", 12.5, 12.5, 30.25)
    assert r[4:10] == (None,) * 6  # llama.cpp reports no queue, frontend, postprocess or timestamps
    assert r[10] == pytest.approx(50 - 12.5 - 30.25) and r[11] == pytest.approx(20 - 12.5)
    assert r[12:15] == (10, 2, 4) and r[15] == pytest.approx(30.25 / 3)


# -- a real server ----------------------------------------------------------------------------------------------
def write_tiny_gguf(path: Path, n_embd: int = 64, n_layer: int = 2, n_head: int = 4, n_ff: int = 128) -> None:
    """A minimal llama-architecture GGUF with random weights and an SPM byte vocabulary (264 tokens)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("budgetscope-tiny")
    w.add_context_length(1024)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "▁", "▁the", "▁a", "e", "t"]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-1.0, -2.0, -2.0, -3.0, -3.0])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * 5)  # unknown, control, byte, normal
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def tensor(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))

    tensor("token_embd.weight", len(tokens), n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    tensor("output.weight", len(tokens), n_embd)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{i}.{name}.weight", n_embd, n_embd)
        tensor(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        tensor(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        tensor(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(cmd: list[str], port: int, log: Path):
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v1/models")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"server did not answer in 60 s: {log.read_text()[-2000:]}")


def _stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _load(url: str, spans: Path, *extra: str) -> None:
    from click.testing import CliRunner

    from budgetscope.cli import main

    r = CliRunner().invoke(
        main,
        [
            "load",
            url,
            "--rate",
            "6",
            "--requests",
            "12",
            "--prompt-tokens",
            "24",
            "--output-tokens",
            "12",
            "--spans",
            f"jsonl:{spans}",
            "--timeout",
            "60",
            *extra,
        ],
    )
    assert r.exit_code == 0, r.output


def _ingest(archive: Path, *files: Path) -> None:
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    with Archive(archive) as a:
        for f in files:
            assert not a.ingest(read_batches(f)).rejected


def _report(archive: Path) -> dict:
    from budgetscope.analysis import build_report
    from budgetscope.opener import Archive

    with Archive(archive, read_only=True, create=False) as a:
        return build_report(a.con)


@pytest.mark.slow
def test_llama_cpp_python_server_measured_by_the_load_generator(tmp_path):
    pytest.importorskip(
        "llama_cpp", reason="llama-cpp-python is not installed (pip install 'llama-cpp-python[server]')"
    )
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python lacks its [server] extra")
    model, port = tmp_path / "tiny.gguf", _free_port()
    write_tiny_gguf(model)
    proc = _serve(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "1024",
            "--n_threads",
            "1",
            "--interrupt_requests",
            "False",
        ],
        port,
        tmp_path / "server.log",
    )
    try:
        _load(f"http://127.0.0.1:{port}", tmp_path / "stream.jsonl")
        _load(f"http://127.0.0.1:{port}", tmp_path / "plain.jsonl", "--no-stream", "--seed", "1")
    finally:
        _stop(proc)
    archive = tmp_path / "a.duckdb"
    _ingest(archive, tmp_path / "stream.jsonl", tmp_path / "plain.jsonl")
    got = rows(
        archive,
        """SELECT source, outcome, client_ttft_ms, client_e2e_ms, e2e_ms, network_ms, unaccounted_ms,
        ttft_unaccounted_ms, coalesce(frontend_ms, queue_ms, prefill_ms, decode_ms, postprocess_ms) FROM requests""",
    )
    assert len(got) == 24 and {(g[0], g[1]) for g in got} == {("client", "ok")}
    streamed = [g for g in got if g[2] is not None]
    plain = [g for g in got if g[2] is None]
    assert len(streamed) == len(plain) == 12
    for _, _, ttft, e2e, server_e2e, network, unacc, ttft_unacc, stage in streamed:
        assert 0 < ttft <= e2e and server_e2e is None and network is None and stage is None
        assert unacc == pytest.approx(e2e) and ttft_unacc == pytest.approx(ttft)  # stages sum to the client figures
    for _, _, _, e2e, server_e2e, network, unacc, _, stage in plain:
        assert server_e2e is not None and 0 <= server_e2e <= e2e  # openai-processing-ms: server E2E
        assert network >= 0 and network + unacc == pytest.approx(e2e) and stage is None
    tier = _report(archive)["tiers"][0]
    assert tier["figures"] == "client" and tier["attribution"]["ttft"]["dominant"] in ("unaccounted", None)


def _llama_server() -> str | None:
    return os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")


@pytest.mark.slow
@pytest.mark.skipif(
    _llama_server() is None, reason="no llama.cpp llama-server binary (set LLAMA_SERVER or put it on PATH)"
)
def test_llama_cpp_server_timings_and_metrics(tmp_path):
    pytest.importorskip("gguf", reason="the gguf package writes the test model")
    model, port = tmp_path / "tiny.gguf", _free_port()
    write_tiny_gguf(model)
    proc = _serve(
        [
            _llama_server(),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--metrics",
            "-c",
            "2048",
            "-np",
            "2",
            "-t",
            "1",
        ],
        port,
        tmp_path / "server.log",
    )
    archive = tmp_path / "a.duckdb"
    try:
        _load(f"http://127.0.0.1:{port}", tmp_path / "stream.jsonl")
        from click.testing import CliRunner

        from budgetscope.cli import main

        r = CliRunner().invoke(
            main, ["scrape", f"http://127.0.0.1:{port}/metrics", "-a", str(archive), "--every", "100ms", "--count", "2"]
        )
        assert r.exit_code == 0, r.output
    finally:
        _stop(proc)
    _ingest(archive, tmp_path / "stream.jsonl")
    got = rows(
        archive,
        """SELECT source, outcome, prefill_ms, decode_ms, client_ttft_ms, client_e2e_ms, network_ms,
        unaccounted_ms, ttft_unaccounted_ms, output_tokens FROM requests""",
    )
    assert len(got) == 12 and {(g[0], g[1]) for g in got} == {("llamacpp", "ok")}
    for _, _, prefill, decode, ttft, e2e, network, unacc, ttft_unacc, n in got:
        assert 0 < prefill <= ttft and prefill + decode <= e2e  # the server's figures fit inside the client's
        assert network is None and n == 12
        assert prefill + decode + unacc == pytest.approx(e2e) and prefill + ttft_unacc == pytest.approx(ttft)
    metrics = dict(rows(archive, "SELECT metric, max(value) FROM server_metrics GROUP BY 1"))
    assert {"llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:prompt_tokens_total"} <= set(
        metrics
    )
