"""SIGTERM (how Kubernetes stops a pod) loses no span: real processes, real signals, real exporters.

Each test starts a process that exports (the engine, a small service instrumented with the decorators, `load`,
`gpu sample`), has it serve or send requests, sends SIGTERM right after the last response and checks that
every finished request's spans are in the file (jsonl exporter, then ingested) or in the archive of a real
collector (OTLP), and that the process exits 0 (or with the host's own code). The export batches wait 30 s
(`OTEL_BSP_SCHEDULE_DELAY`), so without the flush on SIGTERM every span of these tests would be lost.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import rows

REPO = Path(__file__).resolve().parents[1]
TAPE = Path(__file__).parent / "fixtures" / "nvml_tape_h100.json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _traceparent(i: int) -> tuple[str, str]:
    """A W3C traceparent with a trace id of our own (the server's root joins it) and that trace id."""
    trace_id = f"{0x5167E000 + i:032x}"
    return f"00-{trace_id}-{i + 1:016x}-01", trace_id


class Sink:
    """Where the process under test exports: a jsonl file (ingested afterwards) or a real collector (OTLP/HTTP)."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.archive = tmp_path / "archive"
        self.path = tmp_path / "out.jsonl"
        self.collector = None
        if kind == "otlp":
            from budgetscope.collector import Collector

            self.collector = Collector(self.archive, grpc_port=None, http_port=0)
            self.collector.start()
            self.env = {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.collector.http_port}",
            }
        else:
            self.env = {"OTEL_TRACES_EXPORTER": f"jsonl:{self.path}"}

    def rows(self, sql: str) -> list[tuple]:
        """Rows of `sql` over what arrived (the collector stopped, or the file ingested, first)."""
        self.close()
        if self.kind == "jsonl" and not self.archive.exists():
            from budgetscope.ingest.files import read_batches
            from budgetscope.opener import Archive

            assert self.path.exists(), "the process wrote no span at all"
            with Archive(self.archive) as a:
                a.ingest(read_batches(self.path))
        return rows(self.archive, sql)

    def trace_ids(self, kind: str) -> set[str]:
        """The traces with a span of `kind` (SERVER: a request's root, CLIENT: the load generator's span)."""
        return {t for (t,) in self.rows(f"SELECT trace_id FROM spans WHERE kind = '{kind}'")}

    def close(self) -> None:
        if self.collector is not None:
            self.collector.stop()
            self.collector = None


@pytest.fixture(params=["jsonl", "otlp"])
def sink(request, tmp_path):
    s = Sink(request.param, tmp_path)
    yield s
    s.close()


def _spawn(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    full_env = {
        **os.environ,
        # the caller's path after this checkout's (a GPU machine's carried wheels live there)
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), env.pop("PYTHONPATH", ""), os.environ.get("PYTHONPATH", "")) if p
        ),
        "OTEL_BSP_SCHEDULE_DELAY": "30000",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, *args], env=full_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the process exited {proc.returncode}: {proc.stderr.read()}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{url} never answered")


def _terminate(proc: subprocess.Popen, timeout_s: float = 30.0) -> tuple[int, str]:
    """SIGTERM now; (exit code, stderr)."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout_s)
    return proc.returncode, err


def _post(url: str, body: dict, traceparent: str) -> bytes:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "traceparent": traceparent},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read()


def _post_all(url: str, body: dict, num: int) -> set[str]:
    """`num` requests at once, each in its own trace; the trace ids of those answered 200."""
    done: list[str] = []

    def one(i: int) -> None:
        tp, trace_id = _traceparent(i)
        _post(url, body, tp)
        done.append(trace_id)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(num)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return set(done)


# -- the reference engine: uvicorn drains, then the spans are flushed ----------------------------------------------
def _spawn_engine(port: int, sink, tmp_path):
    """`engine serve --config tiny` on port, exporting to sink."""
    args = ["-m", "budgetscope.cli", "engine", "serve", "--config", "tiny", "--port", str(port)]
    return _spawn(
        args + ["--max-model-len", "256", "--kv-blocks", "64", "--log-level", "warning"], dict(sink.env), tmp_path
    )


def test_engine_serve_keeps_every_span_on_sigterm(sink, tmp_path):
    port = _free_port()
    proc = _spawn_engine(port, sink, tmp_path)
    base = f"http://127.0.0.1:{port}"
    _wait_ready(f"{base}/health", proc)
    finished = _post_all(f"{base}/v1/completions", {"prompt": "one two three", "max_tokens": 4}, 12)
    code, err = _terminate(proc)
    assert code == 0, err
    assert len(finished) == 12
    assert finished <= sink.trace_ids("SERVER")


