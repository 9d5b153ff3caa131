"""The query sandbox tried as an attacker would: every way of writing, loading or reading outside the archive's
tables, and every way of reading a setting or DuckDB's catalog, through `run_query` (the sandbox that `budgetscope
query` and the dashboard's SQL page run in a child process) is refused in one line, and the archive is
byte-identical afterwards; `budgetscope query` itself is tried with a sample of them (each run there starts a
process). Several attempts name a committed segment's own path, the file a reader is allowed to read and that
DuckDB would also let a statement write."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from budgetscope.query import QueryError, run_query
from conftest import synthetic_archive

WRITES = [
    "COPY (SELECT * FROM spans LIMIT 0) TO '{seg}' (FORMAT parquet, USE_TMP_FILE false)",
    "COPY spans TO '{seg}' (FORMAT parquet)",
    "COPY spans FROM '{seg}'",
    "CREATE TABLE x AS SELECT 1",
    "CREATE VIEW v AS SELECT 1",
    "CREATE OR REPLACE VIEW spans AS SELECT 1",
    "CREATE MACRO m(a) AS a",
    "INSERT INTO spans SELECT * FROM spans",
    "DELETE FROM spans",
    "UPDATE requests SET queue_ms = 0",
    "DROP VIEW spans",
    "ALTER VIEW spans RENAME TO s",
    "ATTACH '{root}/x.duckdb' AS x",
    "DETACH memory",
    "EXPORT DATABASE '{root}/exported'",
    "IMPORT DATABASE '{root}'",
    "CHECKPOINT",
    "VACUUM",
    "PRAGMA enable_profiling",
    "PRAGMA database_size",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "SET VARIABLE x = 1",
    "INSTALL httpfs",
    "LOAD httpfs",
    "FORCE INSTALL json",
    "CALL pragma_version()",
    "PREPARE p AS SELECT 1",
    "BEGIN TRANSACTION",
    "PIVOT spans ON name USING count(*)",
    "SELECT 1; COPY spans TO '{seg}'",
    "SELECT 1; SELECT 2",
    "FROM '{seg}'",
    "SELECT * FROM '{seg}'",
    "SELECT * FROM read_parquet('{seg}')",
    "SELECT * FROM read_parquet('{root}/**/*.parquet')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('{root}/manifest.json')",
    "SELECT * FROM read_blob('{seg}')",
    "SELECT * FROM glob('{root}/*')",
    "SELECT * FROM parquet_metadata('{seg}')",
    "SELECT * FROM query('COPY spans TO ''{seg}''')",
    "SELECT * FROM query_table('spans')",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_views()",
    "SELECT * FROM information_schema.views",
    "SELECT current_setting('allowed_paths')",
    "SELECT * FROM (SELECT current_setting('allowed_paths') AS p) WHERE p IS NOT NULL",
    "WITH s AS (SELECT * FROM read_parquet('{seg}')) SELECT * FROM s",
    "SELECT * FROM spans JOIN '{seg}' USING (trace_id)",
    "SELECT * FROM memory.main.spans",
    "SELECT * FROM x.spans",
    # the configuration holds the query's limits: locked, and no statement that would change it is a SELECT
    "SET memory_limit = '100GB'",
    "SET max_temp_directory_size = '1TB'",
    "SET temp_directory = '{root}'",
    "SET max_expression_depth = 100000",
    "RESET memory_limit",
    "RESET ALL",
    "PRAGMA memory_limit = '100GB'",
    "SELECT * FROM (SET memory_limit = '100GB')",
    "SELECT * FROM pragma_database_size()",
]
# each writing statement under EXPLAIN and EXPLAIN ANALYZE: the first hole was `EXPLAIN ANALYZE COPY … TO segment`
WRITES += [f"{e} {w}" for e in ("EXPLAIN", "EXPLAIN ANALYZE") for w in WRITES[:13]]


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    return synthetic_archive(tmp_path_factory.mktemp("sandbox"), 30)


def _snapshot(root: Path) -> dict:
    return {
        str(p.relative_to(root.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.parent.rglob("*"))
        if p.is_file()
    }


def _sql(template: str, archive: Path) -> str:
    seg = next(archive.glob("spans/**/*.parquet"))
    return template.format(seg=seg, root=archive)


LEAKS = [
    # issue 37: a CTE named after a catalog view read the view it hid (all 167 settings, `allowed_paths` naming
    # every segment, `secret_directory` naming HOME), and the same through pg_proc and the views' SQL
    "WITH pg_settings AS (SELECT * FROM pg_settings) SELECT name, setting FROM pg_settings",
    'WITH "PG_SETTINGS" AS (SELECT * FROM "pg_settings") SELECT * FROM "PG_SETTINGS"',
    "WITH x AS (SELECT 1), pg_proc AS (SELECT * FROM pg_proc) SELECT * FROM pg_proc",
    "WITH duckdb_views AS (SELECT 1) SELECT * FROM duckdb_views",
    "WITH s AS (SELECT * FROM s) SELECT * FROM s",
    "WITH a AS (SELECT * FROM pg_settings_b), pg_settings_b AS (SELECT 1) SELECT * FROM a",
    "WITH t AS (SELECT 1) SELECT * FROM (WITH u AS (SELECT * FROM pg_settings) SELECT * FROM u)",
    # the names the catalog answers to, however written
    "SELECT * FROM pg_settings",
    'SELECT * FROM "pg_settings"',
    "SELECT * FROM PG_SETTINGS",
    "SELECT * FROM main.pg_settings",
    "SELECT * FROM pg_catalog.pg_settings",
    "SELECT * FROM system.pg_catalog.pg_settings",
    "SELECT * FROM system.main.spans",
    "SELECT * FROM temp.main.spans",
    "SELECT * FROM temp.spans",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM information_schema.columns",
    "SELECT * FROM pg_proc",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM system.main.duckdb_settings()",
    "SELECT * FROM duckdb_secrets()",
    "SELECT * FROM duckdb_functions()",
    "SELECT * FROM duckdb_profiling_settings()",
    "SELECT (SELECT setting FROM pg_settings LIMIT 1)",
    "SELECT * FROM requests WHERE tier IN (SELECT name FROM pg_settings)",
    # SHOW, DESCRIBE and SUMMARIZE of a setting or a catalog view, also as a subquery
    "SHOW allowed_paths",
    "SHOW secret_directory",
    "SHOW memory_limit",
    "SHOW TABLES",
    "SHOW ALL TABLES",
    "SHOW databases",
    "DESCRIBE pg_settings",
    "SUMMARIZE pg_settings",
    "FROM (SUMMARIZE pg_settings)",
    "FROM (SUMMARIZE SELECT * FROM pg_settings)",
    "SELECT * FROM (DESCRIBE SELECT current_setting('memory_limit'))",
    # settings, variables, the environment and the catalog through scalar functions and macros
    "SELECT current_setting('secret_directory')",
    "SELECT system.main.current_setting('allowed_paths')",
    "SELECT getenv('HOME')",
    "SELECT getvariable('x')",
    "SELECT which_secret('s3://bucket/x', 's3')",
    "SELECT current_database()",
    "SELECT current_schemas(true)",
    "SELECT pg_get_viewdef(1)",
    "SELECT get_block_size('memory')",
    "SELECT format_type(1, 1)",
    "SELECT list_transform([1], lambda x: current_setting('allowed_paths'))",
    "SELECT write_log('x')",
]


@pytest.mark.parametrize("template", WRITES + LEAKS)
def test_every_attempt_is_refused_and_the_archive_is_unchanged(archive, template):
    before = _snapshot(archive)
    sql = _sql(template, archive)
    with pytest.raises(QueryError) as e:
        run_query(archive, sql)
    msg = str(e.value)
    assert "\n" not in msg, msg
    # no path of the sandbox, and nothing of HOME, disclosed that the query did not name itself
    assert not [p for p in archive.rglob("*") if str(p) in msg and str(p) not in sql], msg
    assert str(Path.home()) not in msg or str(Path.home()) in sql, msg
    assert _snapshot(archive) == before


@pytest.mark.parametrize(
    "template",
    [
        "EXPLAIN ANALYZE COPY (SELECT * FROM spans LIMIT 0) TO '{seg}' (FORMAT parquet, USE_TMP_FILE false)",
        "SELECT * FROM read_parquet('{root}/**/*.parquet')",
        "WITH pg_settings AS (SELECT * FROM pg_settings) SELECT name, setting FROM pg_settings",
        "SHOW allowed_paths",
        "SET memory_limit = '100GB'",
    ],
)
def test_the_command_refuses_in_one_line(archive, template):
    before = _snapshot(archive)
    sql = _sql(template, archive)
    r = CliRunner().invoke(main, ["query", "-a", str(archive), sql])
    assert r.exit_code == 2 and r.stdout == "", (sql, r.stdout)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("budgetscope: "), r.stderr
    assert not [p for p in archive.rglob("*") if str(p) in r.stderr and str(p) not in sql], r.stderr
    assert _snapshot(archive) == before


def test_the_plan_check_alone_refuses_a_catalog_scan(archive):
    """The plan is DuckDB's own reading (views and macros expanded): what the parse tree's names would let past
    still shows there as a scan of the catalog."""
    from budgetscope.opener import Archive
    from budgetscope.query_check import _check_plan

    with Archive(archive, sandbox=True, create=False) as a:
        for sql in ("SELECT * FROM pg_settings", "SELECT pg_get_viewdef(1)", "SHOW TABLES"):
            with pytest.raises(QueryError, match="may not read settings or the catalog"):
                _check_plan(a.con, sql)
        _check_plan(a.con, "SELECT count(*) FROM requests JOIN spans USING (trace_id)")


@pytest.mark.parametrize(
    "sql, message",
    [
        (
            "EXPLAIN ANALYZE COPY (SELECT 1) TO 'x.parquet'",
            "the archive is read-only to queries: one SELECT at a time; budgetscope ingest is the way in",
        ),
        ("SELECT 1; SELECT 2", "2 statements: run one SELECT at a time"),
        (
            "FROM 'x.parquet'",
            "queries read only the archive's tables (engine_steps, gpu_samples, ingest_batches, "
            "requests, server_metrics, spans): 'x.parquet' is not one",
        ),
        (
            "SELECT * FROM read_csv('/etc/passwd')",
            "queries may not touch files or settings: read_csv() is not allowed "
            "(tables: engine_steps, gpu_samples, ingest_batches, requests, server_metrics, spans)",
        ),
        (
            "SELECT current_setting('allowed_paths')",
            "queries may not read settings or the catalog: current_setting() is not allowed",
        ),
        ("-- nothing", "no SQL statement to run"),
    ],
)
def test_refusals_say_why_in_one_line(archive, sql, message):
    with pytest.raises(QueryError) as e:
        run_query(archive, sql)
    assert str(e.value) == message


@pytest.mark.parametrize(
    "sql, n",
    [
        ("WITH t AS (SELECT tier FROM requests) SELECT count(*) FROM t", 1),
        ("WITH requests AS (SELECT * FROM requests WHERE tier IS NOT NULL) SELECT count(*) FROM requests", 1),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r", 3),
        ("WITH b AS (SELECT 1 AS x) SELECT * FROM (WITH c AS (SELECT * FROM b) SELECT * FROM c)", 1),
        ('WITH "Mixed" AS (SELECT 1) SELECT * FROM mixed', 1),
        ("SELECT max(COLUMNS(*)) FROM requests", 1),
        ("FROM (SUMMARIZE requests) LIMIT 2", 2),
        ("SELECT count(*) FROM main.spans s JOIN requests r USING (trace_id)", 1),
        ("SELECT * FROM range(3)", 3),
        ("SELECT unnest([1, 2])", 2),
        ("DESCRIBE requests", None),
        ("SUMMARIZE requests", None),
        ("SELECT * FROM engine_steps LIMIT 0", 0),
        ("FROM requests SELECT request_id LIMIT 5", 5),
    ],
)
def test_what_reads_the_archive_still_runs(archive, sql, n):
    res = run_query(archive, sql)
    assert n is None or len(res.rows) == n


def test_max_rows_and_timeout(archive):
    res = run_query(archive, "SELECT * FROM range(1000000)", max_rows=10)
    assert (len(res.rows), res.truncated) == (10, True)
    assert run_query(archive, "SELECT * FROM range(10)", max_rows=10).truncated is False
    with pytest.raises(QueryError, match=r"ran past its 0.2 s limit"):
        run_query(archive, "SELECT count(*) FROM range(100000000000) a", timeout_s=0.2)
    r = CliRunner().invoke(
        main, ["query", "-a", str(archive), "SELECT * FROM range(5)", "--max-rows", "2", "--format", "csv"]
    )
    assert r.exit_code == 0 and r.stdout == "range\n0\n1\n"
    assert r.stderr == "budgetscope: more than 2 rows matched; the first 2 are printed (--max-rows)\n"


def test_postmortem_refuses_to_write_inside_the_archive(archive, tmp_path):
    before = _snapshot(archive)
    for out in (archive / "manifest.json", archive / "report.html", archive / ".." / archive.name / "x.html"):
        r = CliRunner().invoke(main, ["postmortem", "-a", str(archive), "--from", "0", "--to", "1", "--out", str(out)])
        assert r.exit_code == 2 and "is inside the archive" in r.stderr and len(r.stderr.splitlines()) == 1
    assert _snapshot(archive) == before
