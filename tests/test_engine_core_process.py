"""The engine in its own process (`engine serve`'s default): requests and outputs round trip over the socket,
aborts free blocks, a dead engine process fails what was in flight and stops the server, and the spans of one
request — marks taken in both processes — form one trace with the contract's parents."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")
pytest.importorskip("msgpack")

from budgetscope.engine import core_protocol as P
from budgetscope.engine.core_client import CoreClient
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.errors import RequestError
from budgetscope.engine.frontend import Frontend
from budgetscope.engine.sampling_params import SamplingParams
from engine_fixtures import running_server, wait_for

REPO = Path(__file__).resolve().parents[1]
CONFIG = EngineConfig(model="tiny", max_model_len=512, num_kv_blocks=64)


class Outputs:
    """Records every on_output call of the requests it makes (reader thread) and when each finished."""

    def __init__(self):
        self.calls: dict[str, list[tuple[int, bool]]] = {}
        self.done: dict[str, threading.Event] = {}

    def seq(self, front: Frontend, prompt, params, request_id: str):
        self.calls[request_id], self.done[request_id] = [], threading.Event()

        def on_output(seq):
            self.calls[request_id].append((seq.num_tokens, seq.is_finished))
            if seq.is_finished:
                self.done[request_id].set()

        return front.make_sequence(prompt, params, request_id=request_id, on_output=on_output)


@pytest.fixture(scope="module")
def client():
    c = CoreClient(Frontend(CONFIG)).start()
    yield c
    c.stop()


def test_messages_round_trip_through_msgpack():
    state = P.CoreState(received=3, free_slots=2, waiting_by_priority={0: 1, 2: 4})
    state.gauges.kv_blocks_used, state.gauges.num_steps = 5, 9
    back = P.CoreState.from_list(P.unpack(P.pack(state.as_list())))
    assert back.received == 3 and back.free_slots == 2 and back.waiting_by_priority == {0: 1, 2: 4}
    assert back.gauges == state.gauges and back.rate.rate_per_s() is None
    message = [P.STEP, 1, [[7, [42], [P.STAGE_CODES["prefill"], 10, P.TOKEN, 11], "length", "ok", 16]], None, []]
    assert P.unpack(P.pack(message)) == message


def test_tokens_match_the_engine_in_process(client):
    """Greedy and seeded requests give the tokens the same engine gives offline; finish and cached counts cross."""
    from budgetscope.engine.llm_engine import LLMEngine

    prompts = [list(range(1, 40)), list(range(1, 40)) + [9, 8], [256, 104, 105]]
    params = [
        SamplingParams(max_tokens=6, temperature=0, ignore_eos=True),
        SamplingParams(max_tokens=5, temperature=0, ignore_eos=True),
        SamplingParams(max_tokens=7, temperature=0.9, seed=3, ignore_eos=True),
    ]
    expected = [s.output_token_ids for s in LLMEngine(CONFIG).generate(prompts, params)]
    out = Outputs()
    seqs = []
    for i, (prompt, p) in enumerate(zip(prompts, params)):
        seqs.append(out.seq(client.front, prompt, p, f"r{i}"))
        client.submit(seqs[-1])
        assert out.done[f"r{i}"].wait(60)  # one after the other: the second hits the first one's cached blocks
    assert [s.output_token_ids for s in seqs] == expected
    assert [s.finish_reason for s in seqs] == ["length"] * 3 and all(s.outcome == "ok" for s in seqs)
    assert seqs[1].num_cached_tokens == 32
    counts = [c for c, _ in out.calls["r0"]]
    assert counts == sorted(counts) and out.calls["r0"][-1] == (45, True)
    assert wait_for(lambda: client.state.gauges.num_running == 0 and client.state.received >= 3)


def test_an_abort_frees_the_blocks_and_nothing_more_arrives(client):
    out = Outputs()
    seq = out.seq(client.front, [1, 2, 3], SamplingParams(max_tokens=400, ignore_eos=True), "long")
    client.submit(seq)
    assert wait_for(lambda: len(out.calls["long"]) >= 2, timeout_s=30)
    client.abort(seq, outcome="cancelled")
    assert seq.is_finished and seq.outcome == "cancelled"
    seen = len(out.calls["long"])
    assert wait_for(lambda: client.state.gauges.kv_blocks_used == 0 and client.state.gauges.num_running == 0)
    time.sleep(0.1)
    assert len(out.calls["long"]) == seen and seq.num_output_tokens < 400


def test_a_dead_engine_process_fails_what_is_in_flight_and_answers_503():
    c = CoreClient(Frontend(CONFIG)).start()
    died = []
    c.on_dead = died.append
    try:
        out = Outputs()
        seq = out.seq(c.front, [1, 2, 3], SamplingParams(max_tokens=400, ignore_eos=True), "doomed")
        c.submit(seq)
        assert wait_for(lambda: out.calls["doomed"], timeout_s=30)
        os.kill(c.pid, signal.SIGKILL)
        assert out.done["doomed"].wait(10)
        assert seq.outcome == "error" and seq.finish_reason == "error"
        assert died == ["the engine process was killed by signal 9"] and c.health() == died[0]
        with pytest.raises(RequestError) as refused:
            c.submit(out.seq(c.front, [1], SamplingParams(), "late"))
        assert refused.value.status == 503 and "killed by signal 9" in refused.value.message
    finally:
        c.stop()


def test_an_engine_that_cannot_start_says_why():
    from budgetscope.engine.core_client import EngineCoreError

    with pytest.raises(EngineCoreError, match="could not start: .*"):
        CoreClient(Frontend(EngineConfig(model="tiny", max_model_len=64, num_kv_blocks=8, device="nodevice"))).start()


def test_spans_of_one_request_from_both_processes_join_one_trace():
    """The API process makes the root, frontend and postprocess; the engine process marks queue's end, prefill,
    decode and the tokens, and times its steps: all in the caller's trace, stages children of the root, tiling it."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )
    from opentelemetry.trace import SpanKind

    from budgetscope.engine.telemetry import Telemetry
    from budgetscope.instrument import Instrumentation

    exporter = InMemorySpanExporter()
    tel = Telemetry(Instrumentation(service_name="budgetscope-engine", exporter=exporter))
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with running_server(CONFIG, tel) as (url, engine):
        r = httpx.post(
            f"{url}/v1/completions",
            headers={"traceparent": f"00-{trace_id}-{parent_id}-01"},
            json={"prompt": "both processes", "max_tokens": 6, "ignore_eos": True},
            timeout=60,
        )
        assert r.status_code == 200
        engine_pid = engine.client.pid
        tel.flush()
    assert engine_pid != os.getpid()
    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.kind is SpanKind.SERVER]
    assert f"{root.context.trace_id:032x}" == trace_id and f"{root.parent.span_id:016x}" == parent_id
    stages = sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id),
        key=lambda s: s.start_time,
    )
    assert [s.name for s in stages] == [
        "stage.frontend",
        "stage.queue",
        "stage.prefill",
        "stage.decode",
        "stage.postprocess",
    ]
    assert all(s.context.trace_id == root.context.trace_id for s in stages)
    assert stages[0].start_time == root.start_time and stages[-1].end_time == root.end_time
    for before, after in zip(stages, stages[1:]):
        assert before.end_time == after.start_time
    decode = stages[3]
    assert decode.attributes["budgetscope.decode.steps"] == 5 and root.attributes["gen_ai.usage.output_tokens"] == 6
    # the engine process's marks fall inside the steps it timed: prefill begins in the step that ran it
    steps = [s for s in spans if s.name == "engine.step"]
    assert len(steps) >= 6
    prefill = stages[2]
    assert any(s.start_time <= prefill.start_time <= s.end_time for s in steps)
    assert any(s.start_time <= decode.start_time <= s.end_time for s in steps)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Processes whose parent is pid (Linux /proc)."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the engine process through /proc")
