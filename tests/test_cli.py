"""The CLI driven in-process, with exact-output asserts. Errors: one line, exit 2, no traceback."""

from __future__ import annotations

import json
import os
import re

import click
import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from otlp_wire import MS, T0, export, jsonl, native_request

BUDGETS = """
[tiers.interactive]
percentile = 75
ttft_ms = 100
e2e_ms = 1000
[tiers.interactive.stages]
queue = 50
"""


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def traces(tmp_path):
    docs = []
    for i in range(40):
        q = 510 if i >= 30 else 10
        _, s = native_request(
            arrival=T0 + i * 1000 * MS,
            client=(5, 3),
            stages=(("frontend", 2), ("queue", q), ("prefill", 50), ("decode", 100), ("postprocess", 1)),
        )
        docs.append(export(s))
    p = tmp_path / "traces.jsonl"
    p.write_text(jsonl(*docs))
    b = tmp_path / "budgets.toml"
    b.write_text(BUDGETS)
    return p, b


@pytest.fixture
def archive(runner, traces, tmp_path):
    a = tmp_path / "a.duckdb"
    r = runner.invoke(main, ["ingest", str(traces[0]), "--archive", str(a)])
    assert r.exit_code == 0, r.output
    return a


def test_ingest_output(runner, traces, tmp_path):
    a = tmp_path / "x.duckdb"
    r = runner.invoke(main, ["ingest", str(traces[0]), "-a", str(a)])
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert re.fullmatch(
        rf"{re.escape(str(traces[0]))}: 40 batches, 280 spans \(280 new, 0 already stored\), "
        r"0 batches already ingested; 40 requests derived in \d+\.\d\d s \([\d,]+ spans/s\)",
        lines[0],
    )
    assert lines[1:] == [f"{a}: 280 spans, 40 requests"]


