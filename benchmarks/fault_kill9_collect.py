"""kill -9 of `budgetscope collect` under OTLP/HTTP load, restarted at once on the same port, several times.

    python benchmarks/fault_kill9_collect.py [--kills 3] [--clients 4] [--seconds 8]

Each round: --clients senders export (20 native requests, 140 spans, an export; each waits for its answer),
the collector is killed with SIGKILL after --seconds, and restarted at once on the same port; a reader opens
the archive in a loop throughout. At the end: every acknowledged span is in the archive exactly once, every
acknowledged request derived, and the reader never failed. Prints the figures; exits 1 if any promise broke.
(tests/test_archive_live.py runs a short version of this in the test suite.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
import httpx

from budgetscope.archive.errors import ArchiveError
from budgetscope.opener import Archive
from common import free_port, machine
from otlp_wire import export, native_request

RUN_COLLECT = "import sys; from budgetscope.commands.collect import collect; collect(sys.argv[1:])"


def start(archive: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_COLLECT, "--archive", str(archive), "--no-grpc", "--http-port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    banner = proc.stdout.readline()
    if not re.match(r"budgetscope collect: OTLP/HTTP http://127\.0\.0\.1:\d+/v1/traces;", banner):
        sys.exit(f"collect did not start: {banner}{proc.stderr.read() if proc.poll() is not None else ''}")
    return proc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0, help="load before each kill")
    args = ap.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    port = free_port()
    acked: list[list[dict]] = []
    unanswered = [0]
    reader_errors: list[str] = []
    reads = [0]
    done = threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "prod"

        def reader() -> None:
            while not done.is_set():
                try:
                    with Archive(archive, read_only=True) as r:
                        r.con.execute("SELECT count(*) FROM spans, (SELECT count(*) FROM requests)").fetchall()
                    reads[0] += 1
                except ArchiveError as e:
                    if "no archive at" not in str(e) and "not a budgetscope archive" not in str(e):
                        reader_errors.append(str(e))
                except Exception as e:  # noqa: BLE001 - a torn segment would land here
                    reader_errors.append(repr(e))

        def client(stop: threading.Event) -> None:
            with httpx.Client(timeout=30) as h:
                while not stop.is_set():
                    spans = [s for _ in range(20) for s in native_request(arrival=time.time_ns(), client=(2, 1))[1]]
                    try:
                        r = h.post(
                            f"http://127.0.0.1:{port}/v1/traces",
                            content=json.dumps(export(spans)),
                            headers={"Content-Type": "application/json"},
                        )
                    except httpx.HTTPError:
                        unanswered[0] += 1
                        return  # the collector died under us: this one was not acknowledged
                    if r.status_code == 200:
                        acked.append(spans)

        rt = threading.Thread(target=reader)
        rt.start()
        restarts = []
        try:
            for _ in range(args.kills):
                t0 = time.perf_counter()
                proc = start(archive, port)
                restarts.append(time.perf_counter() - t0)
                stop = threading.Event()
                clients = [threading.Thread(target=client, args=(stop,)) for _ in range(args.clients)]
                for t in clients:
                    t.start()
                time.sleep(args.seconds)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                stop.set()
                for t in clients:
                    t.join()
            proc = start(archive, port)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                sys.exit(f"the last collector exited {proc.returncode}: {err}")
        finally:
            done.set()
            rt.join()
        want = {(s["traceId"], s["spanId"]) for spans in acked for s in spans}
        roots = {s["traceId"] for spans in acked for s in spans if s["name"] == "llm.request"}
        with Archive(archive, read_only=True) as r:
            got = r.con.execute("SELECT trace_id, span_id, count(*) FROM spans GROUP BY ALL").fetchall()
            derived = {t for (t,) in r.con.execute("SELECT trace_id FROM requests WHERE has_client_span").fetchall()}
    stored = {(t, s) for t, s, _ in got}
    lost, doubled = len(want - stored), sum(1 for *_, n in got if n > 1)
    underived = len(roots - derived)
    print(
        f"{args.kills} x kill -9 under {args.clients} OTLP/HTTP clients ({args.seconds:g} s each): "
        f"{lost:,} of {len(want):,} acknowledged spans lost, {doubled:,} doubled, {underived:,} of {len(roots):,} "
        f"acknowledged requests not derived; {unanswered[0]} exports cut by the kills (not acknowledged); "
        f"restart to banner {max(restarts):.2f} s at most; reader: {reads[0]} reads, {len(reader_errors)} errors; "
        f"load average {os.getloadavg()[0]:.1f} after"
    )
    if lost or doubled or underived or reader_errors or not acked:
        sys.exit(f"BROKEN{': ' + reader_errors[0] if reader_errors else ''}")
    print("all held")


if __name__ == "__main__":
    main()
