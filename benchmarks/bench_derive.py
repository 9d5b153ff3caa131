"""Derivation time: the `requests` SELECT (derive/requests.py) over an archive's spans, alone.

    python benchmarks/bench_derive.py [--requests 50000] [--runs 5] [--base COMMIT]
    python benchmarks/bench_derive.py --format vllm_journey [--requests 50000] [--source memory|file]

Prints the median seconds per derivation of every span of an archive, the query the writer runs at each commit
(over the spans copied into memory, as a writer's working set holds them; `--source file`: over the archive
file's compressed table), as requests/s and spans/s, with the CPU seconds of the process (DuckDB's threads
included) and the load average. Each runs under the DuckDB settings of its derivation (`requests.PLANNER`, as
`derive_pending` sets them).
`--format`: the spans of one upstream format (format_traces.py: vllm_classic, vllm_journey, ...), else
budgetscope's synthetic native traces (two tiers, client spans). With `--base`, the same for the derivation as it was at COMMIT (the package
extracted with `git archive`; its SELECT derives that commit's columns), run alternately with this one: what a change to
the derivation costs (e.g. the server span's resource join for the replica columns).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from budgetscope.derive import requests as current
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from common import base_tree, machine
from format_traces import FORMATS


def _base_sql(commit: str, present: set[str], relation: str = "spans") -> tuple[str, dict[str, str]]:
    """The `requests` SELECT that the package at `commit` writes (extracted with `git archive`, imported by a child
    interpreter: only its SQL text is needed; it runs on this tree's connection), and the DuckDB settings it ran
    under (`requests.PLANNER`; none before there were any)."""
    with base_tree(commit, extension=False) as d:
        code = (
            f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); from common import foreign_modules; "
            "import json; from budgetscope.derive import requests as r; "
            f"bad = foreign_modules({str(Path(d).resolve())!r}); "
            "sys.exit(f'the base lacks modules the derivation imports: {bad}') if bad else None; "
            "sys.stdout.write(json.dumps(getattr(r, 'PLANNER', {})) + chr(10)); "
            f"sys.stdout.write(r.requests_sql({relation!r}, set({sorted(present)!r})))"
        )
        env = {**os.environ, "PYTHONPATH": str(d)}
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=d)
        if p.returncode:
            sys.exit(f"the derivation at {commit} could not be written: {p.stderr.strip().splitlines()[-1]}")
        planner, sql = p.stdout.split("\n", 1)
        return sql, json.loads(planner)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--base", metavar="COMMIT", help="also time requests.py as it was at COMMIT")
    ap.add_argument("--format", choices=list(FORMATS), help="an upstream format's spans (default: synthetic native)")
    ap.add_argument(
        "--source",
        choices=["memory", "file"],
        default="memory",
        help="derive from the spans copied into memory, as a writer's working set holds them (default), or from "
        "the archive file's own table (compressed storage, read back)",
    )
    args = ap.parse_args()
    print(machine())
    variants = ["this tree", *([args.base] if args.base else [])]
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
            present = current.present_sources(con)
            (requests,) = con.execute("SELECT count(*) FROM requests").fetchone()
            relation = "spans"
            if args.source == "memory":  # as a writer's working set holds them: in memory, not compressed
                con.execute("CREATE TEMP TABLE bs_spans AS SELECT * FROM spans")
                relation = "bs_spans"
            sqls = {"this tree": (current.requests_sql(relation, present), current.PLANNER)}
            if args.base:
                sqls[args.base] = _base_sql(args.base, present, relation)
            times: dict[str, list[float]] = {k: [] for k in variants}
            cpus: dict[str, list[float]] = {k: [] for k in variants}
            load = os.getloadavg()[0]
            for _ in range(args.runs):  # alternately, so that a busy machine weighs on both alike
                for name in variants:
                    sql, planner = sqls[name]
                    with current.planned(con, planner):  # as derive_pending runs it
                        t, c = time.perf_counter(), cpu_s()
                        con.execute(f"CREATE OR REPLACE TEMP TABLE bs_bench AS {sql}")
                        times[name].append(time.perf_counter() - t)
                        cpus[name].append(cpu_s() - c)
    print(
        f"{args.format or 'native (synthetic)'}: {spans:,} spans, {requests:,} requests, spans in {args.source}, "
        f"median of {args.runs} runs; "
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
