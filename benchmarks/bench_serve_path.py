"""The served path's ceiling without a GPU: the real API process of `engine serve` (uvicorn, Starlette, SSE,
detokenization, spans) and the real engine process loop and messages, stepping a fake engine whose steps take a set
time on a fake device (`tests/fake_engine_core.py`), behind a closed loop of streaming requests. Prints figures.

What it prints, per run: output tokens/s of the SSE events the client received in the timed window, the engine's
steps/s, and the CPU each process (and each thread of the API process) spent per output token — the figure that
does not move with the machine's load: 1e6 / (µs a token) is what one core sustains. With `--spans` the server
exports its spans to a file and the client sends `x-request-id`, so the time between the client's send and the
server span's start (what `arrival_ns` cannot see) and between the engine's first token and the client's receipt
are printed too. `--profile DIR`: cProfile of the API process's event loop and of its core reader over the timed
window, the top functions printed.

    python benchmarks/bench_serve_path.py                               # 64 streams, 1b shape, steps of 0.5 ms
    python benchmarks/bench_serve_path.py --streams 256 --step-us 2300 --spans
    python benchmarks/bench_serve_path.py --client loadgen              # `budgetscope load` as the client
    python benchmarks/bench_serve_path.py --profile /tmp/prof

`--serve` (internal): the server process itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))  # fake_engine_core: the test double of the engine (never on the serving path)

from common import free_port, machine, stop_process  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
_now = time.perf_counter_ns


# -- the server process -------------------------------------------------------------------------------------------
def serve_main(args) -> None:
    """`engine serve`'s API process (the real `serve`), with the fake engine in the engine process."""
    import functools

    from budgetscope.engine.engine_config import EngineConfig
    from budgetscope.engine.frontend import Frontend
    from budgetscope.engine.server import serve
    from budgetscope.engine.telemetry import Telemetry
    from fake_engine_core import make_fake_engine

    max_len = args.prompt_tokens + args.output_tokens + 16
    config = EngineConfig(
        model=args.config,
        max_model_len=max_len,
        max_num_seqs=args.max_seqs,
        max_num_batched_tokens=max(args.max_batched_tokens, args.max_seqs),
        num_kv_blocks=args.max_seqs * -(-max_len // 16) + 16,
        enable_prefix_caching=False,
        max_waiting=0,
        async_scheduling=args.async_scheduling,
    )
    telemetry = Telemetry.create(enabled=args.instrument, exporter=args.exporter)
    front = Frontend(config, telemetry)
    fake = functools.partial(make_fake_engine, step_us=args.step_us, per_seq_us=args.per_seq_us, tokens=args.tokens)
    if args.profile:
        _install_profiler(Path(args.profile))
    threading.Thread(target=_write_thread_ids, args=(Path(args.threads_file),), daemon=True).start()
    serve(front, port=args.port, log_level="warning", make_engine=fake)


def _write_thread_ids(path: Path) -> None:
    """Once the core reader runs: {thread name: native id} of this process, for per-thread CPU."""
    while not any(t.name == "budgetscope-core-reader" for t in threading.enumerate()):
        time.sleep(0.05)
    path.write_text(json.dumps({t.name: t.native_id for t in threading.enumerate()}))


def _install_profiler(out: Path) -> None:
    """SIGUSR1 starts cProfile on the event loop's thread and around each core message; SIGUSR2 stops and saves."""
    import cProfile

    from budgetscope.engine.core_client import CoreClient

    out.mkdir(parents=True, exist_ok=True)
    loop_prof, reader_prof, on = cProfile.Profile(), cProfile.Profile(), [False]
    on_step = CoreClient._on_step

    def profiled_on_step(self, msg):
        if not on[0]:
            return on_step(self, msg)
        return reader_prof.runcall(on_step, self, msg)

    CoreClient._on_step = profiled_on_step

    def start(*_):
        on[0] = True
        loop_prof.enable()

    def stop(*_):
        loop_prof.disable()
        on[0] = False
        loop_prof.dump_stats(out / "loop.prof")
        reader_prof.dump_stats(out / "reader.prof")

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)


