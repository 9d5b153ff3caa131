"""The collector offered 5x its sustained rate, measured from outside its process.

    python benchmarks/fault_overload.py [--factor 5] [--max-pending-mb 64] [--seconds 20] [--format native]

Phase 1 (sustained): 8 exporters, each waiting for its answer before its next export (as an SDK does), for
--seconds: the rate the collector keeps up with, in spans/s acknowledged. Phase 2 (overload): open-loop
senders offer --factor times that rate for --seconds (sending when the schedule says, on as many keep-alive
connections as it takes, never waiting for an answer to send the next). Then the collector is stopped (it
lands everything it accepted) and the archive read back.

Checks, each fails the script (exit 1): the senders really offered at least 0.8 x --factor; refusals happened
and every one is a 429 (or 503) with Retry-After; no request goes unanswered; the collector's peak RSS stays
under --max-rss-mb; every acknowledged span is in the archive once. On a 2-core machine the collector runs
under a CPU quota (--collector-cpu, a cgroup: needs root) so that the senders, which build every export anew
under new trace ids, can offer 5x of what it sustains under that same quota.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import format_traces
from budgetscope.ingest.otlp_json import count_spans
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from common import machine

RUN_COLLECT = "import sys; from budgetscope.commands.collect import collect; collect(sys.argv[1:])"
_BODIES: list[bytes] = []  # set before the senders fork
_TRACE_AT: list[list[int]] = []  # where each body's trace ids begin
TRACE_KEY = b'"traceId":"'


def fresh(k: int, send: int) -> bytes:
    """Body `k` with the first 8 hex digits of every trace id replaced by `send`: new traces each send (a
    repeated body would be answered from the archive's dedup, far cheaper than new spans)."""
    out = bytearray(_BODIES[k])
    tag = b"%08x" % send
    for at in _TRACE_AT[k]:
        out[at : at + 8] = tag
    return bytes(out)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def cpu_cgroup(cores: float) -> Path:
    """A cgroup v1 CPU controller group limited to `cores` of CPU time; exits with one line if it cannot."""
    root = Path("/sys/fs/cgroup/cpu")
    group = root / f"budgetscope-fault-{os.getpid()}"
    try:
        group.mkdir()
        period = int((group / "cpu.cfs_period_us").read_text())
        (group / "cpu.cfs_quota_us").write_text(str(int(cores * period)))
    except OSError as e:
        sys.exit(
            f"cannot limit the collector's CPU with a cgroup at {root} ({e.strerror or e}): run as root, "
            "or give --collector-cpu 0 on a machine with more cores than the senders need"
        )
    return group


def _post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, bool]:
    conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    if r.getheader("Connection", "").lower() == "close":
        conn.close()
    return r.status, r.getheader("Retry-After") is not None


def _closed_loop(args: tuple) -> list[tuple[int, int, bool]]:
    """One exporter: post bodies (send numbers i, i + n, ...), each after the previous answer, until the
    deadline."""
    port, i, n, deadline = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    out = []
    send = i
    while time.time() < deadline:
        status, retry = _post(conn, fresh(send % len(_BODIES), send))
        out.append((send, status, retry))
        send += n
    return out


