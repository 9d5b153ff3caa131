"""`report` latency over an archive of 1,000,000 requests (7,000,000 spans), built through the real ingest.

    python benchmarks/bench_report.py [--requests 1000000] [--format folder|duckdb]

Prints the first (cold process) and warm (median of 5) report times, with budgets for two tiers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, peak_rss_mb  # noqa: E402

from budgetscope.analysis.budgets import parse_budgets  # noqa: E402
from budgetscope.analysis.report import build_report  # noqa: E402
from budgetscope.archive.archive import Archive  # noqa: E402
from budgetscope.ingest.files import read_batches  # noqa: E402
from budgetscope.synthetic import SyntheticSpec, write_jsonl  # noqa: E402

BUDGETS = """
[tiers.interactive]
percentile = 99
ttft_ms = 800
tpot_ms = 50
e2e_ms = 12000
[tiers.interactive.stages]
network = 50
queue = 250
prefill = 470
[tiers.batch]
percentile = 95
ttft_ms = 5000
"""


def build(archive: Path, n: int, out: Path) -> None:
    traces = out / f"report-{n}.jsonl"
    t = time.perf_counter()
    write_jsonl(traces, SyntheticSpec(num_requests=n, tiers=("interactive", "batch"), rate_per_s=500))
    print(f"generated {traces} ({traces.stat().st_size / 1e9:.1f} GB) in {time.perf_counter() - t:.0f} s")
    with Archive(archive) as a:
        rep = a.ingest(read_batches(traces))
    print(f"ingested {rep.spans:,} spans, {rep.requests_derived:,} requests in {rep.seconds:.0f} s "
          f"({rep.spans_per_s:,.0f} spans/s)")
    traces.unlink()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--format", choices=["folder", "duckdb"], default="folder")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    archive = out / f"report-{args.requests}{'.duckdb' if args.format == 'duckdb' else ''}"
    if not archive.exists():
        build(archive, args.requests, out)
    budgets = parse_budgets(BUDGETS)
    times = []
    with Archive(archive, read_only=True) as a:
        counts = a.counts()
        for _ in range(6):
            t = time.perf_counter()
            build_report(a.con, budgets)
            times.append(time.perf_counter() - t)
    print(f"machine: {machine()}")
    print(f"archive ({args.format}): {counts['requests']:,} requests, {counts['spans']:,} spans")
    print(f"report: first {times[0]:.2f} s, warm median {statistics.median(times[1:]):.2f} s "
          f"(min {min(times[1:]):.2f}, max {max(times[1:]):.2f}); peak RSS {peak_rss_mb():,.0f} MB")


if __name__ == "__main__":
    main()
