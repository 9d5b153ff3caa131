"""Every upstream span format through `ingest` and `collect`, beside orjson parsing the same bytes in the same run.

    python benchmarks/bench_formats.py [--spans 100000] [--formats vllm_journey,tgi] [--only ingest|collect]
        [--protocols http-json,http-proto,grpc] [--senders 8]

For each format of format_traces.py (native, vLLM classic, vLLM journey, SGLang level 3, TGI, Triton's OpenTelemetry
mode), a file of whole requests, about `--spans` spans, timed from now (a collector treats old spans as a
backfill), then:
- orjson: the file read and each export parsed with `orjson.loads`, its spans counted: what a Python reader of
  the same bytes cannot go below. For the protobuf senders, protobuf's own parser (upb) over the same exports.
- ingest: `budgetscope ingest FILE --archive DIR` in a process of its own: wall time, CPU seconds (user + system,
  DuckDB's threads included), peak RSS; and its speed over orjson's.
- collect: a collector on free ports and `--senders` exporter processes, each posting its share of the exports
  and waiting for each answer (bench_collector.py's `run`), over OTLP/HTTP JSON, OTLP/HTTP protobuf and OTLP/gRPC:
  answered (every export acknowledged) and stored (the collector stopped, everything published and derived).
Spans/s and requests/s everywhere; the 1-minute load average beside each figure (other work shares the cores).
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import budgetscope
import format_traces
from bench_collector import run as run_collector
from common import machine

PROTOCOLS = {"http-json": "http", "http-proto": "http-proto", "grpc": "grpc"}


def load() -> float:
    return os.getloadavg()[0]


def parse_time(bodies: list[bytes], spans_of) -> float:
    """Seconds to parse every export and count its spans (`spans_of(body)` does both), the median of three."""
    times = []
    for _ in range(3):
        t = time.perf_counter()
        n = 0
        for body in bodies:
            n += spans_of(body)
        times.append(time.perf_counter() - t)
    return sorted(times)[1]


def orjson_spans(body: bytes) -> int:
    """Spans of an OTLP/JSON export, parsed by orjson."""
    import orjson

    return sum(len(ss["spans"]) for rs in orjson.loads(body)["resourceSpans"] for ss in rs["scopeSpans"])


def protobuf_spans(body: bytes) -> int:
    """Spans of an OTLP protobuf export, parsed by the protobuf runtime (upb)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return sum(
        len(ss.spans) for rs in ExportTraceServiceRequest.FromString(body).resource_spans for ss in rs.scope_spans
    )


def orjson_file(path: Path) -> float:
    """Seconds to read the file and parse each export with orjson, counting its spans."""
    t = time.perf_counter()
    lines = path.read_bytes().splitlines()
    read = time.perf_counter() - t
    return read + parse_time(lines, orjson_spans)


# `budgetscope ingest` as the command runs it, then its own peak RSS (VmHWM: the process's since its exec, where
# getrusage's would count the benchmark's memory the child had before its exec)
_INGEST = """
import atexit, sys
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            sys.stderr.write(f"VmHWM {line.split()[1]}\\n")
atexit.register(hwm)
from budgetscope.cli import main
main(["ingest", sys.argv[1], "--archive", sys.argv[2], "--format", "json"], prog_name="budgetscope")
"""


def ingest(path: Path, archive: Path) -> tuple[float, float, float, int]:
    """`budgetscope ingest` in a process of its own: (wall s, CPU s, peak RSS MB, requests in the archive)."""
    import json

    shutil.rmtree(archive, ignore_errors=True)
    t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen(
        [sys.executable, "-c", _INGEST, str(path), str(archive)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = p.communicate()
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if p.returncode:
        sys.exit(f"ingest of {path} failed ({p.returncode}): {err.decode()[-2000:]}")
    (kb,) = [int(line.split()[1]) for line in err.decode().splitlines() if line.startswith("VmHWM ")]
    return wall, cpu, kb / 1024, json.loads(out)["counts"]["requests"]


def stored_requests(archive: Path) -> int:
    from budgetscope.opener import Archive

    with Archive(archive, read_only=True, create=False) as a:
        return a.con.execute("SELECT count(*) FROM requests").fetchone()[0]


def rate(n: int, s: float) -> str:
    return f"{n / s:,.0f}/s" if s > 0 else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=100_000, help="spans a format (whole requests: about)")
    ap.add_argument("--formats", default=",".join(format_traces.FORMATS))
    ap.add_argument("--only", choices=["ingest", "collect"])
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    out = Path(args.out) / "formats"
    out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}")
    # the package's bytecode written once, as installing a wheel does: an `ingest` started with
    # PYTHONDONTWRITEBYTECODE over a checkout compiles every changed module again (0.1 s at each start)
    compileall.compile_dir(Path(budgetscope.__file__).parent, quiet=1)
    for fmt in args.formats.split(","):
        n = max(1, round(args.spans / format_traces.spans_per_request(fmt)))
        path = out / f"{fmt}.jsonl"
        t = time.perf_counter()
        spans, requests = format_traces.write(fmt, path, n, time.time_ns() - 120 * 10**9)
        lines = [x for x in path.read_bytes().splitlines() if x.strip()]
        print(
            f"\n{fmt}: {spans:,} spans, {requests:,} requests, {len(lines):,} exports, "
            f"{path.stat().st_size / 1e6:,.0f} MB (written in {time.perf_counter() - t:.0f} s)",
            flush=True,
        )
        if args.only != "collect":
            la = load()
            parse = orjson_file(path)
            wall, cpu, rss, derived = ingest(path, out / f"{fmt}-ingest")
            print(
                f"  orjson parse + count: {parse:.2f} s = {rate(spans, parse)} spans; "
                f"ingest: {wall:.2f} s = {rate(spans, wall)} spans, {rate(derived, wall)} requests "
                f"({derived:,} derived), CPU {cpu:.1f} s, peak RSS {rss:,.0f} MB; "
                f"ingest / orjson speed {parse / wall:.2f}x; load {la:.1f} → {load():.1f}",
                flush=True,
            )
        if args.only == "ingest":
            continue
        pb = None
        for proto in args.protocols.split(","):
            kind = PROTOCOLS[proto]
            if kind == "http":
                bodies, parse, parser = lines, parse_time(lines, orjson_spans), "orjson"
            else:
                if pb is None:
                    pb = [format_traces.to_protobuf(x) for x in lines]
                bodies, parse, parser = pb, parse_time(pb, protobuf_spans), "protobuf"
            la = load()
            archive = out / f"{fmt}-collect"
            answered, stored, cpu, exporters = run_collector(bodies, kind, args.senders, archive)
            got = stored_requests(archive)
            print(
                f"  collect {proto} ({sum(map(len, bodies)) / 1e6:,.0f} MB, {args.senders} senders): "
                f"answered {answered:.2f} s = {rate(spans, answered)} spans; stored {stored:.2f} s = "
                f"{rate(spans, stored)} spans, {rate(got, stored)} requests ({got:,} in the archive); "
                f"collector CPU {cpu:.1f} s, exporters' {exporters:.1f} s; {parser} parse + count "
                f"{parse:.2f} s = {rate(spans, parse)} spans; load {la:.1f} → {load():.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