# -- CPU accounting -----------------------------------------------------------------------------------------------
def cpu_ticks(pid: int, tid: int | None = None) -> int:
    """utime + stime of a process (or one of its threads), clock ticks."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def engine_pid(api_pid: int) -> int | None:
    """The engine process: the API process's child started by multiprocessing's spawn."""
    try:
        children = Path(f"/proc/{api_pid}/task/{api_pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
        except OSError:
            pass
    return None


class CpuMeter:
    """CPU ticks of the API process (and its named threads) and the engine process between two readings."""

    def __init__(self, api_pid: int, threads: dict[str, int]):
        self.api_pid, self.threads = api_pid, threads
        self.engine_pid = engine_pid(api_pid)
        self.start = self._read()

    def _read(self) -> dict[str, int]:
        out = {"api": cpu_ticks(self.api_pid), "engine": cpu_ticks(self.engine_pid) if self.engine_pid else 0}
        for name, tid in self.threads.items():
            out[f"api:{name}"] = cpu_ticks(self.api_pid, tid)
        out["client"] = int((os.times().user + os.times().system) * TICKS)
        return out

    def seconds(self) -> dict[str, float]:
        end = self._read()
        return {k: (end[k] - self.start[k]) / TICKS for k in end}


# -- the raw client -----------------------------------------------------------------------------------------------
class Stream(asyncio.Protocol):
    """One keep-alive connection running one streaming request after another; counts SSE token events (`data: {`)
    as the bytes arrive, without parsing them (so the client is never what caps the figure)."""

    EVENT, DONE, END = b"data: {", b"data: [DONE]", b"0\r\n\r\n"

    def __init__(self, bench: RawClient):
        self.bench = bench
        self.transport = None
        self.carry = b""
        self.done_seen = False
        self.record: dict | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if self.record is not None:
            self.bench.errors += 1
            self.record = None

    def send(self, index: int) -> None:
        self.carry, self.done_seen = b"", False
        self.record = {
            "id": f"bench-{os.getpid()}-{index}",
            "sent_unix_ns": time.time_ns(),
            "first_ns": None,
            "tokens": 0,
        }
        self.transport.write(self.bench.request(self.record["id"]))

    def data_received(self, data: bytes) -> None:
        t = _now()
        rec = self.record
        if rec is None:
            return
        if not self.carry and data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 200"):
            self.bench.errors += 1
        buf = self.carry + data
        n = buf.count(self.EVENT)
        if n:
            if rec["first_ns"] is None:
                rec["first_ns"] = time.time_ns()
            rec["tokens"] += n
            if self.bench.window[0] <= t < self.bench.window[1]:
                self.bench.tokens += n
        self.done_seen = self.done_seen or self.DONE in buf
        if self.done_seen and buf.endswith(self.END):
            self.record = None
            self.bench.finished(self, rec)
            return
        self.carry = buf[-16:]


class RawClient:
    """A closed loop of `streams` connections, each running requests back to back until the window ends."""

    def __init__(self, port: int, args):
        self.port, self.args = port, args
        self.tokens = self.errors = self.started = 0
        self.records: list[dict] = []
        self.window = (0, 0)
        self.stopping = False
        self.idle = asyncio.Event()
        self.in_flight = 0
        body = json.dumps(
            {
                "prompt": list(range(1, args.prompt_tokens + 1)),
                "max_tokens": args.output_tokens,
                "ignore_eos": True,
                "temperature": 0,
                "stream": True,
            }
        ).encode()
        self.head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
        ).encode()
        self.body = body

    def request(self, request_id: str) -> bytes:
        return self.head + b"x-request-id: " + request_id.encode() + b"\r\n\r\n" + self.body

    def finished(self, stream: Stream, rec: dict) -> None:
        self.records.append(rec)
        self.in_flight -= 1
        if self.stopping:
            if self.in_flight == 0:
                self.idle.set()
            return
        self._start(stream)

    def _start(self, stream: Stream) -> None:
        self.in_flight += 1
        self.started += 1
        stream.send(self.started)

    async def run(self, warmup_s: float, duration_s: float, on_window) -> None:
        loop = asyncio.get_running_loop()
        streams = []
        for _ in range(self.args.streams):
            _, s = await loop.create_connection(lambda: Stream(self), "127.0.0.1", self.port)
            streams.append(s)
        t0 = _now()
        self.window = (t0 + int(warmup_s * 1e9), t0 + int((warmup_s + duration_s) * 1e9))
        for s in streams:
            self._start(s)
        await asyncio.sleep(warmup_s)
        on_window("start")
        await asyncio.sleep(duration_s)
        on_window("end")
        self.stopping = True
        try:
            await asyncio.wait_for(self.idle.wait(), timeout=max(30.0, 4 * duration_s))
        except asyncio.TimeoutError:
            pass
        for s in streams:
            s.transport.close()


# -- one run ------------------------------------------------------------------------------------------------------
def start_server(args, port: int, workdir: Path) -> subprocess.Popen:
    (workdir / "threads.json").unlink(missing_ok=True)
    cmd = [
        sys.executable,
        __file__,
        "--serve",
        "--port",
        str(port),
        "--threads-file",
        str(workdir / "threads.json"),
        *_forwarded(args),
    ]
    if args.spans:
        (workdir / "spans.jsonl").unlink(missing_ok=True)
        cmd += ["--exporter", f"jsonl:{workdir / 'spans.jsonl'}"]
    if args.profile:
        cmd += ["--profile", args.profile]
    proc = subprocess.Popen(cmd, env=_env())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench_serve_path: the server exited with code {proc.returncode}")
        if (workdir / "threads.json").exists() and _health(port):
            return proc
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("bench_serve_path: the server did not start within 120 s")


def _env() -> dict:
    """This checkout first on the path (what else PYTHONPATH holds after it: extra packages to try)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}


