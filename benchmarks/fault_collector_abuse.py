"""Hostile senders against a `budgetscope collect` process, measured from outside it (its /proc entry).

    python benchmarks/fault_collector_abuse.py [--dribblers 400] [--dribble-s 30] [--abuse-s 20] [--only idle,...]

1. A 2 MB gzip body that inflates to 2 GiB: 413, and the collector's peak RSS (VmHWM) stays within
   --max-growth-mb of its idle RSS (inflating stops at --max-message-mb, 16 MiB).
2. Content-Length 99,999,999,999: 413 before any body is read.
3. --dribblers connections each sending one header byte every 5 s for --dribble-s seconds: the collector's thread
   count does not grow with them, a real OTLP export made meanwhile is answered within --max-answer-s, and
   the dribblers are cut once their headers are 10 s late.
4. --max-connections + 50 connections: the ones past the cap get 503.
5. idle: --idle-bodies connections declaring a 16 MiB body and sending nothing, reconnecting once cut, for
   --abuse-s seconds.
6. chunked: --chunked connections each sending --chunked-mib MiB of a chunked body that never ends, reconnecting
   once cut, for --abuse-s seconds; the collector's peak RSS stays within --max-pending-mb + --rss-slack-mb of
   its RSS before.
7. silent: --silent connections (more than --max-connections) that send nothing, each opened again
   --silent-reconnect-s after the collector closes it, for --abuse-s seconds.
8. minus1 (issue 37): --minus1 connections each sending a chunked body whose first chunk size is `-1`, then
   data as fast as they can, reconnecting when cut, for --abuse-s seconds: the collector's peak RSS stays within
   --max-pending-mb + --rss-slack-mb of its RSS before (it was +1,021 MB in 1.8 s).
9. pipeline: `GET /metrics` x --pipelined (300,000: 13 MB) on one connection whose answers are never read, again
   on a new connection once cut, for --abuse-s seconds: the same RSS bound (it was +987 MB).
10. members: --members-senders connections posting gzip bodies made of 314,572 empty members (6 MiB) one after
   another for --abuse-s seconds: the collector's CPU seconds per body, and every gzip export answered
   within --max-answer-s (each body cost ~35 CPU-s, and gzip exports waited over 58 s).
11. bombs: --bomb-senders connections posting small gzip bodies (16 MiB members of zeros, 16 KiB each) that
   inflate past --max-message-mb, one after another, for --abuse-s seconds: every gzip export answered within
   --max-answer-s (inflating takes turns, a step of at most 256 KiB a job), the RSS bound held.
12. framing: each malformed request line, header and chunk size of the list below on a fresh connection: its status,
   whether the collector closed the connection, and no traceback in the collector's log.
During 5-10 a real OTLP export over HTTP (a fresh connection; JSON, and gzip-compressed protobuf as the
OpenTelemetry Collector sends) and over gRPC is made every 0.5 s: each must be answered 200 / OK within
--max-answer-s. The collector's `batches_received` counter must grow by the real exports alone: nothing of an
attack reaches the archive.

Prints one line per check and exits 1 if any promise broke (docs/reliability.md keeps the figures).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from common import machine
from hostile_http import FRAMING, HEAD, REQUEST_LINES
from otlp_wire import export, native_request, to_proto

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
CHECKS = (
    "bomb",
    "length",
    "dribble",
    "cap",
    "idle",
    "chunked",
    "silent",
    "minus1",
    "pipeline",
    "members",
    "bombs",
    "framing",
)

RUN_COLLECT = "import sys; from budgetscope.commands.collect import collect; collect(sys.argv[1:])"


def proc_status(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text()
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    return int(proc_status(pid)[key].split()[0]) / 1024


def threads(pid: int) -> int:
    return int(proc_status(pid)["Threads"])


def reset_peak(pid: int) -> None:
    """Start VmHWM again from the current RSS (Linux: 5 > clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def start(archive: Path, max_connections: int, max_pending_mb: float) -> tuple[subprocess.Popen, int, int]:
    """A `budgetscope collect` process: (it, its HTTP port, its gRPC port). Its log goes to `archive`.log (a pipe
    nobody reads would fill, and block the collector on a traceback a request)."""
    log = open(f"{archive}.log", "w")  # noqa: SIM115 - open for the process's life
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            RUN_COLLECT,
            "--archive",
            str(archive),
            "--grpc-port",
            "0",
            "--http-port",
            "0",
            "--max-connections",
            str(max_connections),
            "--max-pending-mb",
            str(max_pending_mb),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    banner = proc.stdout.readline()
    m = re.search(r"OTLP/gRPC 127\.0\.0\.1:(\d+).*http://127\.0\.0\.1:(\d+)/v1/traces", banner)
    if not m:
        sys.exit(f"collect did not start: {banner}{Path(f'{archive}.log').read_text()}")
    return proc, int(m.group(2)), int(m.group(1))


def log_text(archive: Path) -> str:
    return Path(f"{archive}.log").read_text(errors="replace")


def cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def received(port: int) -> int:
    """The collector's `batches_received` counter (GET /metrics): export requests that reached the writer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    m = re.search(rb"^budgetscope_collector_batches_received_total (\d+)", data, re.M)
    return int(m.group(1)) if m else -1


def request(port: int, head: bytes, body: bytes = b"", timeout: float = 60) -> tuple[int, float]:
    """(HTTP status, seconds to the answer) of one request on a fresh connection; status 0 when the connection
    closed without an answer, -1 when none came within `timeout`."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(head)
            s.sendall(body)
        except TimeoutError:
            return -1, time.perf_counter() - t0
        except OSError:
            pass  # answered and closed before the body was read: the answer is still there to read
        data = b""
        try:
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            return -1, time.perf_counter() - t0
        except OSError:
            pass
    status = int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, time.perf_counter() - t0


def post_head(length: int, extra: str = "") -> bytes:
    return (
        f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def real_body() -> dict:
    return export([s for _ in range(20) for s in native_request(arrival=time.time_ns())[1]])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dribblers", type=int, default=400)
    ap.add_argument("--dribble-s", type=float, default=30.0)
    ap.add_argument("--bomb-gib", type=int, default=2)
    ap.add_argument(
        "--max-growth-mb",
        type=float,
        default=48.0,
        help="the collector's peak RSS over its idle RSS allowed (3 x --max-message-mb 16)",
    )
    ap.add_argument("--max-answer-s", type=float, default=1.0, help="a real export's answer among the abusers")
    ap.add_argument("--max-connections", type=int, default=512)
    ap.add_argument("--max-pending-mb", type=float, default=64)
    ap.add_argument("--abuse-s", type=float, default=20.0, help="how long each of idle, chunked, silent runs")
    ap.add_argument("--idle-bodies", type=int, default=64)
    ap.add_argument("--chunked", type=int, default=60)
    ap.add_argument("--chunked-mib", type=int, default=15)
    ap.add_argument("--silent", type=int, default=1000)
    ap.add_argument(
        "--silent-reconnect-s",
        type=float,
        default=1.0,
        help="a closed silent connection is opened again this much later (0: at once)",
    )
    ap.add_argument(
        "--rss-slack-mb",
        type=float,
        default=64.0,
        help="the collector's peak RSS may pass its RSS before by --max-pending-mb plus this",
    )
    ap.add_argument("--minus1", type=int, default=8, help="connections sending a chunk size of -1")
    ap.add_argument("--pipelined", type=int, default=300_000, help="GET /metrics requests sent, answers never read")
    ap.add_argument("--members-senders", type=int, default=2, help="connections posting many-member gzip bodies")
    ap.add_argument("--members", type=int, default=314_572, help="empty gzip members a body")
    ap.add_argument("--bomb-senders", type=int, default=8, help="connections posting gzip bombs one after another")
    ap.add_argument(
        "--safety-mb",
        type=float,
        default=1536.0,
        help="an attack stops once the collector's RSS grew this much (a run of the code before the fixes)",
    )
    ap.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated, of {', '.join(CHECKS)}")
    args = ap.parse_args()
    only = set(args.only.split(","))
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    broken: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        args.archive = Path(tmp) / "archive"
        proc, port, grpc_port = start(args.archive, args.max_connections, args.max_pending_mb)
        try:
            idle_threads, idle_rss = threads(proc.pid), rss_mb(proc.pid)
            print(f"collector idle: {idle_threads} threads, RSS {idle_rss:.0f} MB")
            for name, check in (
                ("bomb", check_bomb),
                ("length", check_length),
                ("dribble", check_dribblers),
                ("cap", check_cap),
                ("idle", check_idle_bodies),
                ("chunked", check_chunked),
                ("silent", check_silent),
                ("minus1", check_minus_one),
                ("pipeline", check_pipeline),
                ("members", check_members),
                ("bombs", check_bombs),
                ("framing", check_framing),
            ):
                if name in only and not check(args, proc, port, grpc_port):
                    broken.append(name)
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                print("the collector did not stop within 60 s of SIGTERM: killed")
                proc.kill()
                proc.wait()
    if broken:
        sys.exit(f"BROKEN: {', '.join(broken)}")
    print("all held")


def check_bomb(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """A compression bomb: 16 MiB members of zeros, repeated."""
    warm = Prober(port, grpc_port, proc.pid)  # what a first export costs (imports, threads) is not the bomb's
    for _ in range(3):
        warm.once()
    warm.channel.close()
    time.sleep(1)
    idle_rss = rss_mb(proc.pid)
    reset_peak(proc.pid)
    member = gzip.compress(bytes(16 << 20), compresslevel=9)
    bomb = member * (args.bomb_gib * 64)
    status, secs = request(port, post_head(len(bomb), "Content-Encoding: gzip\r\n"), bomb)
    peak = rss_mb(proc.pid, "VmHWM")
    print(
        f"gzip bomb: {len(bomb) / 1e6:.1f} MB inflating to {args.bomb_gib} GiB -> {status} in {secs:.2f} s; "
        f"collector peak RSS {peak:.0f} MB, {peak - idle_rss:.0f} MB over idle (limit {args.max_growth_mb:.0f})"
    )
    return status == 413 and peak - idle_rss <= args.max_growth_mb


def check_length(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    status, secs = request(port, post_head(99_999_999_999))
    print(f"Content-Length 99,999,999,999 -> {status} in {secs:.3f} s")
    return status == 413


def check_dribblers(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """Dribblers, and a real export among them."""
    idle_threads = threads(proc.pid)
    socks = []
    for _ in range(args.dribblers):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"P")
        socks.append(s)
    time.sleep(0.5)
    most_threads = threads(proc.pid)
    body = json.dumps(real_body()).encode()
    answers = []
    t_end = time.monotonic() + args.dribble_s
    alive = list(socks)
    while time.monotonic() < t_end:
        for s in list(alive):
            try:
                s.sendall(b"O")
            except OSError:
                alive.remove(s)
        status, secs = request(port, post_head(len(body)), body)
        answers.append((status, secs))
        most_threads = max(most_threads, threads(proc.pid))
        time.sleep(5)
    cut = sum(1 for s in socks if _closed(s))
    worst = max(secs for _, secs in answers)
    print(
        f"{args.dribblers} connections dribbling a byte every 5 s for {args.dribble_s:.0f} s: collector threads "
        f"{idle_threads} idle, at most {most_threads} meanwhile; {len(answers)} real exports answered "
        f"{sorted({st for st, _ in answers})} in at most {worst:.3f} s; {cut} dribblers cut by the collector"
    )
    for s in socks:
        s.close()
    return not (
        most_threads > idle_threads + 2
        or worst > args.max_answer_s
        or any(st != 200 for st, _ in answers)
        or (args.dribble_s > 12 and cut < args.dribblers)
    )


def check_cap(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """The connection cap, held by connections that are all making progress (a body arriving byte by byte):
    one more is answered 503. (Silent ones would give up their slots: `check_silent`.)"""
    time.sleep(1)
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.max_connections)]
    for s in held:
        s.sendall(post_head(1 << 20))
    refused = 0
    for i in range(10):
        for s in held:
            s.sendall(bytes(1 << 10))  # progress: each body keeps arriving
        if i < 5:  # first, 2.5 s for handshakes a burst overflowed (the kernel retries them after 1 s)
            time.sleep(0.5)
            continue
        for _ in range(10):
            try:
                status, _ = request(port, b"", timeout=5)
            except OSError:
                status = 0  # given a slot (someone evicted), then silent itself: not the promise
            refused += status == 503
    for s in held:
        s.close()
    print(f"{args.max_connections} connections held by bodies that keep arriving, 50 more: {refused} answered 503")
    return refused == 50


class Prober:
    """Real OTLP exports every 0.5 s while an abuse runs: HTTP on a fresh connection, gRPC on one channel."""

    def __init__(self, port: int, grpc_port: int, pid: int):
        self.port, self.pid = port, pid
        self.channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        self.export = self.channel.unary_unary(EXPORT)
        self.answers: dict[str, list[tuple[str, float]]] = {"http": [], "http gzip": [], "grpc": []}
        self.most_rss = 0.0

    def once(self) -> None:
        body = real_body()
        data = json.dumps(body).encode()
        status, secs = request(self.port, post_head(len(data)), data, timeout=60)
        self.answers["http"].append((str(status), secs))
        packed = gzip.compress(to_proto(body))
        head = (
            f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Encoding: gzip\r\nContent-Length: {len(packed)}\r\n\r\n"
        ).encode()
        status, secs = request(self.port, head, packed, timeout=60)
        self.answers["http gzip"].append((str(status), secs))
        t0 = time.perf_counter()
        try:
            self.export(to_proto(body), timeout=60)
            code = "OK"
        except grpc.RpcError as e:
            code = e.code().name
        self.answers["grpc"].append((code, time.perf_counter() - t0))
        self.most_rss = max(self.most_rss, rss_mb(self.pid))

    def run(self, seconds: float, stop: threading.Event | None = None) -> None:
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end and not (stop and stop.is_set()):
            self.once()
            time.sleep(0.5)
        self.channel.close()

    def held(self, max_answer_s: float) -> bool:
        return all(code in ("200", "OK") and secs <= max_answer_s for a in self.answers.values() for code, secs in a)

    def num_ok(self) -> int:
        return sum(code in ("200", "OK") for a in self.answers.values() for code, _ in a)

    def summary(self) -> str:
        out = []
        for proto, answers in self.answers.items():
            if not answers:
                continue
            codes = sorted({c for c, _ in answers})
            secs = sorted(s for _, s in answers)
            out.append(
                f"{len(answers)} real {proto.upper()} exports answered {'/'.join(codes)}, median "
                f"{secs[len(secs) // 2]:.3f} s, at most {secs[-1]:.3f} s"
            )
        return "; ".join(out)


def abuse(target, count: int) -> tuple[threading.Event, list[threading.Thread], list[int]]:
    """`count` attacker threads running `target(stop, counter)` until the event is set."""
    stop, counter = threading.Event(), [0]
    workers = [threading.Thread(target=target, args=(stop, counter), daemon=True) for _ in range(count)]
    for w in workers:
        w.start()
    return stop, workers, counter


def _wait_closed(s: socket.socket, stop: threading.Event) -> None:
    """Until the collector closes `s` (or `stop`), reading and dropping whatever it sends."""
    s.settimeout(0.5)
    while not stop.is_set():
        try:
            if not s.recv(65536):
                return
        except TimeoutError:
            continue
        except OSError:
            return


def check_idle_bodies(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """Connections that declare a 16 MiB body and send none of it, reconnecting when cut."""

    def attacker(stop: threading.Event, counter: list[int]) -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port)) as s:
                    s.sendall(post_head(16 << 20))
                    counter[0] += 1
                    _wait_closed(s, stop)
            except OSError:
                time.sleep(0.1)

    return _under_abuse(
        args,
        proc,
        port,
        grpc_port,
        attacker,
        args.idle_bodies,
        f"{args.idle_bodies} connections declaring Content-Length 16,777,216 and sending nothing",
        "bodies declared",
    )


def check_chunked(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """Chunked bodies of --chunked-mib MiB that never end: all their data, then silence, reconnecting when cut."""
    size = args.chunked_mib << 20
    piece = bytes(1 << 20)
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % size
    )

    def attacker(stop: threading.Event, counter: list[int]) -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port)) as s:
                    s.sendall(head)
                    for _ in range(args.chunked_mib):
                        if stop.is_set():
                            break
                        s.sendall(piece)
                    counter[0] += 1
                    _wait_closed(s, stop)
            except OSError:
                pass
            time.sleep(0.1)

    return _under_abuse(
        args,
        proc,
        port,
        grpc_port,
        attacker,
        args.chunked,
        f"{args.chunked} unfinished {args.chunked_mib} MiB chunked bodies",
        "bodies sent whole but for their end",
        check_rss=True,
    )


