"""Derivation time: the `requests` SELECT (derive/requests.py) over an archive's spans, alone.

    python benchmarks/bench_derive.py [--requests 50000] [--runs 5] [--base COMMIT]
    python benchmarks/bench_derive.py --format vllm_journey [--requests 50000]

Prints the median seconds per derivation of every span of an archive, the query the writer runs at each commit,
as requests/s and spans/s, with the CPU seconds of the process (DuckDB's threads included) and the load average.
`--format`: the spans of one upstream format (format_traces.py: vllm_classic, vllm_journey, ...), else
budgetscope's synthetic native traces (two tiers, client spans). With `--base`, the same for requests.py as it was at COMMIT (read with
`git show`; the columns added since are left out of its SELECT), run alternately with this one: what a change to
the derivation costs (e.g. the server span's resource join for the replica columns).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from budgetscope.derive import requests as current
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from common import machine
from format_traces import FORMATS


def _git_show(commit: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True, check=True).stdout


def _base(commit: str) -> types.ModuleType:
    """requests.py at `commit`, deriving the `requests` columns of that commit's schema.py."""
    mods = {}
    for name in ("archive/schema", "sources/requests"):
        mod = mods[name] = sys.modules[f"base_{name.replace('/', '_')}"] = types.ModuleType(
            f"base_{name.replace('/', '_')}"
        )
        exec(
            compile(_git_show(commit, f"budgetscope/{name}.py"), f"{commit}:{name}.py", "exec"),  # noqa: S102 - compiles an older commit's module to measure it against this one
            mod.__dict__,
        )  # our own files, from git
    mods["sources/requests"].REQUESTS = mods["archive/schema"].REQUESTS
    return mods["sources/requests"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--base", metavar="COMMIT", help="also time requests.py as it was at COMMIT")
    ap.add_argument("--format", choices=list(FORMATS), help="an upstream format's spans (default: synthetic native)")
    args = ap.parse_args()
    print(machine())
    variants = {"this tree": current}
    if args.base:
        variants[args.base] = _base(args.base)
    with tempfile.TemporaryDirectory() as d:
        traces = Path(d) / "t.jsonl"
        if args.format:
            import format_traces

            format_traces.write(args.format, traces, args.requests, SyntheticSpec().start_ns)
        else:
            write_jsonl(traces, SyntheticSpec(num_requests=args.requests, tiers=("interactive", "batch")))
        with Archive(Path(d) / "a.duckdb") as a:
            a.ingest(read_batches(traces))
        with Archive(Path(d) / "a.duckdb", read_only=True) as a:
            con = a.con
            (spans,) = con.execute("SELECT count(*) FROM spans").fetchone()
            present = {s for (s,) in con.execute("SELECT DISTINCT source FROM spans").fetchall()}
            (requests,) = con.execute("SELECT count(*) FROM requests").fetchone()
            times: dict[str, list[float]] = {k: [] for k in variants}
            cpus: dict[str, list[float]] = {k: [] for k in variants}
            load = os.getloadavg()[0]
            for _ in range(args.runs):  # alternately, so that a busy machine weighs on both alike
                for name, mod in variants.items():
                    sql = mod.requests_sql("spans", present)
                    t, c = time.perf_counter(), cpu_s()
                    con.execute(f"CREATE OR REPLACE TEMP TABLE bs_bench AS {sql}")
                    times[name].append(time.perf_counter() - t)
                    cpus[name].append(cpu_s() - c)
    print(
        f"{args.format or 'native (synthetic)'}: {spans:,} spans, {requests:,} requests, median of {args.runs} runs; "
        f"load {load:.1f} → {os.getloadavg()[0]:.1f}"
    )
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {name:>12}: {med:.3f} s per derivation = {requests / med:,.0f} requests/s, {spans / med:,.0f} spans/s; "
            f"CPU {statistics.median(cpus[name]):.3f} s"
        )


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


if __name__ == "__main__":
    main()
