"""`report` over the same folder archive on DuckDB and on Spark: both times, the reports compared, and Spark's
scan rate per core (the figure docs/scale.md sizes executors with).

    python benchmarks/bench_spark_report.py --archive bench-out/report-10000000-p10 [--master local[2]] [--runs 3]

Build the archive first with `python benchmarks/bench_report.py --requests 10000000 --parts 10` (bench_report's
budgets are used here too). Times are the report alone (`build_report`) on an open reader; the session start
and the reader's open are printed apart. The scan rate is the `requests` bytes on disk (and rows) the report
reads, over the warm report time, over the cores Spark ran on.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from budgetscope.analysis.budgets import parse_budgets
from budgetscope.analysis.report import build_report
from budgetscope.opener import Archive
from budgetscope.synthetic import BUDGETS
from common import machine


def worst_difference(a, b) -> float:
    """The largest relative difference of two report JSONs' floats (inf when they differ otherwise)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return 0.0
        return abs(a - b) / max(abs(a), abs(b), 1e-300)
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return max((worst_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return max((worst_difference(x, y) for x, y in zip(a, b)), default=0.0)
    return 0.0 if a == b else math.inf


def loads() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def runs(con, budgets, n: int) -> tuple[list[float], dict]:
    times, rep = [], None
    for _ in range(n):
        t = time.perf_counter()
        rep = build_report(con, budgets)
        times.append(time.perf_counter() - t)
    return times, rep


def sizes(archive: str) -> None:
    """Bytes on disk per table (the manifest's committed segments), per span and per request."""
    with Archive(archive, read_only=True) as a:
        by = {
            t: sum(f.stat().st_size for f in a.files(t))
            for t in ("spans", "requests", "requests_deletes", "ingest_batches", "gpu_samples", "server_metrics")
        }
        spans, requests = a.con.execute(
            "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM requests)"
        ).fetchone()
    total = sum(by.values())
    print(
        f"on disk: {total / 1e6:,.0f} MB for {spans:,} spans and {requests:,} requests = {total / spans:.1f} B a span "
        f"all-in; spans {by['spans'] / spans:.1f} B a span, requests {by['requests'] / requests:.1f} B a request "
        f"({by['requests'] / spans:.1f} B a span); " + ", ".join(f"{t} {b / 1e6:,.1f} MB" for t, b in by.items())
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archive", required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=3, help="reports per engine (the first is the cold one)")
    ap.add_argument(
        "--sizes-only", action="store_true", help="print the archive's bytes per table and per span, and stop"
    )
    args = ap.parse_args()
    sizes(args.archive)
    if args.sizes_only:
        return
    budgets = parse_budgets(BUDGETS)
    load = os.getloadavg()[0]

    t = time.perf_counter()
    with Archive(args.archive, read_only=True) as a:
        opened = time.perf_counter() - t
        n = a.con.execute("SELECT count(*) FROM requests").fetchone()[0]
        files = a.files("requests")
        size = sum(f.stat().st_size for f in files)
        d_times, d_rep = runs(a.con, budgets, args.runs)
    print(f"machine: {machine()}; load average {load:.2f} before (1/5/15 min: {loads()})")
    print(f"archive: {n:,} requests; requests segments {len(files)} files, {size / 1e6:,.0f} MB")
    print(
        f"duckdb: open {opened:.2f} s; report first {d_times[0]:.2f} s, warm median "
        f"{statistics.median(d_times[1:] or d_times):.2f} s ({d_times})",
        flush=True,
    )

    from budgetscope.spark.archive import SparkArchive
    from budgetscope.spark.session import session, stop

    t = time.perf_counter()
    spark = session(args.master)
    started = time.perf_counter() - t
    cores = spark.sparkContext.defaultParallelism
    t = time.perf_counter()
    with SparkArchive(args.archive, spark) as s:
        opened = time.perf_counter() - t
        s_times, s_rep = runs(s.con, budgets, args.runs)
        scans = len(s.con.statements) // args.runs
    stop(spark)
    warm = statistics.median(s_times[1:] or s_times)
    print(
        f"spark {args.master} ({cores} cores): session start {started:.1f} s, views {opened:.1f} s; report first "
        f"{s_times[0]:.2f} s, warm median {warm:.2f} s ({[round(x, 2) for x in s_times]}); {scans} statements a report"
    )
    # each statement of the report scans the tiers' requests once (the tier's selection narrows, not the files);
    # a statement with quantiles runs as two or three (spark/quantiles.py), each counted
    per_core = size * scans / warm / cores
    print(
        f"spark scan rate: {scans} scans of {size / 1e6:,.0f} MB ({n:,} rows) in {warm:.2f} s on {cores} cores = "
        f"{per_core / 1e6:,.1f} MB/s and {n * scans / warm / cores:,.0f} rows/s per core"
    )
    diff = worst_difference(d_rep, s_rep)
    same_verdicts = [t["verdict"] for t in d_rep["tiers"]] == [t["verdict"] for t in s_rep["tiers"]]
    print(f"reports: largest relative difference {diff:.2e}; verdicts identical: {same_verdicts}")
    print(f"load average {loads()} after (1/5/15 min): other work on the same cores slows every figure")


if __name__ == "__main__":
    main()