def test_serve_exits_1_with_a_clear_line_when_the_engine_process_dies(tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "budgetscope.cli",
            "engine",
            "serve",
            "--config",
            "tiny",
            "--port",
            str(port),
            "--max-model-len",
            "512",
            "--kv-blocks",
            "64",
            "--no-instrument",
            "--log-level",
            "warning",
        ],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: _ready(base), timeout_s=90), "the server did not start"
        engines = [pid for pid in _children(proc.pid) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert engines
        req = urllib.request.Request(
            f"{base}/v1/completions",
            method="POST",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"prompt": "a", "max_tokens": 400, "ignore_eos": True, "stream": True}).encode(),
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.readline().startswith(b"data: ")
            for pid in engines:
                os.kill(pid, signal.SIGKILL)
            rest = resp.read()
        assert b'"type":"error"' in rest and rest.rstrip().endswith(b"data: [DONE]")
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1
    assert "budgetscope engine: the engine process was killed by signal 9" in err


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


class RecordingConn:
    """A connection that notes every message sent, in one timeline with the model runner's launches and waits."""

    def __init__(self, conn, timeline: list):
        self.conn, self.timeline = conn, timeline

    def poll(self, timeout=0.0):
        return self.conn.poll(timeout)

    def recv_bytes(self):
        return self.conn.recv_bytes()

    def send_bytes(self, data: bytes) -> None:
        msg = P.unpack(data)
        if msg[0] == P.STEP and msg[3] is not None:
            self.timeline.append("send")
        self.conn.send_bytes(data)