def test_engine_finishes_a_request_in_flight_at_sigterm_and_keeps_its_spans(tmp_path):
    sink = Sink("jsonl", tmp_path)
    port = _free_port()
    proc = _spawn_engine(port, sink, tmp_path)
    base = f"http://127.0.0.1:{port}"
    _wait_ready(f"{base}/health", proc)
    tp, trace_id = _traceparent(99)
    req = urllib.request.Request(
        f"{base}/v1/completions",
        method="POST",
        data=json.dumps({"prompt": "a b", "max_tokens": 120, "stream": True}).encode(),
        headers={"Content-Type": "application/json", "traceparent": tp},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        first = resp.readline()  # the stream has begun: the request is in flight
        proc.send_signal(signal.SIGTERM)
        rest = resp.read()
    _, err = proc.communicate(timeout=30)
    assert first.startswith(b"data: ") and rest.rstrip().endswith(b"data: [DONE]")
    assert proc.returncode == 0, err
    assert trace_id in sink.trace_ids("SERVER")


# -- a service instrumented with the decorators --------------------------------------------------------------------
SERVICE = textwrap.dedent('''
    """A small real HTTP service instrumented with budgetscope's request API and `stage` decorators."""
    import signal
    import sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    if "--host-handler" in sys.argv:  # the host's own SIGTERM handler, installed before budgetscope's
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))

    from budgetscope.instrument import Instrumentation, stage

    instr = Instrumentation(service_name="sigterm-svc")

    @stage("queue")
    def admit(text):
        return text.split()

    @stage("prefill")
    def prefill(words):
        return list(reversed(words))

    @stage("decode")
    def decode(words, req):
        for _ in words:
            req.token()
        return " ".join(words)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            with instr.start_request(model="echo", traceparent=self.headers.get("traceparent")) as req:
                text = decode(prefill(admit(body)), req)
                with stage("postprocess"):
                    out = text.encode()
            # the request has finished (its spans are queued for export) before the client has its answer
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    ThreadingHTTPServer.request_queue_size = 128  # 40 clients connect at once
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
''')


def _service(tmp_path: Path, env: dict[str, str], *flags: str) -> tuple[subprocess.Popen, str]:
    script = tmp_path / "service.py"
    script.write_text(SERVICE)
    port = _free_port()
    proc = _spawn([str(script), str(port), *flags], env, tmp_path)
    base = f"http://127.0.0.1:{port}"
    _wait_ready(base, proc)
    return proc, base


def test_instrumented_service_keeps_every_span_on_sigterm_and_exits_0(sink, tmp_path):
    proc, base = _service(tmp_path, dict(sink.env))
    finished = _post_all(base, {"words": "alpha beta gamma"}, 40)
    code, err = _terminate(proc)
    assert (code, err) == (0, "")
    assert len(finished) == 40
    assert sink.trace_ids("SERVER") == finished
    assert sink.rows("SELECT count(*) FROM spans WHERE name = 'stage.decode'") == [(40,)]


def test_the_hosts_own_sigterm_handler_runs_after_the_flush_with_its_exit_code(tmp_path):
    sink = Sink("jsonl", tmp_path)
    proc, base = _service(tmp_path, dict(sink.env), "--host-handler")
    finished = _post_all(base, {"words": "x y"}, 10)
    code, err = _terminate(proc)
    assert code == 3, err
    assert sink.trace_ids("SERVER") == finished


def test_a_flush_that_cannot_finish_gives_up_in_time_and_says_what_was_dropped(tmp_path):
    """The collector is gone: the process still exits 0 within the bound, and one line counts the lost spans."""
    dead = _free_port()  # nothing listens there
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{dead}",
        "BUDGETSCOPE_FLUSH_TIMEOUT_MS": "1000",
    }
    proc, base = _service(tmp_path, env)
    _post_all(base, {"words": "x y"}, 5)
    t0 = time.monotonic()
    code, err = _terminate(proc)
    assert code == 0, err
    assert time.monotonic() - t0 < 4.0
    lines = [line for line in err.splitlines() if line.startswith("budgetscope: on SIGTERM")]
    assert lines == [
        "budgetscope: on SIGTERM, Instrumentation gave up after 1 s (BUDGETSCOPE_FLUSH_TIMEOUT_MS): "
        "30 spans not exported"
    ], err  # 5 requests x (root + frontend, queue, prefill, decode, postprocess)


# -- the load generator and the sweep ------------------------------------------------------------------------------
def _answer_some_then_hold(stub, at_least: int, skip: int = 0) -> set[str]:
    """Once the stub has answered `at_least` requests, hold every later one; the trace ids of those answered,
    but the first `skip`."""
    deadline = time.monotonic() + 30
    while stub.num_requests < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
    answered: list[int] = []

    def hold_the_rest() -> None:  # on the stub's own loop: no request slips between the count and the switch
        answered.append(stub.num_requests)
        stub.first_token_delay_s = 600.0

    stub._loop.call_soon_threadsafe(hold_the_rest)
    time.sleep(0.5)  # the answered requests are read by the client; every later one waits
    return {h["traceparent"].split("-")[1] for _, h, _ in stub.received[skip : answered[0]]}