def check_silent(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """--silent connections that send nothing, each opened again --silent-reconnect-s after the collector
    closed it (0: at once, a connection flood at the attacker's full speed)."""

    def attacker(stop: threading.Event, counter: list[int]) -> None:
        socks: list[socket.socket] = []
        closed_at: list[float] = [0.0] * args.silent  # when each missing connection was closed
        while not stop.is_set():
            now = time.monotonic()
            due = [t for t in closed_at if now - t >= args.silent_reconnect_s]
            closed_at = [t for t in closed_at if now - t < args.silent_reconnect_s]
            for _ in due:
                try:
                    socks.append(socket.create_connection(("127.0.0.1", port)))
                    counter[0] += 1
                except OSError:
                    closed_at.append(now)
            readable, _, _ = select.select(socks, [], [], 0.05)
            for s in readable:  # closed by the collector (or answered 503 and closed)
                socks.remove(s)
                s.close()
                closed_at.append(time.monotonic())
        for s in socks:
            s.close()

    return _under_abuse(
        args,
        proc,
        port,
        grpc_port,
        attacker,
        1,
        f"{args.silent} silent connections ({args.max_connections} allowed), each opened again "
        f"{args.silent_reconnect_s:g} s after it is closed",
        "connections opened",
    )


def check_minus_one(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """Chunked bodies whose first chunk size is -1, then data as fast as the sender can, reconnecting when cut."""
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n-1\r\n"
    )
    piece = bytes(1 << 20)

    def attacker(stop: threading.Event, counter: list[int]) -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port)) as s:
                    s.sendall(head)
                    counter[0] += 1
                    while not stop.is_set():
                        s.sendall(piece)
            except OSError:
                time.sleep(0.05)

    return _under_abuse(
        args,
        proc,
        port,
        grpc_port,
        attacker,
        args.minus1,
        f"{args.minus1} connections sending a chunk size of -1, then data as fast as they can",
        "bodies begun",
        check_rss=True,
    )


