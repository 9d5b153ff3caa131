"""What one query may use, tried as issue 37's attacker did: a statement too large, too deep or with too many
aggregates is one line before DuckDB runs it (a row of 4,000 `corr` aggregates raised SIGFPE inside DuckDB, `abs(`
nested 350 deep a traceback); DuckDB's memory and spill are the query's own, locked in; at most `max_rows` + 1 rows
and `max_result_mb` are fetched (`SELECT range(100000000)` with `--max-rows 1` took 6 GB); a query that ignores its
interrupt is killed at its timeout; a crash inside DuckDB ends the query's process only, in one line; its spill
directory is gone after, however it ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from budgetscope.query import QueryError, run_query
from budgetscope.query_check import MAX_AGGREGATES, MAX_EXPRESSIONS, MAX_SQL_BYTES, TOO_DEEP
from budgetscope.query_limits import QueryLimits
from budgetscope.query_process import HEADROOM_MB, THREAD_MB, run_isolated
from conftest import synthetic_archive

ROOT = Path(__file__).resolve().parent.parent
CORR_4000 = "SELECT " + ", ".join(f"corr(i+{k}, i)" for k in range(4000)) + " FROM range(10) t(i)"
# a grouped row of 3,400 corr states: SIGFPE inside DuckDB 2.0.1 (exit 136, no message) before the limits
CORR_GROUPED = (
    "SELECT 'a'||(i%3) g," + ",".join(f"corr(i+{k},i)" for k in range(3400)) + " FROM range(100)t(i) GROUP BY g"
)
CORR_ROW = "SELECT tier, " + ", ".join(f"corr(ttft_ms+{k}, e2e_ms)" for k in range(1100)) + " FROM requests GROUP BY 1"


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    return synthetic_archive(tmp_path_factory.mktemp("limits"), 20)


@pytest.fixture
def work_dirs(tmp_path, monkeypatch) -> Path:
    """Where run_isolated makes its directories in this test: none may be left there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path
    assert not list(tmp_path.glob("budgetscope-query-*"))


@pytest.mark.parametrize(
    "sql, message",
    [
        (CORR_4000, f"the statement is {len(CORR_4000):,} bytes; a query may have at most {MAX_SQL_BYTES:,}"),
        ("SELECT " + ",".join(["1"] * 12_000), f"the statement has more than {MAX_EXPRESSIONS:,} expressions"),
        (CORR_GROUPED, f"the statement has more than {MAX_EXPRESSIONS:,} expressions"),
        ("SELECT " + "abs(" * 350 + "1" + ")" * 350, TOO_DEEP),
        ("SELECT " + "abs(" * 99 + "1" + ")" * 99, TOO_DEEP),  # the binder counts deeper than the parser
        ("SELECT 1" + " + 1" * 200, TOO_DEEP),
        ("SELECT " + "(SELECT " * 120 + "1" + ")" * 120, TOO_DEEP),
        (CORR_ROW, f"the statement computes more than {MAX_AGGREGATES:,} aggregates"),
        (  # COLUMNS(*) expands in the plan: 25 x 48 columns
            "SELECT "
            + ", ".join(f"max(COLUMNS(*)) FILTER (WHERE ttft_ms > {k})" for k in range(25))
            + " FROM requests",
            "the statement computes more than 1,000 aggregates",
        ),
    ],
)
def test_statements_past_the_limits_are_one_line(archive, sql, message):
    with pytest.raises(QueryError) as e:
        run_query(archive, sql)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_within_the_limits_it_runs(archive):
    assert run_query(archive, "SELECT " + "abs(" * 40 + "1" + ")" * 40).rows == [(1,)]
    sql = "SELECT tier, " + ", ".join(f"corr(ttft_ms+{k}, e2e_ms)" for k in range(200)) + " FROM requests GROUP BY 1"
    assert len(run_query(archive, sql).columns) == 201
    assert len(run_query(archive, "SUMMARIZE requests").rows) > 40


@pytest.mark.parametrize("sql", [CORR_4000, CORR_GROUPED, "SELECT " + "abs(" * 350 + "1" + ")" * 350])
def test_the_command_answers_the_attacks_in_one_line(archive, sql, work_dirs):
    """Issue 37: exit 136 with no message, and a traceback with exit 1."""
    r = CliRunner().invoke(main, ["query", "-a", str(archive), sql])
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("budgetscope: the statement")