def _forwarded(args) -> list[str]:
    out = [
        "--config",
        args.config,
        "--streams",
        str(args.streams),
        "--max-seqs",
        str(args.max_seqs),
        "--max-batched-tokens",
        str(args.max_batched_tokens),
        "--prompt-tokens",
        str(args.prompt_tokens),
        "--output-tokens",
        str(args.output_tokens),
        "--step-us",
        str(args.step_us),
        "--per-seq-us",
        str(args.per_seq_us),
        "--tokens",
        args.tokens,
    ]
    if not args.instrument:
        out.append("--no-instrument")
    if args.async_scheduling is False:
        out.append("--no-async-scheduling")
    return out


def _health(port: int) -> bool:
    import http.client

    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/health")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


def _steps(port: int) -> float:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return next(float(x.split()[1]) for x in text.splitlines() if x.startswith("budgetscope_engine_steps_total "))


def run_raw(args, port: int, proc: subprocess.Popen, workdir: Path) -> dict:
    threads = json.loads((workdir / "threads.json").read_text())
    keep = {
        "main": threads.get("MainThread"),
        "reader": threads.get("budgetscope-core-reader"),
        "export": threads.get("budgetscope-export"),
    }
    client = RawClient(port, args)
    marks: dict = {}

    def on_window(what: str) -> None:
        if what == "start":
            marks["meter"] = CpuMeter(proc.pid, {k: v for k, v in keep.items() if v})
            marks["steps"] = _steps(port)
            marks["load"] = [os.getloadavg()[0]]
            if args.profile:
                proc.send_signal(signal.SIGUSR1)
        else:
            marks["cpu"] = marks["meter"].seconds()
            marks["steps"] = _steps(port) - marks["steps"]
            marks["load"].append(os.getloadavg()[0])
            if args.profile:
                proc.send_signal(signal.SIGUSR2)

    asyncio.run(client.run(args.warmup, args.duration, on_window))
    tokens = client.tokens
    out = {
        "tok_s": tokens / args.duration,
        "steps_s": marks["steps"] / args.duration,
        "errors": client.errors,
        "requests": len(client.records),
        "load": marks["load"],
        "cpu_us_per_token": {k: (v * 1e6 / tokens if tokens else None) for k, v in marks["cpu"].items()},
        "records": client.records,
    }
    return out


