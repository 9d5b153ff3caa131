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
  answered (every export acknowledged) and stored (the collector stopped, everything published and derived);
  the `requests` rows the collector derived (a trace whose spans came in several exports is derived again by each
  commit that lands more of them) and its CPU seconds by thread.
Spans/s and requests/s everywhere; the 1-minute load average beside each figure (other work shares the cores).

    python benchmarks/bench_formats.py --only ingest --floor [--spans 1000000]

With `--floor`, after each `ingest`, the work it cannot skip, each part alone in this process over the same file
and the same derived rows: the file read, hashed (SHA-256) and decoded by the C decoder; the decoded rows inserted
into a DuckDB table; that table written as Parquet (the archive's options); the `requests` rows derived from it
(the derivation as a commit runs it); those written as Parquet, ordered as a commit writes them. The sum of their
CPU seconds over the cores is the least wall time an `ingest` could take, every core busy with nothing else, so
its speed over orjson's at best: what a ratio target asks of the format on this machine.

    python benchmarks/bench_formats.py --only collect --formats vllm_journey --base COMMIT [--runs 5]

With `--base`, `collect` of this tree and of the package as it was at COMMIT (common.base_tree), each in a process
of its own, alternately, `--runs` times over the same exports: medians side by side. On a machine whose speed drifts
between runs minutes apart, only such pairs say what a change to the collector did.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import budgetscope
import format_traces
from bench_collector import run as run_collector
from common import ROOT, ThreadCPU, base_tree, foreign_modules, machine

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


def floor(path: Path, archive: Path) -> list[tuple[str, float, float]]:
    """(part, wall s, CPU s) of each part of an ingest of `path` that no change to the pipeline removes, alone
    (the module docstring's `--floor`); `archive`: that ingest's archive, whose spans the derivation reads."""
    import duckdb
    import pyarrow  # noqa: F401 - loaded before the clock starts, as in an ingest before it reads

    from budgetscope import schema
    from budgetscope.archive.duckdb_archive import WORKING_SET
    from budgetscope.archive.segments import ORDER, PARQUET_OPTIONS
    from budgetscope.derive.requests import planned, present_sources, requests_sql
    from budgetscope.ingest import jsonsql, otlp_fast, staging
    from budgetscope.ingest.batches import chunks
    from budgetscope.ingest.files import read_batches

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    spent: dict[str, list[float]] = {}  # part -> [wall s, CPU s], summed over its calls

    def timed(name: str, fn):
        t, c = time.perf_counter(), cpu()
        out = fn()
        got = spent.setdefault(name, [0.0, 0.0])
        got[0] += time.perf_counter() - t
        got[1] += cpu() - c
        return out

    con = duckdb.connect(config=WORKING_SET)  # as an ingest's working set: no checkpoint of its own
    con.execute(f"SET threads = {os.cpu_count()}")
    con.execute(schema.SPANS.ddl())
    staging.setup(con)
    jsonsql.setup(con)

    def land(ch) -> None:
        con.register("bs_dec", ch.decoded)
        con.execute(jsonsql._INSERT_DECODED)
        con.unregister("bs_dec")

    # chunk by chunk, as an ingest reads (a whole file's columns at once would not fit a 1M-span journey file)
    reader = chunks(read_batches(path), set(), 1, otlp_fast.span_set())
    while (ch := timed("read + SHA-256 + C decode", lambda: next(reader, None))) is not None:
        timed("insert into a DuckDB table", lambda: land(ch))
    tmp = archive.parent / f"{archive.name}-floor.parquet"
    timed("spans as Parquet", lambda: con.execute(f"COPY spans TO '{tmp}' ({PARQUET_OPTIONS})"))
    # the derivation over the spans the ingest stored (its batch ids; the same rows)
    con.execute(f"CREATE OR REPLACE TABLE spans AS SELECT * FROM read_parquet('{archive}/spans/**/*.parquet')")
    sql = requests_sql("spans", present_sources(con, "spans"))
    with planned(con):
        timed("derivation", lambda: con.execute(f"CREATE TABLE r AS {sql}"))
    timed(
        "requests as Parquet",
        lambda: con.execute(f"COPY (SELECT * FROM r ORDER BY {ORDER['requests']}) TO '{tmp}' ({PARQUET_OPTIONS})"),
    )
    tmp.unlink()
    return [(name, w, c) for name, (w, c) in spent.items()]


def stored_requests(archive: Path) -> int:
    from budgetscope.opener import Archive

    with Archive(archive, read_only=True, create=False) as a:
        return a.con.execute("SELECT count(*) FROM requests").fetchone()[0]


def write_bodies(bodies: list[bytes], path: Path) -> None:
    """The exports in one file, each after its length (8 bytes, little-endian): what a `--child` reads."""
    with open(path, "wb") as f:
        for body in bodies:
            f.write(struct.pack("<Q", len(body)))
            f.write(body)


def read_bodies(path: Path) -> list[bytes]:
    data, out, i = path.read_bytes(), [], 0
    while i < len(data):
        (n,) = struct.unpack_from("<Q", data, i)
        out.append(data[i + 8 : i + 8 + n])
        i += 8 + n
    return out


def child_collect(tree: Path, bodies: Path, kind: str, senders: int, archive: Path) -> dict:
    """One `collect` run in a process whose package is the one in `tree` (first on PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.run(
        [sys.executable, __file__, "--child", str(bodies), kind, str(senders), str(archive)],
        capture_output=True,
        text=True,
        env=env,
    )
    if p.returncode:
        sys.exit(f"collect run of {tree} failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(p.stdout.splitlines()[-1])


def _child(argv: list[str]) -> None:
    bodies, kind, senders, archive = read_bodies(Path(argv[0])), argv[1], int(argv[2]), Path(argv[3])
    answered, stored, cpu, exporters = run_collector(bodies, kind, senders, archive)
    requests = stored_requests(archive)
    here = Path(budgetscope.__file__).resolve().parent.parent
    elsewhere = foreign_modules(here)
    if elsewhere:
        sys.exit(f"{here} lacks modules this benchmark imports (taken from elsewhere): {', '.join(elsewhere[:5])}")
    out = {"answered": answered, "stored": stored, "cpu": cpu, "exporters": exporters, "tree": str(here)}
    print(json.dumps({**out, "requests": requests}))


def compare(bodies, kind, senders, out: Path, base: Path, runs: int) -> dict[str, dict[str, list[float]]]:
    """`runs` pairs of `collect` runs, this tree's then the base's: each figure's list, by variant."""
    path = out / "bodies.bin"
    write_bodies(bodies, path)
    got: dict[str, dict[str, list[float]]] = {"this tree": {}, "base": {}}
    for _ in range(runs):
        for name, tree in (("this tree", ROOT), ("base", base)):
            r = child_collect(tree, path, kind, senders, out / f"ab-{kind}")
            if r["tree"] != str(tree.resolve()):
                sys.exit(f"the run meant for {tree} imported the package of {r['tree']}")
            for k in ("answered", "stored", "cpu"):
                got[name].setdefault(k, []).append(r[k])
    path.unlink()
    return got


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
    ap.add_argument("--base", metavar="COMMIT", help="collect: this tree against the package at COMMIT, alternately")
    ap.add_argument("--runs", type=int, default=5, help="with --base: pairs of runs a protocol")
    ap.add_argument("--floor", action="store_true", help="ingest: also the least it could take (module docstring)")
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
        return
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(base_tree(args.base)) if args.base else None
        if base is not None:
            compileall.compile_dir(base / "budgetscope", quiet=1)
        _main(args, base)


def _main(args, base: Path | None) -> None:
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
            if args.floor:
                la = load()
                parts = floor(path, out / f"{fmt}-ingest")
                total = sum(c for _, _, c in parts)
                best = total / (os.cpu_count() or 1)
                for name, w, c in parts:
                    print(f"    {name:28s} {w:6.2f} s wall, {c:6.2f} CPU-s", flush=True)
                print(
                    f"  the parts alone: {total:.2f} CPU-s, so at least {best:.2f} s on {os.cpu_count()} cores: "
                    f"ingest / orjson at best {parse / best:.2f}x (this ingest {cpu:.1f} CPU-s, "
                    f"{cpu - total:+.1f} over the parts); load {la:.1f} → {load():.1f}",
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
            if base is not None:
                got = compare(bodies, kind, args.senders, out, base, args.runs)
                print(
                    f"  collect {proto}, {args.senders} senders, median of {args.runs} pairs (load {la:.1f} → {load():.1f}):"
                )
                for name, fig in got.items():
                    answered, stored = statistics.median(fig["answered"]), statistics.median(fig["stored"])
                    print(
                        f"    {args.base if name == 'base' else name:>12}: answered {rate(spans, answered)} spans, "
                        f"stored {rate(spans, stored)} spans (each run: "
                        f"{', '.join(f'{spans / x:,.0f}' for x in fig['stored'])}); "
                        f"collector CPU {statistics.median(fig['cpu']):.1f} s",
                        flush=True,
                    )
                continue
            archive = out / f"{fmt}-collect"
            found: dict = {}
            with ThreadCPU() as threads:
                answered, stored, cpu, exporters = run_collector(bodies, kind, args.senders, archive, found=found)
            got = stored_requests(archive)
            derived = found["stats"].requests_derived
            print(
                f"  collect {proto} ({sum(map(len, bodies)) / 1e6:,.0f} MB, {args.senders} senders): "
                f"answered {answered:.2f} s = {rate(spans, answered)} spans; stored {stored:.2f} s = "
                f"{rate(spans, stored)} spans, {rate(got, stored)} requests ({got:,} in the archive); "
                f"collector CPU {cpu:.1f} s, exporters' {exporters:.1f} s; {parser} parse + count "
                f"{parse:.2f} s = {rate(spans, parse)} spans; load {la:.1f} → {load():.1f}",
                flush=True,
            )
            # a trace whose spans came in several exports is derived again by each commit that lands more of them
            by_thread = ", ".join(f"{k} {v:.2f}" for k, v in threads.by_name().items() if v >= 0.05)
            print(
                f"    requests derived {derived:,} ({derived / max(got, 1):.2f} a request); CPU-s by thread: {by_thread}",
                flush=True,
            )


if __name__ == "__main__":
    main()