def check_pipeline(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """`GET /metrics` x --pipelined on one connection whose answers are never read; again once cut."""
    burst = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * args.pipelined

    def attacker(stop: threading.Event, counter: list[int]) -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port)) as s:
                    s.settimeout(0.5)
                    counter[0] += 1
                    view = memoryview(burst)
                    while view and not stop.is_set():
                        try:
                            view = view[s.send(view) :]
                        except TimeoutError:
                            continue  # the collector reads no more until its answers are read
                    while not stop.is_set():  # and the answers are never read
                        select.select([], [], [], 0.5)
                        if _closed_now(s):
                            break
            except OSError:
                time.sleep(0.05)

    return _under_abuse(
        args,
        proc,
        port,
        grpc_port,
        attacker,
        1,
        f"GET /metrics x {args.pipelined:,} ({len(burst) / 1e6:.0f} MB) on one connection, answers never read",
        "bursts begun",
        check_rss=True,
    )


def _closed_now(s: socket.socket) -> bool:
    """Whether the peer closed `s` (peeking, without reading what it sent)."""
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def check_members(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """gzip bodies of --members empty members, posted one after another on --members-senders connections."""
    body = gzip.compress(b"", mtime=0) * args.members
    what = f"gzip bodies of {args.members:,} empty members ({len(body) / 2**20:.0f} MiB)"
    return _gzip_flood(args, proc, port, grpc_port, body, args.members_senders, what, {400, 0}, check_rss=False)


def check_bombs(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """Small gzip bodies that inflate past the message limit, posted one after another on --bomb-senders
    connections: the inflating threads always busy, every body 413 (or 429: it gave way to a smaller one)."""
    body = gzip.compress(bytes(16 << 20), compresslevel=9) * 2  # 32 MiB of zeros in ~32 KiB
    what = f"{len(body) / 1024:.0f} KiB gzip bodies that inflate to 32 MiB"
    return _gzip_flood(args, proc, port, grpc_port, body, args.bomb_senders, what, {413, 429}, check_rss=True)


def _gzip_flood(args, proc, port: int, grpc_port: int, body: bytes, senders: int, what: str, expected, check_rss):
    """`senders` connections posting the gzip `body` one after another while a `Prober` exports; every body
    answered one of the `expected` statuses."""
    head = post_head(len(body), "Content-Encoding: gzip\r\n")
    statuses: dict[int, int] = {}

    def attacker(stop: threading.Event, counter: list[int]) -> None:
        while not stop.is_set():
            try:
                status, _ = request(port, head, body, timeout=120)
            except OSError:
                status = 0
            statuses[status] = statuses.get(status, 0) + 1
            counter[0] += 1

    held = _under_abuse(
        args,
        proc,
        port,
        grpc_port,
        attacker,
        senders,
        f"{senders} connections posting {what} one after another",
        "bodies answered",
        check_rss=check_rss,
        cpu_per="body",
    )
    print(f"  the bodies' statuses: {dict(sorted(statuses.items()))}")
    return held and set(statuses) <= set(expected)


def check_framing(args, proc: subprocess.Popen, port: int, grpc_port: int) -> bool:
    """Each malformed input on a fresh connection (tests/hostile_http.py): its status, and whether the collector
    closed the connection after it."""
    before_log, before_received = len(log_text(args.archive)), received(port)
    held = True
    cases = [(what, HEAD + rest, want) for what, rest, want in FRAMING] + REQUEST_LINES
    for what, sent, want in cases:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            try:
                s.sendall(sent)
                s.shutdown(socket.SHUT_WR)  # a body cut short ends here
            except OSError:
                pass  # answered and closed before all of it was read
            data, closed = b"", True
            try:
                while chunk := s.recv(65536):
                    data += chunk
            except TimeoutError:
                closed = False
            except OSError:
                pass  # reset after the answer: closed
        status = int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else 0
        answers = data.count(b"\r\nServer: budgetscope-collector\r\n")
        ok = status == want and closed and answers == 1
        held &= ok
        print(f"  {what}: {status}, {'closed' if closed else 'left open'}{'' if ok else f' (expected {want}, closed)'}")
    log = log_text(args.archive)[before_log:]
    tracebacks = log.count("Traceback")
    landed = received(port) - before_received
    print(f"framing: {len(cases)} malformed requests; {tracebacks} tracebacks in the collector's log; {landed} landed")
    return held and not tracebacks and landed == 0


def _under_abuse(
    args,
    proc: subprocess.Popen,
    port: int,
    grpc_port: int,
    attacker,
    count: int,
    what: str,
    counted: str,
    check_rss: bool = False,
    cpu_per: str = "",
) -> bool:
    """Run `count` attacker threads for --abuse-s seconds while a `Prober` exports; print the figures. The
    attack stops early once the collector's RSS grew --safety-mb (the code before the fixes). `cpu_per`: also
    print the collector's CPU seconds per counted attack."""
    prober = Prober(port, grpc_port, proc.pid)
    for _ in range(12):  # warm: the archive's own memory for real exports is not the abuse's
        prober.once()
    prober.answers = {k: [] for k in prober.answers}
    time.sleep(1)
    before_rss, before_cpu, before_received = rss_mb(proc.pid), cpu_s(proc.pid), received(port)
    reset_peak(proc.pid)
    t0 = time.monotonic()
    stop, workers, counter = abuse(attacker, count)
    cut_short = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if rss_mb(proc.pid) - before_rss > args.safety_mb:
                cut_short.set()
                stop.set()
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(1)  # the abuse in place before the first real export
    prober.run(args.abuse_s, stop)
    stop.set()
    secs = time.monotonic() - t0
    for w in workers:
        w.join(10)
    peak = rss_mb(proc.pid, "VmHWM")
    cpu = cpu_s(proc.pid) - before_cpu
    time.sleep(1.5)  # a commit: what was acknowledged is counted
    landed = received(port) - before_received
    bound = before_rss + args.max_pending_mb + args.rss_slack_mb
    per = f"; collector CPU {cpu:.1f} s, {cpu / max(1, counter[0]):.3f} s per {cpu_per}" if cpu_per else ""
    short = (
        f" (stopped after {secs:.1f} s: RSS grew past --safety-mb {args.safety_mb:.0f})" if cut_short.is_set() else ""
    )
    print(
        f"{what}, {args.abuse_s:.0f} s{short} ({counter[0]:,} {counted}): {prober.summary()}; collector RSS "
        f"{before_rss:.0f} MB before, peak {peak:.0f} MB, +{peak - before_rss:.0f} MB (bound {bound:.0f} = before + "
        f"{args.max_pending_mb:.0f} pending + {args.rss_slack_mb:.0f}){per}; batches received {landed:,} "
        f"(real exports answered 200/OK: {prober.num_ok():,})"
    )
    return (
        prober.held(args.max_answer_s)
        and (not check_rss or peak <= bound)
        and not cut_short.is_set()
        and landed == prober.num_ok()
    )


def _closed(s: socket.socket) -> bool:
    s.settimeout(0.5)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


if __name__ == "__main__":
    main()