def run_loadgen(args, port: int, proc: subprocess.Popen) -> dict:
    """`budgetscope load` as the client: its own output tok/s, and its CPU per output token."""
    cmd = [
        sys.executable,
        "-m",
        "budgetscope.cli",
        "load",
        f"http://127.0.0.1:{port}",
        "--concurrency",
        str(args.streams),
        "--duration",
        str(args.warmup + args.duration),
        "--warmup",
        f"{args.warmup}s",
        "--prompt-format",
        "token-ids",
        "--prompt-tokens",
        str(args.prompt_tokens),
        "--output-tokens",
        str(args.output_tokens),
        "--no-deadline",
        "--spans",
        "none",
        "--format",
        "json",
    ]
    meter = CpuMeter(proc.pid, {})
    steps0, load0 = _steps(port), os.getloadavg()[0]
    before = os.times()
    t0 = time.monotonic()
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = os.times()
    if done.returncode != 0:
        raise SystemExit(f"bench_serve_path: budgetscope load failed: {done.stderr.strip()[-400:]}")
    summary = json.loads(done.stdout)
    cpu = meter.seconds()
    client_s = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    tok_s = summary["output_tokens_per_s"] or 0.0
    tokens = tok_s * summary["duration_s"]
    return {
        "tok_s": tok_s,
        "steps_s": (_steps(port) - steps0) / wall,
        "errors": summary["sent"] - summary["ok"],
        "requests": summary["ok"],
        "load": [load0, os.getloadavg()[0]],
        "client_cpu_us_per_token": client_s * 1e6 / tokens if tokens else None,
        "server_cpu_us_per_token": {k: v * 1e6 / tokens for k, v in cpu.items() if k != "client"} if tokens else {},
        "ttft_ms_p50": summary["figures"]["client_ttft_ms"].get("p50"),
        "ttft_ms_p99": summary["figures"]["client_ttft_ms"].get("p99"),
    }


def span_latencies(spans_path: Path, records: list[dict]) -> dict:
    """Client send → server span start, split at the server's read of the request (`budgetscope.http.read_unix_nano`:
    before it the request waited in the kernel for the loop, after it for the handler); and engine first token →
    client receipt. Joined by request id; ms."""
    server: dict[str, list] = {}  # request id → [span start, read, first token]
    with open(spans_path) as fh:
        for line in fh:
            for rs in json.loads(line).get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    spans = ss.get("spans", [])
                    roots = {}
                    for s in spans:
                        if s.get("kind") == 2:  # SERVER: the request's root span
                            attrs = {a["key"]: a["value"] for a in s.get("attributes", [])}
                            rid = attrs.get("gen_ai.response.id", {}).get("stringValue")
                            read = attrs.get("budgetscope.http.read_unix_nano", {}).get("intValue")
                            roots[s["spanId"]] = rid
                            entry = server.setdefault(rid, [None, None, None])
                            entry[0], entry[1] = int(s["startTimeUnixNano"]), int(read) if read else None
                    for s in spans:
                        if s["name"] == "stage.decode" and s.get("parentSpanId") in roots:
                            server.setdefault(roots[s["parentSpanId"]], [None, None, None])[2] = int(
                                s["startTimeUnixNano"]
                            )
    pre, to_read, read_to_start, lag = [], [], [], []
    for r in records:
        start, read, first = server.get(r["id"], (None, None, None))
        if start is None:
            continue
        pre.append((start - r["sent_unix_ns"]) / 1e6)
        if read is not None:
            to_read.append((read - r["sent_unix_ns"]) / 1e6)
            read_to_start.append((start - read) / 1e6)
        if first and r["first_ns"]:
            lag.append((r["first_ns"] - first) / 1e6)
    return {
        "pre_span_ms": _quantiles(pre),
        "send_to_read_ms": _quantiles(to_read),
        "read_to_span_ms": _quantiles(read_to_start),
        "first_token_delivery_ms": _quantiles(lag),
        "joined": len(pre),
    }