def test_the_loop_sends_step_n_minus_1_while_step_n_runs():
    """With overlap (a device that runs behind the host), step N-1's outputs leave between launch(N) and
    wait(N), and the requests that arrive meanwhile are only read then, not handed to the scheduler."""
    import multiprocessing

    from budgetscope.engine.core_process import EngineCore

    ours, theirs = multiprocessing.Pipe()
    timeline: list[str] = []
    core = EngineCore(EngineConfig(model="tiny", max_model_len=128, num_kv_blocks=16), RecordingConn(theirs, timeline))
    core.overlap = True
    launch = core.engine.runner.launch

    class Pending:
        def __init__(self, pending):
            self.pending = pending

        def wait(self):
            timeline.append("wait")
            return self.pending.wait()

    def recording_launch(batch):
        timeline.append("launch")
        return Pending(launch(batch))

    core.engine.runner.launch = recording_launch
    thread = threading.Thread(target=core.run)
    thread.start()
    try:
        assert P.unpack(ours.recv_bytes())[0] == P.READY
        ours.send_bytes(
            P.pack(
                [P.ADD, 1, "r", [1, 2, 3], [4, 0.0, 1.0, 0, None, True], "default", 1, time.time_ns(), None, None, None]
            )
        )
        tokens = []
        while len(tokens) < 4:
            _, _, entries, _, _ = P.unpack(ours.recv_bytes())
            tokens += [t for e in entries for t in e[1]]
        ours.send_bytes(P.pack([P.STOP]))
        thread.join(30)
    finally:
        if thread.is_alive():
            ours.close()
            thread.join(10)
    assert len(tokens) == 4
    # four steps; each step's outputs leave after the next step's launch and before its wait, the last one at once
    assert timeline == ["launch", "wait"] + ["launch", "send", "wait"] * 3 + ["send"]


def test_the_api_process_never_imports_torch():
    """Its modules, and a Frontend made from a config, leave torch to the engine process."""
    code = (
        "import sys\n"
        "import budgetscope.engine.command, budgetscope.engine.server, budgetscope.engine.core_client\n"
        "from budgetscope.engine.engine_config import EngineConfig\n"
        "from budgetscope.engine.frontend import Frontend\n"
        "Frontend(EngineConfig(model='1b'))\n"
        "print('torch' in sys.modules)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_an_ingested_served_run_has_one_row_per_request_with_its_stages(tmp_path):
    """Streaming and not, completions and chat, through the engine process, to a jsonl file, then ingested."""
    pytest.importorskip("opentelemetry.sdk")
    from budgetscope.engine.telemetry import Telemetry
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    spans = tmp_path / "spans.jsonl"
    tel = Telemetry.create(exporter=f"jsonl:{spans}")
    ids = set()
    with running_server(CONFIG, tel) as (url, _):
        for i in range(3):
            r = httpx.post(
                f"{url}/v1/completions", json={"prompt": f"one {i}", "max_tokens": 4, "ignore_eos": True}, timeout=60
            )
            ids.add(r.json()["id"])
            with httpx.stream(
                "POST",
                f"{url}/v1/chat/completions",
                timeout=60,
                json={
                    "messages": [{"role": "user", "content": f"two {i}"}],
                    "max_tokens": 3,
                    "ignore_eos": True,
                    "stream": True,
                },
            ) as s:
                ids.add(s.headers["x-request-id"])
                list(s.iter_lines())
    tel.shutdown()
    with Archive(tmp_path / "archive") as a:
        a.ingest(read_batches(spans))
        rows = a.con.execute(
            "SELECT request_id, queue_ms, prefill_ms, decode_ms, postprocess_ms, output_tokens FROM requests"
        ).fetchall()
    assert sorted(r[0] for r in rows) == sorted(ids)  # one row each
    assert all(q is not None and p is not None and d is not None and pp is not None for _, q, p, d, pp, _ in rows)
    assert sorted(r[5] for r in rows) == [3, 3, 3, 4, 4, 4]
