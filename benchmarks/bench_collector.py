"""Collector throughput: OTLP/HTTP senders → the collector → the archive, OTLP/JSON and OTLP protobuf.

    python benchmarks/bench_collector.py [--requests 20000] [--clients 8] [--threads]

Each of `--clients` processes (exporters) sends its share of the export requests (synthetic native-contract
traces, 512 spans a request) to a collector on a free port, each waiting for its answer before the next, as an
SDK's batch span processor does: OTLP/JSON over HTTP, then OTLP protobuf over gRPC (what vLLM and the
OpenTelemetry Collector send). Prints spans/s acknowledged (all answers in) and stored (collector stopped:
every accepted span in the archive, requests derived), for each. `--threads`: also the collector's CPU seconds by
thread (its archive writer, acceptor, receivers, DuckDB's unnamed workers), from /proc.
"""

from __future__ import annotations

import argparse
import base64
import os
import resource
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from budgetscope.collector import Collector
from budgetscope.ingest.otlp_json import count_spans
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from common import ThreadCPU, machine, peak_rss_mb


def protobuf(line: bytes) -> bytes:
    """The same export request in OTLP protobuf (protobuf's JSON reader wants base64 ids)."""
    import orjson
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = orjson.loads(line)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if s.get(k):
                        s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
    return json_format.ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()


_BODIES: list[bytes] = []  # set before the exporter processes fork: they read their share from it
_CLIENT = None  # each exporter's HTTP client, made before the clock starts (its TLS context alone took 0.3 s)


def _start_exporter() -> None:
    global _CLIENT
    import grpc  # noqa: F401 - imported before the clock starts
    import httpx

    _CLIENT = httpx.Client(timeout=120)


def _send(args: tuple) -> list[str]:
    """One exporter (its own process): post each body and wait for its answer before the next."""
    kind, port, i, n = args
    bodies = _BODIES[i::n]
    errors: list[str] = []
    if kind == "grpc":
        import grpc

        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            export = ch.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            for body in bodies:
                try:
                    export(body, timeout=120)
                except grpc.RpcError as e:
                    errors.append(f"{e.code()} {e.details()}")
        return errors
    ctype = "application/x-protobuf" if kind == "http-proto" else "application/json"
    for body in bodies:
        r = _CLIENT.post(f"http://127.0.0.1:{port}/v1/traces", content=body, headers={"content-type": ctype})
        if r.status_code != 200:
            errors.append(f"{r.status_code} {r.text[:200]}")
    return errors


def cpu_s(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def run(
    bodies: list[bytes],
    kind: str,
    clients: int,
    archive: Path,
    options: dict | None = None,
    found: dict | None = None,
    keep: bool = False,
) -> tuple[float, float, float, float]:
    """(seconds until every request was answered, seconds until the collector had stored everything, CPU
    seconds of the collector's process meanwhile, CPU seconds of the exporter processes). `kind`: "http" (OTLP/JSON
    bodies), "http-proto" (protobuf bodies over OTLP/HTTP) or "grpc". `options`: more `Collector` options
    (bench_slis.py: budgets); `found["port"]` is set to its HTTP port once it listens, `found["stats"]` to its
    counts (`CollectorStats`) once it stopped; `keep`: the collector opens `archive` as it is (else it starts from
    an empty one)."""
    import multiprocessing as mp

    global _BODIES
    if not keep:
        shutil.rmtree(archive, ignore_errors=True)
        archive.unlink(missing_ok=True)
    _BODIES = bodies
    # the exporters fork before the collector starts its threads (gRPC does not survive a fork)
    with mp.get_context("fork").Pool(clients, initializer=_start_exporter) as pool:
        pool.map(abs, range(clients))  # the exporters are up before the clock starts
        c = Collector(
            archive,
            grpc_port=0 if kind == "grpc" else None,
            http_port=None if kind == "grpc" else 0,
            **(options or {}),
        )
        c.start()
        port = c.grpc_port if kind == "grpc" else c.http_port
        if found is not None:
            found["port"] = c.http_port
        t0, cpu0, exporters0 = time.perf_counter(), cpu_s(resource.RUSAGE_SELF), cpu_s(resource.RUSAGE_CHILDREN)
        errors = sum(pool.map(_send, [(kind, port, i, clients) for i in range(clients)], chunksize=1), [])
        answered = time.perf_counter() - t0
        stats = c.stop()
        stored = time.perf_counter() - t0
        if found is not None:
            found["stats"] = stats
        cpu = cpu_s(resource.RUSAGE_SELF) - cpu0
    # the exporters' CPU counts once the pool has reaped them (a little of their start-up is in it)
    exporters = cpu_s(resource.RUSAGE_CHILDREN) - exporters0
    if errors:
        sys.exit(f"{len(errors)} requests failed, first: {errors[0]}")
    return answered, stored, cpu, exporters


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20_000, help="synthetic requests (7 spans each)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--format", choices=["folder", "duckdb"], default="folder")
    ap.add_argument("--only", choices=["http", "grpc"], help="run one of the two senders")
    ap.add_argument("--threads", action="store_true", help="also print the collector's CPU seconds by thread")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    # Spans of the last minutes, as a collector receives them (spans of months ago are a backfill: each of
    # their traces is looked for among the published segments, in case it began before this run).
    traces = out / f"collector-{args.requests}-now.jsonl"
    write_jsonl(
        traces,
        SyntheticSpec(
            num_requests=args.requests, tiers=("interactive", "batch"), start_ns=time.time_ns() - 120 * 10**9
        ),
    )
    lines = [line for line in traces.read_bytes().splitlines() if line.strip()]
    spans = sum(count_spans(line) for line in lines)
    print(f"machine: {machine()}")
    print(f"{len(lines)} export requests, {spans:,} spans, {args.clients} exporter processes")
    for name, kind, bodies in (
        ("OTLP/HTTP JSON", "http", lines),
        ("OTLP/gRPC protobuf", "grpc", [protobuf(x) for x in lines] if args.only != "http" else []),
    ):
        if args.only not in (None, kind):
            continue
        load = os.getloadavg()[0]
        with ThreadCPU() as by_thread:
            answered, stored, cpu, exporters = run(
                bodies, kind, args.clients, out / ("collector.duckdb" if args.format == "duckdb" else "collector")
            )
        print(
            f"{name}: {sum(map(len, bodies)) / 1e6:,.0f} MB; answered in {answered:.2f} s = "
            f"{spans / answered:,.0f} spans/s; stored in {stored:.2f} s = {spans / stored:,.0f} spans/s; "
            f"collector CPU {cpu:.1f} s ({cpu / spans * 1e6:.1f} µs a span), exporters' CPU {exporters:.1f} s; "
            f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after"
        )
        if args.threads:
            print(
                "  CPU by thread: " + ", ".join(f"{k} {v:.2f} s" for k, v in by_thread.by_name().items() if v >= 0.01)
            )
    print(f"peak RSS {peak_rss_mb():,.0f} MB")


if __name__ == "__main__":
    main()
