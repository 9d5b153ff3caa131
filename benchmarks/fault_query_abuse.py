"""Issue 37's read-side attacks, each run as a real process against a copy of `sample_traces/calm`: `budgetscope
query` with statements that crashed DuckDB, read its settings or took gigabytes; the SQL page's limits (as the
dashboard runs them: a child process) with 10^5 rows of 100 kB; `report` with thousands of tiers and with a budgets
file at the tier bound; budgets files nested 500 deep or saved with a byte order mark.

    python benchmarks/fault_query_abuse.py [--only NAME,...] [--tree PATH]

Prints one line per attack: exit status, the stderr's first line, wall time, the peak RSS of the command's process
tree (its own and its children's, from wait4), and whether the archive's files are byte-identical after. Exits 1 if
an attack broke a promise (a process killed by a signal, more than one line on stderr, a changed archive, a peak
RSS over the attack's cap). `--tree` runs another checkout (the code before, for the "before" column of
docs/reliability.md); `range` and `page` take gigabytes there and are best left out with --only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine

ROOT = Path(__file__).resolve().parent.parent
CORR_4000 = "SELECT " + ", ".join(f"corr(i+{k}, i)" for k in range(4000)) + " FROM range(10) t(i)"
CORR_COMPACT = "SELECT " + ",".join(f"corr(i+{k},i)" for k in range(3900)) + " FROM range(10)t(i)"
CORR_GROUPED = (  # a grouped row of 3,400 corr states (~136 kB): SIGFPE inside DuckDB 2.0.1 past ~3,280
    "SELECT 'a'||(i%3) g," + ",".join(f"corr(i+{k},i)" for k in range(3400)) + " FROM range(100)t(i) GROUP BY g"
)
ABS_350 = "SELECT " + "abs(" * 350 + "1" + ")" * 350
PAGE = (
    "from budgetscope.query_limits import QueryLimits\n"
    "from budgetscope.query_process import run_isolated\n"
    "import sys\n"
    "limits = QueryLimits(max_rows=100_000, max_result_mb=64, timeout_s=30)  # dashboards/pages/sql.py\n"
    "res = run_isolated(sys.argv[1], \"SELECT repeat('x', 100000) FROM range(100000)\", limits)\n"
    "print(f'{len(res.rows)} rows kept, oversize={res.oversize}', file=sys.stderr)\n"
)


def tiers(n: int, matching: bool | None) -> str:
    """`n` tiers: each reading every request (`matching`), none (a model of its own), or by name only (None)."""
    if matching is None:
        return "".join(f"[tiers.t{i}]\nttft_ms = 800\n" for i in range(n))
    if matching:  # every tier reads every request of the archive: the most work a tier can be
        return "".join(
            f'[tiers.t{i}]\nmatch = {{ tier = "interactive" }}\npercentile = {50 + i % 49}\nttft_ms = 800\n'
            f"e2e_ms = 9000\n[tiers.t{i}.stages]\nqueue = 100\n"
            for i in range(n)
        )
    return "".join(f'[tiers.t{i}]\nmatch = {{ model = "m{i}" }}\nttft_ms = 800\n' for i in range(n))


def attacks(archive: Path, work: Path) -> dict[str, tuple[list[str], int, float]]:
    """name → (argv after `python`, the exit status it must end with, its peak RSS cap in MiB (0: none))."""
    files = {
        "tiers-6500.toml": tiers(6500, None),
        "tiers-10000.toml": tiers(10_000, False),
        "tiers-256-matching.toml": tiers(256, True),
        "tiers-256.toml": tiers(256, False),
        "deep.toml": "[tiers.a]\nttft_ms = " + "[" * 500 + "]" * 500 + "\n",
    }
    for name, text in files.items():
        (work / name).write_text(text)
    (work / "bom.toml").write_bytes(b"\xef\xbb\xbf[tiers.interactive]\nttft_ms = 800\n")
    cli = ["-m", "budgetscope"]
    q = [*cli, "query", "-a", str(archive)]
    r = [*cli, "report", "-a", str(archive), "--budgets"]
    return {
        "corr-4000": ([*q, CORR_4000], 2, 0),
        "corr-3900-compact": ([*q, CORR_COMPACT], 2, 0),
        "corr-grouped-3400": ([*q, CORR_GROUPED], 2, 0),
        "abs-350": ([*q, ABS_350], 2, 0),
        "cte-pg_settings": (
            [*q, "WITH pg_settings AS (SELECT * FROM pg_settings) SELECT name, setting FROM pg_settings"],
            2,
            0,
        ),
        "show-allowed_paths": ([*q, "SHOW allowed_paths"], 2, 0),
        "summarize-pg_settings": ([*q, "FROM (SUMMARIZE pg_settings)"], 2, 0),
        "range-1e8": ([*q, "SELECT range(100000000)", "--max-rows", "1", "--timeout", "5"], 2, 2048),
        "page-repeat": (["-c", PAGE, str(archive)], 0, 1536),
        "tiers-6500": ([*r, str(work / "tiers-6500.toml")], 2, 0),  # SIGFPE inside DuckDB before
        "tiers-10000-match": ([*r, str(work / "tiers-10000.toml")], 2, 0),
        "tiers-256-matching": ([*r, str(work / "tiers-256-matching.toml")], 0, 512),
        "tiers-256": ([*r, str(work / "tiers-256.toml")], 3, 512),
        "budgets-deep": ([*r, str(work / "deep.toml")], 2, 0),
        "budgets-bom": ([*r, str(work / "bom.toml")], 0, 0),
    }


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def run(argv: list[str], tree: Path) -> tuple[int, str, float, float]:
    """(exit status or -signal, stderr, seconds, peak RSS of the process tree in MiB)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=tree)
        _, status, usage = os.wait4(p.pid, 0)
        took = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode(errors="replace")
    return p.returncode, text, took, usage.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma-separated attack names")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout to run (default: this one)")
    opts = ap.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f} at start; tree {opts.tree}")
    broken = 0
    with tempfile.TemporaryDirectory(prefix="bs-attacks-") as tmp:
        work = Path(tmp)
        archive = work / "calm"
        shutil.copytree(ROOT / "sample_traces" / "calm", archive)
        chosen = attacks(archive, work)
        if opts.only:
            chosen = {k: v for k, v in chosen.items() if k in opts.only.split(",")}
        for name, (argv, want, cap_mb) in chosen.items():
            before = digest(archive)
            code, err, took, peak = run(argv, opts.tree)
            lines = [ln for ln in err.splitlines() if ln.strip()]
            same = digest(archive) == before
            ok = code == want and len(lines) <= 1 and same and (not cap_mb or peak <= cap_mb)
            broken += not ok
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            first = (lines[0] if lines else "(nothing on stderr)")[:160]
            print(
                f"{'ok  ' if ok else 'FAIL'} {name}: {how}, {len(lines)} stderr line(s), {took:.2f} s, peak RSS "
                f"{peak:,.0f} MiB{f' (cap {cap_mb:,})' if cap_mb else ''}, archive "
                f"{'byte-identical' if same else 'CHANGED'}: {first}"
            )
    print(f"load average {os.getloadavg()[0]:.1f} at end; CPU seconds of the children {_cpu():.1f}")
    return 1 if broken else 0


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


if __name__ == "__main__":
    sys.exit(main())
