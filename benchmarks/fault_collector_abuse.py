"""Hostile senders against a `budgetscope collect` process, measured from outside it (its /proc entry).

    python benchmarks/fault_collector_abuse.py [--dribblers 400] [--dribble-s 30]

1. A 2 MB gzip body that inflates to 2 GiB: 413, and the collector's peak RSS (VmHWM) stays within
   --max-growth-mb of its idle RSS (inflating stops at --max-message-mb, 16 MiB).
2. Content-Length 99,999,999,999: 413 before any body is read.
3. --dribblers connections each sending one header byte every 5 s for --dribble-s seconds: the collector's thread
   count does not grow with them, a real OTLP export made meanwhile is answered within --max-answer-s, and
   the dribblers are cut once their headers are 10 s late.
4. --max-connections + 50 connections: the ones past the cap get 503.

Prints one line per check and exits 1 if any promise broke (docs/reliability.md keeps the figures).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from common import machine  # noqa: E402
from otlp_wire import export, native_request  # noqa: E402

RUN_COLLECT = "import sys; from budgetscope.collector.command import collect; collect(sys.argv[1:])"


def proc_status(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text()
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    return int(proc_status(pid)[key].split()[0]) / 1024


def threads(pid: int) -> int:
    return int(proc_status(pid)["Threads"])


def start(archive: Path, max_connections: int) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", RUN_COLLECT, "--archive", str(archive), "--no-grpc",
                             "--http-port", "0", "--max-connections", str(max_connections)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    banner = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/v1/traces", banner)
    if not m:
        sys.exit(f"collect did not start: {banner}{proc.stderr.read() if proc.poll() is not None else ''}")
    return proc, int(m.group(1))


def request(port: int, head: bytes, body: bytes = b"", timeout: float = 60) -> tuple[int, float]:
    """(HTTP status, seconds to the answer) of one request on a fresh connection."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        try:
            s.sendall(body)
        except OSError:
            pass  # answered and closed before the body was read: the answer is still there to read
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    status = int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, time.perf_counter() - t0


def post_head(length: int, extra: str = "") -> bytes:
    return (f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {length}\r\n\r\n").encode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dribblers", type=int, default=400)
    ap.add_argument("--dribble-s", type=float, default=30.0)
    ap.add_argument("--bomb-gib", type=int, default=2)
    ap.add_argument("--max-growth-mb", type=float, default=48.0,
                    help="the collector's peak RSS over its idle RSS allowed (3 x --max-message-mb 16)")
    ap.add_argument("--max-answer-s", type=float, default=1.0, help="a real export's answer among the dribblers")
    ap.add_argument("--max-connections", type=int, default=512)
    args = ap.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    broken: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start(Path(tmp) / "archive", args.max_connections)
        try:
            idle_threads, idle_rss = threads(proc.pid), rss_mb(proc.pid)
            print(f"collector idle: {idle_threads} threads, RSS {idle_rss:.0f} MB")

            # 1. the compression bomb: 16 MiB members of zeros, repeated
            member = gzip.compress(bytes(16 << 20), compresslevel=9)
            bomb = member * (args.bomb_gib * 64)
            status, secs = request(port, post_head(len(bomb), "Content-Encoding: gzip\r\n"), bomb)
            peak = rss_mb(proc.pid, "VmHWM")
            print(f"gzip bomb: {len(bomb) / 1e6:.1f} MB inflating to {args.bomb_gib} GiB -> {status} in {secs:.2f} s; "
                  f"collector peak RSS {peak:.0f} MB, {peak - idle_rss:.0f} MB over idle (limit {args.max_growth_mb:.0f})")
            if status != 413 or peak - idle_rss > args.max_growth_mb:
                broken.append("gzip bomb")

            # 2. an absurd Content-Length
            status, secs = request(port, post_head(99_999_999_999))
            print(f"Content-Length 99,999,999,999 -> {status} in {secs:.3f} s")
            if status != 413:
                broken.append("Content-Length")

            # 3. dribblers, and a real export among them
            socks = []
            for _ in range(args.dribblers):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"P")
                socks.append(s)
            time.sleep(0.5)
            most_threads = threads(proc.pid)
            body = json.dumps(export([s for _ in range(20) for s in native_request(arrival=time.time_ns())[1]])).encode()
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
            print(f"{args.dribblers} connections dribbling a byte every 5 s for {args.dribble_s:.0f} s: collector threads "
                  f"{idle_threads} idle, at most {most_threads} meanwhile; {len(answers)} real exports answered "
                  f"{sorted({st for st, _ in answers})} in at most {worst:.3f} s; {cut} dribblers cut by the collector")
            for s in socks:
                s.close()
            if (most_threads > idle_threads + 2 or worst > args.max_answer_s or any(st != 200 for st, _ in answers)
                    or (args.dribble_s > 12 and cut < args.dribblers)):
                broken.append("dribblers")

            # 4. the connection cap
            time.sleep(1)
            held = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.max_connections)]
            time.sleep(0.5)
            refused = 0
            for _ in range(50):
                status, _ = request(port, b"", timeout=5)
                refused += status == 503
            for s in held:
                s.close()
            print(f"{args.max_connections} connections held, 50 more: {refused} answered 503")
            if refused != 50:
                broken.append("connection cap")
        finally:
            proc.terminate()
            proc.wait(60)
    if broken:
        sys.exit(f"BROKEN: {', '.join(broken)}")
    print("all held")


def _closed(s: socket.socket) -> bool:
    s.settimeout(0.5)
    try:
        return s.recv(1) == b""
    except (TimeoutError, socket.timeout):
        return False
    except OSError:
        return True


if __name__ == "__main__":
    main()
