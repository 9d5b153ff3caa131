"""Sharded collection across processes: senders → 1 shard directly, and → `collect-router` → N shards.

    python benchmarks/bench_shards.py [--requests 60000] [--shards 1 2 4] [--clients 4] [--spans-per-export 256]

Every configuration gets the same OTLP/HTTP protobuf exports (synthetic traces, 7 spans a request,
`--spans-per-export` spans an export, many traces each), sent by `--clients` sender processes, each on one
keep-alive connection, waiting for each answer before the next (an exporter's way; 429/503 are retried after
Retry-After). "direct": the senders post to one `budgetscope collect --shard s0` process. "router N": they post
to one `budgetscope collect-router` process, which splits each export by trace id to N `collect --shard sI`
processes under one sharded root (and sends the protobuf parts waiting for a shard as one export: the mean
export size each shard received is printed).

Prints, per configuration: accepted spans/s at the senders (all answers in), landed spans/s (the spans the
archive reads back, over the time until every collector had stopped and published all it acknowledged: never
a collector's exit summary), export latency p50/p99 at the senders, CPU seconds of every process (senders,
router, each shard: from the kernel's rusage at exit), and the load average before and after. Then checks that
each root holds every span sent exactly once, on the shard its trace id routes to, and that `report` over
each sharded root equals the report of the direct run's one archive.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_collector import protobuf
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from common import machine

_WORK: list[tuple[bytes, int]] = []  # (protobuf export, spans), set before the senders fork
CLI = [sys.executable, "-m", "budgetscope.cli"]


def _convert(line: bytes) -> tuple[bytes, int]:
    return protobuf(line), line.count(b'"spanId"')


def _send(args: tuple[int, int, int]) -> tuple[list[float], int, int, float]:
    """One sender: its share of the exports, one at a time on one keep-alive connection. (latencies ms,
    spans accepted, retries, CPU s)."""
    port, k, clients = args
    cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    latencies, spans, retries = [], 0, 0
    for body, n in _WORK[k::clients]:
        t0 = time.perf_counter()
        while True:
            try:
                conn.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
                r = conn.getresponse()
                r.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                retries += 1
                time.sleep(0.1)
                continue
            if r.status == 200:
                break
            if r.status not in (429, 503):
                raise SystemExit(f"export answered {r.status}")
            retries += 1
            time.sleep(float(r.getheader("retry-after", "1")))
        latencies.append((time.perf_counter() - t0) * 1e3)
        spans += n
    conn.close()
    return latencies, spans, retries, sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu0


def _start(args: list[str], pattern: str) -> tuple[subprocess.Popen, int]:
    """A budgetscope process and the port its banner names."""
    p = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    banner = p.stdout.readline()
    m = re.search(pattern, banner)
    if not m:
        sys.exit(f"{args[0]} did not start: {banner}{p.stderr.read()}")
    return p, int(m.group(1))


def _stop(p: subprocess.Popen) -> float:
    """SIGTERM, wait; the process's CPU seconds (user + system)."""
    p.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"a process exited {p.returncode}: {p.stderr.read()}")
    return usage.ru_utime + usage.ru_stime


@dataclass
class Run:
    name: str
    root: Path
    shards: int
    accepted_s: float = 0.0
    landed_s: float = 0.0
    spans_sent: int = 0
    spans_read: int = 0
    latencies: list[float] = field(default_factory=list)
    retries: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)
    exports: list[tuple[int, int]] = field(default_factory=list)  # per shard behind the router: (spans, exports)
    ingests: list[int] = field(default_factory=list)  # per shard: the groups its writer landed


def run(name: str, root: Path, n: int, routed: bool, clients: int, pool) -> Run:
    shutil.rmtree(root, ignore_errors=True)
    r = Run(name, root, n, load=(os.getloadavg()[0], 0.0))
    shards = [
        _start(
            ["collect", "--archive", str(root), "--shard", f"s{i}", "--no-grpc", "--http-port", "0"],
            r"http://127\.0\.0\.1:(\d+)/v1/traces",
        )
        for i in range(n)
    ]
    router = None
    port = shards[0][1]
    if routed:
        router, port = _start(
            ["collect-router", "--port", "0", *[a for _, p in shards for a in ("--shard", f"http://127.0.0.1:{p}")]],
            r"http://127\.0\.0\.1:(\d+)/v1/traces",
        )
    t0 = time.perf_counter()
    done = pool.map(_send, [(port, k, clients) for k in range(clients)], chunksize=1)
    r.accepted_s = time.perf_counter() - t0
    if router is not None:
        r.cpu["router"] = _stop(router)
        summary = router.stdout.read()  # per shard: "N spans in P parts, E exports"
        r.exports = [
            (int(a.replace(",", "")), int(b.replace(",", "")))
            for a, b in re.findall(r"([\d,]+) spans in [\d,]+ parts, ([\d,]+) exports", summary)
        ]
    for i, (p, _) in enumerate(shards):
        r.cpu[f"shard s{i}"] = _stop(p)
        m = re.search(r"in ([\d,]+) ingests", p.stdout.read())  # the summary's count of ingests (groups) only
        r.ingests.append(int(m.group(1).replace(",", "")) if m else 0)
    r.landed_s = time.perf_counter() - t0
    r.cpu["senders"] = sum(d[3] for d in done)
    r.latencies = sorted(x for d in done for x in d[0])
    r.spans_sent, r.retries = sum(d[1] for d in done), sum(d[2] for d in done)
    r.load = (r.load[0], os.getloadavg()[0])
    return r


