"""Sharded collection: the same spans into 1 and into N `budgetscope collect --shard` processes, spans/s.

    python benchmarks/bench_shards.py [--requests 100000] [--shards 1 3] [--clients 8]

Stands in for the OpenTelemetry Collector's `loadbalancing` exporter (routing_key: traceID): every export
request of the synthetic traces is split by a hash of its spans' trace ids, one export per shard, OTLP
protobuf over gRPC (bench_collector's exporter processes, each waiting for its answer before the next). Each
shard is its own `collect` process writing ROOT/shard=ID/. Prints spans/s answered (all answers in) and
stored (every collector stopped: every span published, every request derived; counted as the spans the archive
reads back). On a machine with fewer cores than shards this shows the model (shards share nothing), not a
speed-up.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_collector import protobuf  # noqa: E402
from common import machine  # noqa: E402

from budgetscope.opener import Archive  # noqa: E402
from budgetscope.synthetic import SyntheticSpec, write_jsonl  # noqa: E402

_WORK: list[tuple[int, bytes]] = []  # (shard, body), set before the exporters fork


def split(line: bytes, n: int) -> list[bytes | None]:
    """One export request as n, by crc32 of the trace id (resource and scope kept), protobuf; None: empty."""
    import orjson

    doc = orjson.loads(line)
    out: list[dict | None] = [None] * n
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            by: dict[int, list] = {}
            for s in ss["spans"]:
                by.setdefault(zlib.crc32(bytes.fromhex(s["traceId"])) % n, []).append(s)
            for i, spans in by.items():
                out[i] = out[i] or {"resourceSpans": []}
                out[i]["resourceSpans"].append({**rs, "scopeSpans": [{**ss, "spans": spans}]})
    return [protobuf(orjson.dumps(d)) if d else None for d in out]


def _send(args: tuple) -> int:
    ports, i, n = args
    import grpc

    chans = [grpc.insecure_channel(f"127.0.0.1:{p}") for p in ports]
    calls = [c.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export") for c in chans]
    errors = 0
    for shard, body in _WORK[i::n]:
        try:
            calls[shard](body, timeout=120)
        except grpc.RpcError:
            errors += 1
    for c in chans:
        c.close()
    return errors


def start(root: Path, shard: str) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-m", "budgetscope.cli", "collect", "--archive", str(root), "--shard", shard,
                          "--no-http", "--grpc-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    banner = p.stdout.readline()
    m = re.search(r"127\.0\.0\.1:(\d+)", banner)
    if not m:
        sys.exit(f"collect did not start: {banner}{p.stderr.read()}")
    return p, int(m.group(1))


def run(lines: list[bytes], n: int, clients: int, root: Path) -> tuple[float, float]:
    import multiprocessing as mp

    global _WORK
    shutil.rmtree(root, ignore_errors=True)
    _WORK = [(i, b) for line in lines for i, b in enumerate(split(line, n)) if b is not None]
    with mp.get_context("fork").Pool(clients) as pool:
        pool.map(abs, range(clients))
        procs = [start(root, f"s{i}") for i in range(n)]
        ports = [p for _, p in procs]
        t0 = time.perf_counter()
        errors = sum(pool.map(_send, [(ports, i, clients) for i in range(clients)], chunksize=1))
        answered = time.perf_counter() - t0
        for p, _ in procs:
            p.send_signal(signal.SIGTERM)
        for p, _ in procs:
            p.wait(600)
        stored = time.perf_counter() - t0
    if errors:
        sys.exit(f"{errors} export requests failed")
    return answered, stored


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000, help="synthetic requests (7 spans each)")
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    traces = out / f"shards-{args.requests}-now.jsonl"
    spans = write_jsonl(traces, SyntheticSpec(num_requests=args.requests, tiers=("interactive", "batch"),
                                              start_ns=time.time_ns() - 120 * 10**9))
    lines = [x for x in traces.read_bytes().splitlines() if x.strip()]
    traces.unlink()
    print(f"machine: {machine()}")
    print(f"{len(lines)} export requests before the split, {spans:,} spans, {args.clients} exporter processes, "
          "OTLP/gRPC protobuf")
    for n in args.shards:
        load = os.getloadavg()[0]
        root = out / f"shards-{n}"
        answered, stored = run(lines, n, args.clients, root)
        with Archive(root, read_only=True) as a:
            got = a.con.execute("SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM requests)").fetchone()
        # stored: the spans the archive reads back, not those sent nor a collector's exit summary
        print(f"{n} shard{'s' if n > 1 else ''}: answered in {answered:.2f} s = {spans / answered:,.0f} spans/s; "
              f"stored in {stored:.2f} s = {got[0] / stored:,.0f} spans/s ({got[0]:,} of {spans:,} spans, "
              f"{got[1]:,} requests read back as one); load average {load:.1f} before, "
              f"{os.getloadavg()[0]:.1f} after", flush=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