def test_memory_is_bounded_and_the_process_stays_within_its_cap(archive, tmp_path):
    """`SELECT range(100000000)` (one row: a list of 10^8 numbers) with `--max-rows 1`: one line, and the query's
    process never held more than its cap (its peak RSS, read by a parent of its own)."""
    script = (
        "import json, resource, sys\n"
        "from budgetscope.query import QueryError\n"
        "from budgetscope.query_limits import QueryLimits\n"
        "from budgetscope.query_process import run_isolated\n"
        "try:\n"
        "    run_isolated(sys.argv[1], 'SELECT range(100000000)', QueryLimits(memory_mb=256, max_rows=1))\n"
        "    err = None\n"
        "except QueryError as e:\n"
        "    err = str(e)\n"
        "print(json.dumps([err, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script, str(archive)], capture_output=True, text=True, env=env)
    err, peak_kb = json.loads(out.stdout)
    assert err == (
        "the query needed more than its 256 MiB of memory and was stopped (narrow it, or give it more with --memory-mb)"
    )
    assert peak_kb * 1024 <= (256 + HEADROOM_MB + THREAD_MB * os.cpu_count()) * 2**20


def test_rows_are_fetched_up_to_the_caps(archive, work_dirs):
    res = run_isolated(archive, "SELECT * FROM range(1000000)", QueryLimits(max_rows=10))
    assert (len(res.rows), res.truncated, res.oversize) == (10, True, False)
    # 10^5 rows of 100 kB: what fits in 1 MiB comes back, and says so
    res = run_isolated(archive, "SELECT repeat('x', 100000) FROM range(100000)", QueryLimits(max_result_mb=1))
    assert res.oversize and 1 <= len(res.rows) <= 11
    r = CliRunner().invoke(
        main, ["query", "-a", str(archive), "SELECT repeat('x', 100000) FROM range(100000)", "--max-result-mb", "1"]
    )
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("budgetscope: the result passed 1 MiB (--max-result-mb) after ")


def test_memory_and_spill_are_the_querys_own(archive, work_dirs):
    """A sort larger than DuckDB's memory spills, within the spill limit: with none allowed it stops in one line."""
    sql = "SELECT count(*) FROM (SELECT i FROM range(12000000) t(i) ORDER BY i DESC LIMIT 10000000)"
    with pytest.raises(QueryError, match=r"^the query needed more than its 64 MiB of memory and 0 MiB of spill"):
        run_query(archive, sql, QueryLimits(memory_mb=64, spill_mb=0))
    assert run_isolated(archive, sql, QueryLimits(memory_mb=64, spill_mb=512)).rows == [(10_000_000,)]


def test_a_query_that_ignores_its_interrupt_is_killed_at_its_timeout(archive, work_dirs, monkeypatch):
    import budgetscope.query_process as qp

    monkeypatch.setattr(qp, "KILL_GRACE_S", 0.2)
    with pytest.raises(QueryError, match=r"^the query ran past its 0.5 s limit and was stopped$"):
        run_isolated(archive, "SELECT sleep_ms(60000)", QueryLimits(timeout_s=0.5))
    # and the server that ran it holds nothing of it: the thread that read its frames has ended
    for t in [t for t in threading.enumerate() if t.name == qp.READER_THREAD]:
        t.join(timeout=30)
        assert not t.is_alive()


def _query_child() -> int | None:
    """The pid of this process's query child, if one runs."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"budgetscope.query_process" in cmd:
            return int(d.name)
    return None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the child through /proc")
def test_a_crash_inside_duckdb_ends_only_the_querys_process(archive, work_dirs):
    """A fake crash: the query's process is sent the SIGFPE that DuckDB raised in issue 37; the caller (the
    command, the dashboard's server) carries on."""
    killed = []

    def crash() -> None:
        for _ in range(600):
            pid = _query_child()
            if pid:
                time.sleep(0.3)  # inside its query by now
                os.kill(pid, signal.SIGFPE)
                killed.append(pid)
                return
            time.sleep(0.05)

    t = threading.Thread(target=crash)
    t.start()
    with pytest.raises(QueryError) as e:
        run_isolated(archive, "SELECT count(*) FROM range(100000000000) a", QueryLimits(timeout_s=60))
    t.join()
    assert killed
    assert str(e.value) == (
        "DuckDB crashed on this query (SIGFPE) and its process ended; nothing else was affected "
        "(simplify the statement)"
    )
    assert run_isolated(archive, "SELECT count(*) FROM requests", QueryLimits()).rows == [(20,)]