def _quantiles(xs: list[float]) -> dict:
    if not xs:
        return {}
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]  # noqa: E731
    return {
        "p50": round(pick(0.5), 2),
        "p90": round(pick(0.9), 2),
        "p99": round(pick(0.99), 2),
        "max": round(xs[-1], 2),
    }


def print_profile(directory: Path, top: int) -> None:
    for name in ("loop", "reader"):
        path = directory / f"{name}.prof"
        if not path.exists():
            continue
        print(f"\n--- cProfile, API process {name} (timed window), top {top} by own time ---")
        stats = pstats.Stats(str(path))
        stats.sort_stats("tottime").print_stats(top)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--threads-file", default="", help=argparse.SUPPRESS)
    p.add_argument("--exporter", default=None, help=argparse.SUPPRESS)
    p.add_argument("--config", default="1b", help="named model config (its vocabulary and tokenizer; no weights)")
    p.add_argument("--streams", type=int, default=64, help="streaming requests kept in flight (closed loop)")
    p.add_argument("--max-seqs", type=int, default=0, help="engine --max-seqs (default: --streams)")
    p.add_argument("--max-batched-tokens", type=int, default=512)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=256)
    p.add_argument("--step-us", type=float, default=500.0, help="fake device time of a step, µs")
    p.add_argument("--per-seq-us", type=float, default=0.0, help="and per sequence in it, µs")
    p.add_argument("--tokens", choices=("vocab", "ascii"), default="vocab", help="which token ids the fake samples")
    p.add_argument("--no-instrument", dest="instrument", action="store_false", help="engine serve --no-instrument")
    p.add_argument("--no-async-scheduling", dest="async_scheduling", action="store_false", default=None)
    p.add_argument("--client", choices=("raw", "loadgen"), default="raw")
    p.add_argument("--duration", type=float, default=10.0, help="timed seconds")
    p.add_argument("--warmup", type=float, default=3.0, help="untimed seconds of load first")
    p.add_argument("--spans", action="store_true", help="export spans to a file; print pre-span wait, delivery lag")
    p.add_argument("--profile", default="", help="cProfile the API process into this folder and print the top")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--workdir", default="", help="keep the server's files (spans, thread ids) here")
    p.add_argument("--json", action="store_true", help="print one JSON line of the figures last")
    args = p.parse_args()
    args.max_seqs = args.max_seqs or args.streams
    if args.serve:
        serve_main(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench_serve_path_") as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        proc = start_server(args, port, workdir)
        try:
            result = run_raw(args, port, proc, workdir) if args.client == "raw" else run_loadgen(args, port, proc)
        finally:
            stop_process(proc)
        if args.spans and args.client == "raw":
            result.update(span_latencies(workdir / "spans.jsonl", result["records"]))
    result.pop("records", None)
    print(
        f"\n{machine()}\nserved path: --config {args.config}, {args.streams} streams, {args.prompt_tokens}/"
        f"{args.output_tokens} tokens, fake steps {args.step_us:g} µs + {args.per_seq_us:g} µs a sequence "
        f"(at most {1e6 / (args.step_us + args.per_seq_us * args.max_seqs) * args.max_seqs:,.0f} tok/s), "
        f"client {args.client}, instrument {'on' if args.instrument else 'off'}, {args.duration:g} s timed"
    )
    load = ", ".join(f"{x:.2f}" for x in result["load"])
    print(
        f"output tok/s {result['tok_s']:,.0f}  steps/s {result['steps_s']:,.0f}  errors {result['errors']}  load {load}"
    )
    for key in ("cpu_us_per_token", "server_cpu_us_per_token"):
        if key in result:
            print("CPU µs a token: " + "  ".join(f"{k} {v:.1f}" for k, v in result[key].items() if v is not None))
    if result.get("client_cpu_us_per_token") is not None:
        print(f"budgetscope load CPU µs a token: {result['client_cpu_us_per_token']:.1f}")
    for key in ("pre_span_ms", "send_to_read_ms", "read_to_span_ms", "first_token_delivery_ms"):
        if key in result:
            print(f"{key}: {result[key]}")
    if args.profile:
        print_profile(Path(args.profile), args.top)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