def check(r: Run, sent: set[tuple[str, str]], reference: dict | None) -> dict:
    """Every span sent exactly once, each on its trace's shard; the report (compared with `reference`)."""
    from budgetscope.analysis import build_report, load_budgets
    from budgetscope.collector.router import shard_of

    with Archive(r.root, read_only=True) as a:
        got = a.con.execute("SELECT trace_id, span_id FROM spans").fetchall()
        split = a.split_traces
        rep = build_report(a.con, load_budgets(Path(__file__).parent.parent / "sample_traces" / "budgets.toml"))
    r.spans_read = len(got)
    if len(got) != len(set(got)) or set(got) != sent:
        sys.exit(f"{r.name}: {len(got):,} spans read back ({len(set(got)):,} distinct) for {len(sent):,} sent")
    for i in range(r.shards):
        with Archive(r.root / f"shard=s{i}", read_only=True) as a:
            tids = a.con.execute("SELECT DISTINCT trace_id FROM spans").fetchall()
        if any(shard_of(bytes.fromhex(t), r.shards) != i for (t,) in tids):
            sys.exit(f"{r.name}: shard s{i} holds a trace routed elsewhere")
    rep = json.loads(json.dumps(rep, default=str))
    if reference is not None and _diff(rep, reference):
        sys.exit(
            f"{r.name}: the report over the sharded root differs from the one-archive report: "
            f"{'; '.join(_diff(rep, reference))[:2000]}"
        )
    if split:
        sys.exit(f"{r.name}: {split} traces split across shards")
    return rep


def _diff(a, b, path: str = "") -> list[str]:
    """Where two JSON documents differ: 'path: a vs b' for each differing leaf (floats to 1e-9 relative:
    DuckDB sums in the order its threads meet the rows)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted({*a, *b}, key=str) for d in _diff(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) else [f"{path}: {a!r} vs {b!r}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def show(r: Run) -> None:
    lat = r.latencies
    p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in r.cpu.items())
    print(
        f"{r.name}: accepted {r.spans_sent / r.accepted_s:,.0f} spans/s ({r.accepted_s:.1f} s); landed "
        f"{r.spans_read / r.landed_s:,.0f} spans/s ({r.spans_read:,} spans read back, {r.landed_s:.1f} s); "
        f"export p50 {p50:.1f} ms p99 {p99:.1f} ms, {r.retries} retries; CPU s: {cpu} "
        f"(total {sum(r.cpu.values()):.1f} = {sum(r.cpu.values()) / r.landed_s:.2f} cores; µs a span: "
        f"{', '.join(f'{k} {v / r.spans_read * 1e6:.1f}' for k, v in r.cpu.items())}); "
        f"load {r.load[0]:.1f} → {r.load[1]:.1f}",
        flush=True,
    )
    sizes = (
        ""
        if not r.exports
        else "; spans an export reaching each shard: "
        + ", ".join(f"s{i} {spans / max(n, 1):,.0f}" for i, (spans, n) in enumerate(r.exports))
    )
    print(
        f"  ingests (groups landed) per shard: {', '.join(f'{x:,}' for x in r.ingests)} = "
        f"{r.spans_read / max(sum(r.ingests), 1):,.0f} spans an ingest{sizes}",
        flush=True,
    )


def main() -> None:
    import multiprocessing as mp

    global _WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=60_000, help="synthetic requests (7 spans each)")
    ap.add_argument(
        "--shards",
        type=int,
        nargs="*",
        default=[1, 2, 4],
        help="shard counts behind the router (none: the direct run only)",
    )
    ap.add_argument("--clients", type=int, default=4, help="sender processes")
    ap.add_argument("--spans-per-export", type=int, default=256)
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    traces = out / f"shards-{args.requests}-now.jsonl"
    spans = write_jsonl(
        traces,
        SyntheticSpec(
            num_requests=args.requests,
            tiers=("interactive", "batch"),
            spans_per_line=args.spans_per_export,
            start_ns=time.time_ns() - 120 * 10**9,
        ),
    )
    lines = [x for x in traces.read_bytes().splitlines() if x.strip()]
    traces.unlink()
    sent = {
        (s["traceId"], s["spanId"])
        for line in lines
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    }
    with mp.get_context("fork").Pool(2) as pool:
        _WORK = pool.map(_convert, lines, chunksize=16)
    del lines
    print(f"machine: {machine()}; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(
        f"{len(_WORK):,} OTLP/HTTP protobuf exports, {spans:,} spans ({args.spans_per_export} an export, "
        f"{args.requests:,} traces), {args.clients} sender processes"
    )
    runs = [("direct", 1, False)] + [(f"router → {n} shard{'s' * (n > 1)}", n, True) for n in args.shards]
    reference = None
    with mp.get_context("fork").Pool(args.clients) as pool:
        pool.map(abs, range(args.clients))  # the senders exist before the clock starts
        for k, (name, n, routed) in enumerate(runs):
            r = run(name, out / f"shards-run{k}", n, routed, args.clients, pool)
            rep = check(r, sent, reference)
            show(r)
            reference = reference or rep
    print("every root: each span once, on its trace's shard; report over each equals the direct one-archive report")
    for k in range(len(runs)):
        shutil.rmtree(out / f"shards-run{k}", ignore_errors=True)


if __name__ == "__main__":
    main()