FINISHED_CLIENT_SPANS = (
    "SELECT trace_id FROM spans WHERE kind = 'CLIENT' "
    "AND (attributes->>'http.response.status_code') = '200' "
    "AND (attributes->>'gen_ai.usage.output_tokens') = '3'"
)


def _against_a_stub(tmp_path: Path, command: list[str], env: dict[str, str], skip: int = 0) -> tuple[int, str, set]:
    """Run `budgetscope <command> STUB_URL` against a stub server that answers 10 requests (after `skip`) and
    holds the rest, then SIGTERM it: (exit code, stderr, trace ids of the answered requests)."""
    from budgetscope.loadgen.stub_server import StubServer

    stub = StubServer(tokens=3, record=True).start_in_thread()
    try:
        proc = _spawn(["-m", "budgetscope.cli", command[0], stub.url, *command[1:]], env, tmp_path)
        finished = _answer_some_then_hold(stub, 10 + skip, skip)
        code, err = _terminate(proc)
    finally:
        stub.stop_thread()
    assert len(finished) >= 10
    return code, err, finished


def test_load_keeps_the_client_span_of_every_finished_request_on_sigterm(sink, tmp_path):
    spans = "otlp" if sink.kind == "otlp" else f"jsonl:{sink.path}"
    code, err, finished = _against_a_stub(
        tmp_path, ["load", "--rate", "40", "--requests", "400", "--spans", spans], dict(sink.env)
    )
    assert code == 0, err
    assert "budgetscope load: stopped by SIGTERM" in err
    assert {t for (t,) in sink.rows(FINISHED_CLIENT_SPANS)} == finished


def test_sweep_lands_the_client_span_of_every_finished_request_on_sigterm(tmp_path):
    budgets = tmp_path / "budgets.toml"
    budgets.write_text("[tiers.default]\npercentile = 99\nttft_ms = 250\n")
    archive = tmp_path / "cap"
    code, err, finished = _against_a_stub(
        tmp_path,
        [
            "sweep",
            "--budgets",
            str(budgets),
            "--archive",
            str(archive),
            "--rates",
            "40",
            "--duration",
            "30",
            "--output-tokens",
            "3",
            "--otlp-port",
            str(_free_port()),
        ],
        {},
        skip=3,
    )  # the pre-flight's 3 requests have no client span
    assert code == 0, err
    assert "budgetscope sweep: stopped by SIGTERM" in err
    assert {t for (t,) in rows(archive, FINISHED_CLIENT_SPANS)} == finished


# -- the GPU sampler, on what a real H100's NVML answered ----------------------------------------------------------
FAKE_PYNVML = textwrap.dedent(f'''
    """A fake pynvml for tests: replays {TAPE.name}, what a real H100's NVML answered (budgetscope.instrument.nvml_tape)."""
    from budgetscope.instrument.nvml_tape import NvmlTape

    _nv = NvmlTape.load({str(TAPE)!r}).replay()
    NVMLError = _nv.NVMLError


    def __getattr__(name):
        return getattr(_nv, name)
''')


def test_gpu_sample_exports_every_buffered_point_on_sigterm(sink, tmp_path):
    fake = tmp_path / "fake_nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML)
    out = ["--otlp"] if sink.kind == "otlp" else ["--out", f"jsonl:{sink.path}"]
    env = {**sink.env, "PYTHONPATH": str(fake)}
    proc = _spawn(["-m", "budgetscope.cli", "gpu", "sample", "--every", "100ms", *out], env, tmp_path)
    banner = ""
    while not banner.startswith("sampling") and proc.poll() is None:  # a line naming unknown figures may come first
        banner = proc.stderr.readline()
    assert banner.startswith("sampling 1 GPU(s)"), banner + proc.stderr.read()
    time.sleep(0.6)  # a few ticks, all still in the sampler's buffer: its first export is due 1 s after the start
    code, err = _terminate(proc)
    assert code == 0, err
    ticks, points = (int(n.replace(",", "")) for n in re.search(r"([\d,]+) ticks, ([\d,]+) points", err).groups())
    assert ticks >= 1 and points >= ticks
    from budgetscope.instrument.gpu import HBM_USED

    [(stored, hbm_points)] = sink.rows(f"SELECT count(*), count(*) FILTER (metric = '{HBM_USED}') FROM gpu_samples")
    assert stored == points
    assert hbm_points == ticks  # one HBM reading a tick: every tick, the last ones before the signal too


# -- where the handler is not installed ----------------------------------------------------------------------------
@pytest.fixture
def sigterm_kept():
    """Puts back this process's SIGTERM handler after the test."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def test_off_the_main_thread_nothing_is_installed(sigterm_kept):
    from budgetscope.instrument import install_sigterm_handler

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(install_sigterm_handler()))
    t.start()
    t.join()
    assert got == [False] and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert install_sigterm_handler() is True  # then called from the main thread, as the docs say
    assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)


def test_a_host_that_ignores_sigterm_keeps_ignoring_it(sigterm_kept):
    from budgetscope.instrument import install_sigterm_handler

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    assert install_sigterm_handler() is False
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