def test_ingest_rejects_bad_lines_and_exits_2(runner, traces, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(traces[0].read_text().splitlines()[0] + '\n{"foo": 1}\n')
    a = tmp_path / "x.duckdb"
    r = runner.invoke(main, ["ingest", str(bad), "-a", str(a)])
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        f"budgetscope: {bad}: line 2: not an OTLP trace export: no 'resourceSpans' list (found keys ['foo']) "
        "(batch rejected; nothing from it landed)"
    ]
    assert "Traceback" not in r.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["ingest", "missing.jsonl", "-a", "{a}"], "budgetscope: missing.jsonl: no such file"),
        (["ingest", "{d}", "-a", "{a}"], "budgetscope: {d}: is a directory, not a trace file"),
        (["report", "-a", "{d}"], "budgetscope: {d} is not a budgetscope archive (no manifest.json)"),
        (
            ["report", "-a", "{d}/none.duckdb"],
            "budgetscope: no archive at {d}/none.duckdb (create one with `budgetscope ingest FILE --archive {d}/none.duckdb`)",
        ),
        (["report", "-a", "{a}", "-b", "{d}/none.toml"], "budgetscope: {d}/none.toml: no such budgets file"),
        (
            ["report", "-a", "{a}", "--since", "yesterday"],
            "budgetscope: --since: 'yesterday' is neither ns since the epoch nor an ISO-8601 time",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(runner, archive, tmp_path, args, message):
    fmt = {"a": str(archive), "d": str(tmp_path)}
    r = runner.invoke(main, [x.format(**fmt) for x in args])
    assert r.exit_code == 2
    assert r.stderr == message.format(**fmt) + "\n"
    assert r.stdout == ""


def test_ingest_of_what_is_no_trace_file_says_what_it_is_and_creates_nothing(runner, tmp_path):
    import os

    fifo, empty = tmp_path / "fifo", tmp_path / "empty.jsonl"
    os.mkfifo(fifo)
    empty.write_bytes(b"")
    a = tmp_path / "new"
    for path, what in (
        ("/dev/null", "not a regular file (a character device)"),
        (str(fifo), "not a regular file (a FIFO)"),
        (str(empty), "an empty file (0 bytes)"),
    ):
        r = runner.invoke(main, ["ingest", path, "-a", str(a)])
        assert (r.exit_code, r.stderr, r.stdout) == (2, f"budgetscope: {path}: {what}\n", "")
        assert not a.exists()
    r = runner.invoke(main, ["import", "--from", "aiperf", str(fifo), "-a", str(a)])  # the same check
    assert (r.exit_code, r.stderr) == (2, f"budgetscope: {fifo}: not a regular file (a FIFO)\n")
    assert not a.exists()


def test_bad_budgets_key_exits_2(runner, archive, tmp_path):
    b = tmp_path / "b.toml"
    b.write_text("[tiers.interactive]\nttft = 5\n")
    r = runner.invoke(main, ["report", "-a", str(archive), "-b", str(b)])
    assert (r.exit_code, r.stderr) == (
        2,
        f"budgetscope: {b}: tiers.interactive.ttft: unknown key (expected one of: "
        "match, percentile, ttft_ms, tpot_ms, e2e_ms, max_error_rate, stages)\n",
    )


def test_report_json_keeps_the_design_keys_and_exits_1_when_broken(runner, archive, traces):
    r = runner.invoke(main, ["report", "-a", str(archive), "-b", str(traces[1]), "--format", "json"])
    assert r.exit_code == 1
    rep = json.loads(r.stdout)
    (t,) = rep["tiers"]
    assert {"name", "requests", "percentile", "attainment", "metrics", "stages", "attribution", "verdict"} <= set(t)
    assert (t["name"], t["requests"], t["percentile"], t["attainment"]) == ("interactive", 40, 75.0, 0.75)
    assert set(t["metrics"]) == {"ttft_ms", "tpot_ms", "e2e_ms"}
    assert {"p50", "p90", "p95", "p99", "budget"} <= set(t["metrics"]["ttft_ms"])
    assert t["stages"]["queue"]["budget"] == 50.0 and {"p50", "p75"} <= set(t["stages"]["queue"])
    ttft = t["attribution"]["ttft"]
    assert {"metric", "tail_size", "shares", "dominant", "verdict", "top"} <= set(ttft)
    assert (ttft["metric"], ttft["tail_size"], ttft["dominant"], ttft["verdict"]) == (
        "client_ttft_ms",
        10,
        "queue",
        "dominated",
    )
    assert list(ttft["shares"]) == ["network", "frontend", "queue", "prefill", "unaccounted"]
    assert list(t["attribution"]["e2e"]["shares"]) == [
        "network",
        "frontend",
        "queue",
        "prefill",
        "decode",
        "postprocess",
        "unaccounted",
    ]
    assert t["verdict"].startswith(
        "interactive breaks its budget: p75 TTFT 195 ms vs 100 ms. 100% of the TTFT "
        "tail's excess over the median request is queueing (tail mean 510 ms vs 10 ms)"
    )


def test_report_exits_0_when_budgets_are_kept(runner, archive, tmp_path):
    b = tmp_path / "loose.toml"
    b.write_text("[tiers.interactive]\nttft_ms = 10000\n")
    r = runner.invoke(main, ["report", "-a", str(archive), "-b", str(b)])
    assert r.exit_code == 0
    assert r.stdout.splitlines()[0] == (
        "== tier interactive: KEPT — 40 requests (40 ok), p99 over the ok requests, "
        "attainment 100.0%, error rate 0.0% (max 1%), client-side figures; client TTFT "
        "to the first token event"
    )


def test_report_table_exact(runner, archive, traces):
    r = runner.invoke(main, ["report", "-a", str(archive), "-b", str(traces[1])])
    assert r.exit_code == 1
    assert r.stdout.splitlines()[:8] == [
        "== tier interactive: BROKEN — 40 requests (40 ok), p75 over the ok requests, attainment 75.0%, "
        "error rate 0.0% (max 25%), client-side figures; client TTFT to the first token event",
        "-- metrics",
        "metric  figure          p50     p75     p90     p95     p99     budget  status",
        "------  --------------  ------  ------  ------  ------  ------  ------  ------",
        "TTFT    client_ttft_ms  70 ms   195 ms  570 ms  570 ms  570 ms  100 ms  BROKEN",
        "TPOT    client_tpot_ms  2.5 ms  2.5 ms  2.5 ms  2.5 ms  2.5 ms  -",
        "E2E     client_e2e_ms   171 ms  296 ms  671 ms  671 ms  671 ms  1.00 s  OK",
        "-- stages",
    ]
    assert r.stdout.splitlines()[-3:] == [
        "interactive breaks its budget: p75 TTFT 195 ms vs 100 ms. 100% of the TTFT tail's excess over the median "
        "request is queueing (tail mean 510 ms vs 10 ms). 100% of the E2E tail's excess over the median request is "
        "queueing (tail mean 510 ms vs 10 ms). Stage budgets broken: queue p75 135 ms vs 50 ms. 75.0% of requests "
        "met every SLO (goodput); the percentiles are over the 40 ok requests. What the TTFT tail queued behind is "
        "unknown: no engine steps and no KV-use gauge in the archive while the tail queued.",
        "",
        "coverage: 40 requests; 40 with server spans, 40 with client spans, 40 with both",
    ]


def test_report_markdown(runner, archive, traces):
    r = runner.invoke(main, ["report", "-a", str(archive), "-b", str(traces[1]), "--format", "markdown"])
    assert r.exit_code == 1
    assert r.stdout.startswith("# budgetscope report\n\n## Tier `interactive`: **broken**\n")
    assert "| stage | p50 | p75 | budget | status |" in r.stdout


def test_report_without_budgets_shows_every_tier(runner, archive):
    r = runner.invoke(main, ["report", "-a", str(archive), "--format", "json"])
    assert r.exit_code == 0
    (t,) = json.loads(r.stdout)["tiers"]
    assert (t["name"], t["budgeted"], t["metrics"]["ttft_ms"]["budget"]) == ("interactive", False, None)


def test_report_time_range(runner, archive):
    since = T0 + 30 * 1000 * MS
    r = runner.invoke(main, ["report", "-a", str(archive), "--format", "json", "--since", str(since)])
    assert json.loads(r.stdout)["tiers"][0]["requests"] == 10
    r = runner.invoke(main, ["report", "-a", str(archive), "--format", "json", "--until", "2026-01-01T00:00:05Z"])
    assert json.loads(r.stdout)["tiers"][0]["requests"] == 5


def test_query_table_json_csv(runner, archive):
    sql = "SELECT tier, count(*) AS n, quantile_cont(queue_ms, 0.5) AS q FROM requests GROUP BY 1"
    r = runner.invoke(main, ["query", "-a", str(archive), sql])
    assert (r.exit_code, r.stdout) == (0, "tier         n   q\n-----------  --  --\ninteractive  40  10\n(1 row)\n")
    r = runner.invoke(main, ["query", "-a", str(archive), sql, "--format", "json"])
    assert json.loads(r.stdout) == [{"tier": "interactive", "n": 40, "q": 10.0}]
    r = runner.invoke(main, ["query", "-a", str(archive), sql, "--format", "csv"])
    assert r.stdout == "tier,n,q\ninteractive,40,10.0\n"


@pytest.mark.parametrize(
    "sql, message",
    [
        (
            "DELETE FROM spans",
            "budgetscope: the archive is read-only to queries: one SELECT at a time; budgetscope ingest is the way in",
        ),
        (
            "CREATE TABLE x AS SELECT 1",
            "budgetscope: the archive is read-only to queries: one SELECT at a time; budgetscope ingest is the way in",
        ),
        (
            "SELECT * FROM read_csv('/etc/passwd')",
            "budgetscope: queries may not touch files or settings: read_csv() is not "
            "allowed (tables: engine_steps, gpu_samples, ingest_batches, requests, server_metrics, spans)",
        ),
        # only one SELECT runs: the segments are readable paths, so a COPY TO one of them must never run
        (
            "COPY requests TO '/tmp/out.csv'",
            "budgetscope: the archive is read-only to queries: one SELECT at a time; budgetscope ingest is the way in",
        ),
        (
            "SET enable_external_access = true",
            "budgetscope: the archive is read-only to queries: one SELECT at a time; budgetscope ingest is the way in",
        ),
        (
            "SELECT 1; ATTACH '/tmp/x.duckdb'",
            "budgetscope: the archive is read-only to queries: one SELECT at a time; budgetscope ingest is the way in",
        ),
        (
            "SELECT * FROM read_parquet('/tmp/**/*.parquet')",
            "budgetscope: queries may not touch files or settings: "
            "read_parquet() is not allowed (tables: engine_steps, gpu_samples, ingest_batches, requests, server_metrics, spans)",
        ),
        ("SELEC 1", None),
    ],
)
def test_query_refuses_writes_and_files(runner, archive, sql, message):
    before = runner.invoke(main, ["query", "-a", str(archive), "SELECT count(*) FROM spans", "--format", "csv"]).stdout
    r = runner.invoke(main, ["query", "-a", str(archive), sql])
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    if message:
        assert r.stderr == message + "\n"
    else:
        assert r.stderr.startswith('budgetscope: Parser Error: syntax error at or near "SELEC"')
    assert (
        runner.invoke(main, ["query", "-a", str(archive), "SELECT count(*) FROM spans", "--format", "csv"]).stdout
        == before
    )


def test_every_command_has_help_and_docs(runner):
    from pathlib import Path

    docs = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        cmd = main.get_command(ctx, name)
        r = runner.invoke(main, [name, "--help"])
        assert r.exit_code == 0 and cmd.help, name
        assert f"budgetscope {name}" in docs, f"docs/cli.md does not document `budgetscope {name}`"


def test_python_dash_m_runs_the_command():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "budgetscope", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("budgetscope, version ")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads are counted in /proc (Linux)")
@pytest.mark.parametrize("given", [None, "3"])
def test_the_command_keeps_numpys_blas_to_one_thread_unless_told(given):
    """numpy's OpenBLAS threads spin at every command's start for nothing (budgetscope/cli.py): one thread, so
    loading numpy (as a command does, through duckdb) starts none; a number the user set is kept."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given:
        env["OPENBLAS_NUM_THREADS"] = given
    code = (
        "import os, budgetscope.cli; n = len(os.listdir('/proc/self/task')); import duckdb, numpy; "
        "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')) - n)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    value, started = r.stdout.split()
    assert value == (given or "1")
    if not given:
        assert started == "0"  # duckdb's own threads start with a connection, not at import


def test_every_option_docs_cli_names_exists():
    """A heading of docs/cli.md (`budgetscope demo [--out DIR] …`) names only options the command has."""
    import re
    from pathlib import Path

    docs = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    ctx = click.Context(main)
    for heading in re.findall(r"^## `budgetscope ([^`]+)`", docs, re.M):
        words = heading.split()
        cmd = main.get_command(ctx, words[0])
        if isinstance(cmd, click.Group) and len(words) > 1 and words[1] in cmd.commands:
            cmd = cmd.commands[words[1]]
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", heading):
            assert option in known, f"docs/cli.md: `budgetscope {heading}` names {option}, which {cmd.name} lacks"
