"""The query sandbox tried as an attacker would: every way of writing, loading or reading outside the archive's
tables through `budgetscope query` (and `run_query`, which the dashboard's SQL page calls) is refused in one line,
and the archive is byte-identical afterwards. Several attempts name a committed segment's own path, the file a
reader is allowed to read and that DuckDB would also let a statement write."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from budgetscope.query import QueryError, run_query

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
]
# each writing statement under EXPLAIN and EXPLAIN ANALYZE: the first hole was `EXPLAIN ANALYZE COPY … TO segment`
WRITES += [f"{e} {w}" for e in ("EXPLAIN", "EXPLAIN ANALYZE") for w in WRITES[:13]]


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive
    from budgetscope.synthetic import SyntheticSpec, write_jsonl

    root = tmp_path_factory.mktemp("sandbox")
    write_jsonl(root / "t.jsonl", SyntheticSpec(num_requests=30))
    with Archive(root / "archive") as a:
        a.ingest(read_batches(root / "t.jsonl"))
    return root / "archive"


def _snapshot(root: Path) -> dict:
    return {
        str(p.relative_to(root.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.parent.rglob("*"))
        if p.is_file()
    }


def _sql(template: str, archive: Path) -> str:
    seg = next(archive.glob("spans/**/*.parquet"))
    return template.format(seg=seg, root=archive)


@pytest.mark.parametrize("template", WRITES)
def test_every_write_attempt_is_refused_and_the_archive_is_unchanged(archive, template):
    before = _snapshot(archive)
    sql = _sql(template, archive)
    r = CliRunner().invoke(main, ["query", "-a", str(archive), sql])
    assert r.exit_code == 2 and r.stdout == "", (sql, r.stdout)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("budgetscope: "), r.stderr
    # no path of the sandbox disclosed that the query did not name itself
    assert not [p for p in archive.rglob("*") if str(p) in r.stderr and str(p) not in sql], r.stderr
    with pytest.raises(QueryError):  # the dashboard's SQL page calls this
        run_query(archive, sql)
    assert _snapshot(archive) == before


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
        ("SELECT current_setting('allowed_paths')", "queries may not read settings: current_setting() is not allowed"),
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