def _open_loop(args: tuple) -> list[tuple[int, int, bool]]:
    """One sender process: `threads` connections share a schedule of one export every `interval_s`, from
    `start`; a connection sends the next due export as soon as it is free (lateness is recorded by the rate)."""
    port, sends, interval_s, start, threads = args
    lock = threading.Lock()
    next_i = [0]
    out: list[tuple[int, int, bool]] = []

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                j = next_i[0]
                next_i[0] += 1
            if j >= len(sends):
                return
            due = start + j * interval_s
            if (wait := due - time.time()) > 0:
                time.sleep(wait)
            body = fresh(sends[j] % len(_BODIES), sends[j])
            try:
                status, retry = _post(conn, body)
            except (OSError, http.client.HTTPException):
                status, retry = 0, False
                conn.close()
            out.append((sends[j], status, retry))

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--factor", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--max-pending-mb", type=float, default=16.0)
    ap.add_argument(
        "--max-rss-mb",
        type=float,
        default=1024.0,
        help="the collector's peak RSS allowed during the overload (request bytes are bounded by "
        "--max-pending-mb; the rest is the archive's DuckDB working set and merges)",
    )
    ap.add_argument(
        "--requests",
        type=int,
        default=30_000,
        help="synthetic requests (7 spans each, 512 a body; with --format, as many spans), sent again under new "
        "trace ids as often as the plan needs",
    )
    ap.add_argument(
        "--format",
        choices=list(format_traces.FORMATS),
        default="native",
        help="the spans sent (format_traces.py): budgetscope's own, or an upstream server's (vllm_journey: "
        "1.9 KB of JSON a span, three times the native's)",
    )
    ap.add_argument(
        "--collector-args",
        default="",
        help="more `collect` options, space-separated (e.g. '--max-unlanded-spans 80000')",
    )
    ap.add_argument("--senders", type=int, default=4, help="sender processes in the overload phase")
    ap.add_argument("--connections", type=int, default=64, help="keep-alive connections per sender process")
    ap.add_argument(
        "--collector-cpu",
        type=float,
        default=0.15,
        help="cores the collector may use (a cgroup v1 CPU quota; needs root; 0: no limit). Senders "
        "that build every export anew cannot offer 5x of an unlimited collector from the same "
        "2 cores; with a quota its sustained rate is measured under the same quota (0.25 until "
        "2026-11-30, when the collector sustained 21,000-27,000 spans/s under it and the senders, "
        "at 70,000-118,000 spans/s, offered only 2.4-3.9x of that)",
    )
    args = ap.parse_args()
    global _BODIES
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp) / "t.jsonl"
        start_ns = time.time_ns() - 120 * 10**9
        if args.format == "native":
            write_jsonl(
                traces, SyntheticSpec(num_requests=args.requests, tiers=("interactive", "batch"), start_ns=start_ns)
            )
        else:  # about as many spans as the native's requests make
            n = round(args.requests * 7 / format_traces.spans_per_request(args.format))
            format_traces.write(args.format, traces, n, start_ns)
        _BODIES = [x for x in traces.read_bytes().splitlines() if x.strip()]
        _TRACE_AT.extend([m.end() for m in re.finditer(re.escape(TRACE_KEY), b)] for b in _BODIES)
        spans_in = [count_spans(b) for b in _BODIES]
        print(f"machine: {machine()}")
        print(
            f"spans: {args.format}, {sum(spans_in):,} in {len(_BODIES):,} exports ({traces.stat().st_size / sum(spans_in):,.0f} bytes a span)"
        )
        archive = Path(tmp) / "archive"
        ctx = mp.get_context("fork")
        cgroup = cpu_cgroup(args.collector_cpu) if args.collector_cpu else None
        with ctx.Pool(8) as closed_pool, ctx.Pool(args.senders) as open_pool:
            closed_pool.map(abs, range(8))
            open_pool.map(abs, range(args.senders))
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    RUN_COLLECT,
                    "--archive",
                    str(archive),
                    "--no-grpc",
                    "--http-port",
                    "0",
                    "--max-pending-mb",
                    str(args.max_pending_mb),
                    *args.collector_args.split(),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=(lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid()))) if cgroup else None,
            )
            m = re.search(r"http://127\.0\.0\.1:(\d+)/v1/traces", proc.stdout.readline())
            if not m:
                sys.exit(f"collect did not start: {proc.stderr.read()}")
            port = int(m.group(1))
            load0 = os.getloadavg()[0]
            t0 = time.time()
            closed = sum(closed_pool.map(_closed_loop, [(port, i, 8, t0 + args.seconds) for i in range(8)]), [])
            sustained_s = time.time() - t0
            sustained = sum(spans_in[k % len(_BODIES)] for k, st, _ in closed if st == 200) / sustained_s
            peak_sustained = peak_rss_mb(proc.pid)
            reset_peak(proc.pid)
            rate = args.factor * sustained  # spans/s offered
            mean_spans = sum(spans_in) / len(spans_in)
            interval_s = mean_spans / rate * args.senders  # per sender process
            n_each = int(args.seconds / interval_s)
            first = max(k for k, _, _ in closed) + 1  # send numbers go on from the sustained phase's
            plan = [[first + p + j * args.senders for j in range(n_each)] for p in range(args.senders)]
            t1 = time.time() + 0.5
            overload = sum(
                open_pool.map(
                    _open_loop,
                    [
                        (port, plan[p], interval_s, t1 + p * interval_s / args.senders, args.connections)
                        for p in range(args.senders)
                    ],
                ),
                [],
            )
            overload_s = time.time() - t1
            peak_overload = peak_rss_mb(proc.pid)
            load1 = os.getloadavg()[0]
            proc.terminate()
            out, err = proc.communicate(timeout=300)
        # -- what came back, and what the archive holds --------------------------------------------------------
        results = closed + overload
        acked = {k for k, st, _ in results if st == 200}
        statuses: dict[int, int] = {}
        for _, st, _ in overload:
            statuses[st] = statuses.get(st, 0) + 1
        refused_without_retry = sum(1 for _, st, retry in results if st in (429, 503) and not retry)
        spans_of = [spans_in[k % len(_BODIES)] for k in range(max(k for k, _, _ in results) + 1)]
        offered = sum(spans_of[k] for k, _, _ in overload) / overload_s
        accepted = sum(spans_of[k] for k, st, _ in overload if st == 200) / overload_s
        with Archive(archive, read_only=True) as r:
            stored, distinct = r.con.execute(
                "SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans"
            ).fetchone()
        want = sum(spans_of[k] for k in acked)
    if cgroup:
        print(f"collector limited to {args.collector_cpu:g} core (cgroup {cgroup})")
        cgroup.rmdir()
    print(
        f"sustained (8 exporters waiting for answers, {sustained_s:.0f} s): {sustained:,.0f} spans/s acknowledged; "
        f"collector peak RSS {peak_sustained:.0f} MB; load average {load0:.1f} before"
    )
    print(
        f"overload ({args.senders} x {args.connections} connections, open loop, {overload_s:.0f} s): offered "
        f"{offered:,.0f} spans/s = {offered / sustained:.1f}x, accepted {accepted:,.0f} spans/s; answers {statuses}; "
        f"collector peak RSS {peak_overload:.0f} MB (sustained peak + {peak_overload - peak_sustained:.0f} MB; "
        f"limit {args.max_rss_mb:.0f}); load average {load1:.1f} after"
    )
    print(
        f"archive: {stored:,} spans ({distinct:,} distinct), acknowledged {want:,}: "
        f"{max(0, want - distinct):,} lost; {refused_without_retry} refusals without Retry-After"
    )
    print(f"collector: {out.strip().splitlines()[-1] if out.strip() else err.strip()[-300:]}")
    broken = []
    if statuses.get(0):
        broken.append(f"{statuses[0]} requests unanswered")
    if set(statuses) - {200, 429, 503}:
        broken.append(f"unexpected statuses {statuses}")
    if refused_without_retry:
        broken.append("refusals without Retry-After")
    if not statuses.get(429):
        broken.append("no 429 at all: the overload did not overload")
    if offered < 0.8 * args.factor * sustained:
        broken.append(f"the senders offered only {offered / sustained:.1f}x")
    if peak_overload > args.max_rss_mb:
        broken.append(f"the collector's peak RSS {peak_overload:.0f} MB passed {args.max_rss_mb:.0f} MB")
    if distinct != want or stored != distinct:
        broken.append("acknowledged spans lost or doubled")
    if broken:
        sys.exit("BROKEN: " + "; ".join(broken))
    print("all held")


if __name__ == "__main__":
    main()
