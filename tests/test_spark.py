"""The report, `query` and the reading of sharded roots on Spark over the archive's Parquet: the same answers as
DuckDB's from the same SQL (transpiled), and bad input told in one line. (`derive` on Spark:
tests/test_spark_derive.py.)

Spark tests share one local[2] session a worker (conftest.py's `spark`, started once, ~10 s); they skip with one
line where Java or pyspark is missing (tests/spark_support.py). The bad-input tests run the CLI, which must fail
before any JVM starts, so they need neither.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from budgetscope.analysis.budgets import parse_budgets
from budgetscope.analysis.report import build_report
from budgetscope.archive import compaction, directory
from budgetscope.archive import manifest as mf
from budgetscope.archive.shards import shard_path
from budgetscope.ingest import batches, lander
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from budgetscope.spark.dialect import DialectError, bind, to_spark
from budgetscope.synthetic import BUDGETS, SyntheticSpec, write_jsonl
from spark_support import DERIVED_ORDER, SPARK_MISSING, assert_same, derived_the_same, needs_spark

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")


@pytest.fixture(scope="session")
def big_archive(tmp_path_factory) -> Path:
    """100,000 requests in two tiers with client spans, queueing injected into 3% of them."""
    d = tmp_path_factory.mktemp("spark-big")
    traces = d / "t.jsonl"
    write_jsonl(
        traces, SyntheticSpec(num_requests=100_000, tiers=("interactive", "batch"), cause="queue", rate_per_s=200)
    )
    with Archive(d / "a") as a:
        a.ingest(read_batches(traces))
    traces.unlink()
    return d / "a"


@pytest.fixture(scope="session")
def sharded_archive(tmp_path_factory) -> Path:
    """Two shards, each with re-derived requests rows left for the reader to drop (`requests_deletes`)."""
    d = tmp_path_factory.mktemp("spark-shards")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batches, "CHUNK_BYTES", 32 << 10)
        mp.setattr(lander, "DERIVE_EVERY_SPANS", 700)
        mp.setattr(directory, "MEMORY_SPANS", 1)
        mp.setattr(compaction, "plan", lambda *a: [])  # keep every delete for the readers to apply
        for i, shard in enumerate(("gpu-1", "gpu-2")):
            f = d / f"{shard}.jsonl"
            write_jsonl(
                f,
                SyntheticSpec(
                    num_requests=400, tiers=("interactive", "batch"), spans_per_line=64, seed=11 + i, cause="prefill"
                ),
            )
            with Archive(shard_path(d / "fleet", shard)) as a:
                a.ingest(read_batches(f))
    for shard in ("gpu-1", "gpu-2"):
        assert mf.read(d / "fleet" / f"shard={shard}").rows("requests_deletes") > 0
    return d / "fleet"


SAMPLES = Path(__file__).parent.parent / "sample_traces"
SAMPLE_ARCHIVES = sorted(p.name for p in SAMPLES.iterdir() if p.suffix == ".duckdb" or (p / "manifest.json").is_file())
SAMPLE_BUDGETS = {
    "sweep-tiny": "sweep-tiny.toml",
    "h200-1b-served": None,
    "h200-host-bound": None,
    "h200-kv-preemption": None,
}
"""Each sample's budgets file (budgets.toml unless named here; None: its one tier, `default`, has no budgets)."""


@pytest.fixture(scope="module")
def sample_folders(tmp_path_factory) -> dict[str, Path]:
    """Every sample archive as a folder Spark reads: the folder ones as they are, the .duckdb ones converted."""
    from budgetscope.archive.convert import convert

    out, d = {}, tmp_path_factory.mktemp("spark-samples")
    for name in SAMPLE_ARCHIVES:
        out[name] = SAMPLES / name
        if name.endswith(".duckdb"):
            out[name] = d / Path(name).stem
            convert(SAMPLES / name, out[name])
    return out


# -- the dialect (no Spark needed) ------------------------------------------------------------------------------
def test_every_file_of_spark_tests_is_in_the_one_spark_unit():
    """conftest.SPARK_FILES names every test file that takes the `spark` fixture (one JVM a run, not one a worker)."""
    import ast

    from conftest import SPARK_FILES

    tests = Path(__file__).parent
    users = {
        f"tests/{p.name}"
        for p in tests.glob("test_*.py")
        for f in ast.walk(ast.parse(p.read_text()))
        if isinstance(f, ast.FunctionDef) and any(a.arg == "spark" for a in f.args.args)
    }
    assert users and users == set(SPARK_FILES)


def test_parameters_are_bound_as_the_same_values_on_both_engines():
    text, bound = bind("SELECT x FROM t WHERE a = ? AND b >= ? AND c = '?' AND d IN (?, ?)", ["it's", 0.1, 7, None])
    assert text.count("__bs_p") == 4 and "'?'" in text
    assert bound == ["'it\\'s'", "CAST('0.1' AS DOUBLE)", "7", "NULL"]
    with pytest.raises(DialectError):
        bind("SELECT ?", [])
    with pytest.raises(DialectError):
        bind("SELECT 1", [1])


def test_duckdb_idioms_are_carried_over():
    q = to_spark("SELECT quantile_cont(x, [0.5, 0.99]), attributes->>'gen_ai.request.model' FROM requests")
    assert "PERCENTILE(x, ARRAY(CAST(0.5 AS DOUBLE), CAST(0.99 AS DOUBLE)))" in q
    assert "GET_JSON_OBJECT(attributes, '$[\\'gen_ai.request.model\\']')" in q  # one key, dots and all
    q = to_spark("""SELECT json_transform(attributes, '{"a.b": "BIGINT", "c": "DOUBLE[]"}') AS a FROM spans""")
    assert "FROM_JSON(attributes, 'STRUCT<`a.b`: BIGINT, `c`: ARRAY<DOUBLE>>')" in q
    q = to_spark(
        "SELECT len(itl_ms), len(tier), isfinite(e2e_ms), epoch_ns(to_timestamp(arrival_ns / 1e9)) FROM requests"
    )
    assert "SIZE(itl_ms), LENGTH(tier)" in q and "ISFINITE" not in q and "EPOCH_NS" not in q
    q = to_spark("SELECT 1 AS a, 2 AS b UNION ALL BY NAME SELECT 3 AS b, 4 AS a")
    assert "BY NAME" not in q and q.index("`a`, `b` FROM (SELECT 3 AS b") > 0
    q = to_spark("""SELECT json_exists(attributes, '$."http.method"'), json_exists(attributes, '$.rid') FROM spans""")
    assert "NOT GET_JSON_OBJECT(attributes, '$[\\'http.method\\']') IS NULL" in q  # a quoted key: one key
    assert "NOT GET_JSON_OBJECT(attributes, '$.rid') IS NULL" in q
    # a list index that is not a literal: DuckDB counts from 1, Spark's brackets from 0
    q = to_spark("SELECT list_transform(range(1, 3), lambda i: itl_ms[i] - itl_ms[i - 1]), itl_ms[2] FROM requests")
    assert "TRY_ELEMENT_AT(itl_ms, i) - TRY_ELEMENT_AT(itl_ms, i - 1)" in q and "itl_ms[1]" in q
    # a CTE's column list names its columns (a recursive CTE's anchor may repeat one), renamed or not
    q = to_spark("WITH RECURSIVE t(a, b) AS (SELECT x, x FROM u UNION ALL SELECT a, b FROM t) SELECT a FROM t")
    assert "t__bs0(a, b) AS (" in q, q


# -- Spark ------------------------------------------------------------------------------------------------------
@needs_spark
@pytest.mark.slow
def test_report_on_spark_equals_duckdb_over_100k_requests(spark, big_archive):
    from budgetscope.spark.archive import SparkArchive

    budgets = parse_budgets(BUDGETS)
    with Archive(big_archive, read_only=True) as a:
        want = build_report(a.con, budgets)
    with SparkArchive(big_archive, spark) as s:
        got = build_report(s.con, budgets)
        # exact quantiles by selection (spark/quantiles.py), not approximations; three scans for both tiers
        assert not any("APPROX" in q or "PERCENTILE" in q for q in s.con.statements)
        assert sum("EXPLODE" in q for q in s.con.statements) == 2  # the histogram, the windows
    assert sum(t["requests"] for t in want["tiers"]) >= 100_000
    assert [t["name"] for t in got["tiers"]] == ["interactive", "batch"]
    assert want["tiers"][0]["attribution"]["ttft"]["dominant"] == "queue"  # the injected cause
    assert [t["verdict"] for t in got["tiers"]] == [t["verdict"] for t in want["tiers"]]
    assert_same(want, got)


QUANTILE_SQL = [
    "SELECT quantile_cont(x, [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0]), count(x), quantile_cont(y, 0.37), count(*) FROM q",
    (
        "SELECT quantile_cont(nullif(y, 'NaN'::DOUBLE), [0.5, 0.99]) FILTER (WHERE g = 1), min(x), "
        "quantile_cont(x, 0.25) FROM q WHERE g < 2"
    ),
    "SELECT quantile_cont(x, [0.5]), count(x) FROM q WHERE g = 7",  # no rows
]


def _quantile_table(con_or_spark, rows):
    """The table `q` (x, y DOUBLE; g INT) on DuckDB (a connection) or Spark (a session)."""
    if hasattr(con_or_spark, "createDataFrame"):
        con_or_spark.createDataFrame(rows, "x DOUBLE, y DOUBLE, g INT").createOrReplaceTempView("q")
    else:
        con_or_spark.execute("CREATE TABLE q (x DOUBLE, y DOUBLE, g INTEGER)")
        con_or_spark.executemany("INSERT INTO q VALUES (?, ?, ?)", rows)


def _quantile_rows() -> list[tuple]:
    """Ties (a block of one value, many zeros, −0.0), negatives, tiny and huge values, NULLs, NaN and ±Infinity."""
    import random

    rnd = random.Random(5)
    rows = [
        (rnd.lognormvariate(3, 2) * rnd.choice([1, 1, 1, -1]), rnd.gauss(0, 1e-300) if i % 7 else float("nan"), i % 3)
        for i in range(6000)
    ]
    rows += [(0.0, 0.0, 0)] * 700 + [(-0.0, 5.5, 1)] * 3 + [(12.25, 12.25, 1)] * 900 + [(None, None, 2)] * 50
    rows += [(float("inf"), float("-inf"), 0), (1e300, float("inf"), 1), (5e-324, None, 1)]
    return rows


def _same_values(a, b) -> bool:
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same_values(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


@needs_spark
@pytest.mark.parametrize("collect_max,octave", [(200_000, 1024), (0, 1)], ids=["collected", "split-then-collected"])
def test_quantiles_on_spark_are_duckdbs_to_the_bit(spark, collect_max, octave, monkeypatch):
    """quantile_cont on Spark by selection (spark/quantiles.py), not `percentile`: DuckDB's figures, bit for bit,
    over ties, zeros, NaN and infinities, with FILTER, and none; a window too large to collect is split first."""
    import duckdb

    from budgetscope.spark import quantiles
    from budgetscope.spark.archive import SparkConnection

    monkeypatch.setattr(quantiles, "COLLECT_MAX", collect_max)  # 0: every window is split, MAX_PASSES times
    monkeypatch.setattr(quantiles, "LOG_BUCKETS", octave)
    rows = _quantile_rows()
    con = duckdb.connect()
    _quantile_table(con, rows)
    _quantile_table(spark, rows)
    sc = SparkConnection(spark)
    for sql in QUANTILE_SQL:
        want = con.execute(sql).fetchall()
        got = sc.execute(sql).fetchall()
        assert _same_values(want, got), (sql, want, got)
    assert not any("percentile" in t.lower() for t in sc.statements), "a statement fell back to percentile"


@needs_spark
def test_quantiles_out_of_order_buckets_fall_back_to_percentile(spark, monkeypatch):
    """A bucket function that is not monotone is caught (ranges out of order) and the statement runs with
    Spark's exact `percentile`: the same figures to 1e-9, never wrong ones."""
    import duckdb

    from budgetscope.spark import quantiles
    from budgetscope.spark.archive import SparkConnection

    monkeypatch.setattr(quantiles, "log_bucket", lambda v: f"-CAST(floor({v}) AS BIGINT)")
    rows = [(float(i % 97) + i / 1e4, 1.0, 0) for i in range(3000)]
    con = duckdb.connect()
    _quantile_table(con, rows)
    _quantile_table(spark, rows)
    sc = SparkConnection(spark)
    sql = "SELECT quantile_cont(x, [0.5, 0.9]), count(x) FROM q"
    assert_same(list(con.execute(sql).fetchall()[0]), list(sc.execute(sql).fetchall()[0]))
    assert "percentile" in sc.statements[-1].lower()


@needs_spark
@pytest.mark.parametrize("name", SAMPLE_ARCHIVES)
def test_every_sample_archive_reports_on_spark_as_on_duckdb(spark, sample_folders, name):
    """GPU samples (h100-*, h200-*), server metrics (sweep-tiny) and the .duckdb recordings alike: the report
    DuckDB gives over the archive as stored is the report Spark gives over its folder."""
    from budgetscope.analysis.budgets import load_budgets
    from budgetscope.spark.archive import SparkArchive

    file = SAMPLE_BUDGETS.get(name, "budgets.toml")
    budgets = load_budgets(str(SAMPLES / file)) if file else None
    with Archive(SAMPLES / name, read_only=True) as a:
        want = build_report(a.con, budgets)
        (gpu,) = a.con.execute("SELECT count(*) > 0 FROM gpu_samples").fetchone()
    with SparkArchive(sample_folders[name], spark) as s:
        got = build_report(s.con, budgets)
    assert want["tiers"] and all(t["requests"] > 0 for t in want["tiers"])
    assert gpu == name.startswith(("h100-", "h200-"))  # the GPU recordings have samples: the ISFINITE path runs
    assert_same(want, got)


@needs_spark
@pytest.mark.parametrize(
    "window,inline",
    [(False, True), (True, True), (False, False)],
    ids=["whole", "one-hour-window", "deletes-joined"],
)
def test_sharded_archive_with_deletes_on_spark_equals_duckdb(spark, sharded_archive, window, inline, monkeypatch):
    """Re-derived rows dropped as DuckDB drops them: by a filter of literals (few deletes), or by a join (more than
    DEAD_INLINE)."""
    import budgetscope.spark.archive as spark_archive
    from budgetscope.spark.archive import SparkArchive

    if not inline:
        monkeypatch.setattr(spark_archive, "DEAD_INLINE", 0)

    since = until = None
    if window:
        since = SyntheticSpec().start_ns
        until = since + 4 * 1_000_000_000
    with Archive(sharded_archive, read_only=True, since_ns=since, until_ns=until) as a:
        want_rows = a.con.execute("SELECT * FROM requests ORDER BY trace_id, server_span_id").fetchall()
        want = build_report(a.con, None, since, until)
    with SparkArchive(sharded_archive, spark, since_ns=since, until_ns=until) as s:
        got_rows = s.con.execute("SELECT * FROM requests ORDER BY trace_id, server_span_id").fetchall()
        got = build_report(s.con, None, since, until)
    assert len(got_rows) == (800 if not window else len(want_rows)) and len(want_rows) > 0
    assert_same(want_rows, got_rows, "requests")
    assert_same(want, got)


@needs_spark
def test_status_coverage_and_unclaimed_spans_on_spark_equal_duckdb(spark, tmp_path):
    """A tier half of whose requests failed (BROKEN), one whose spans carry no latency (UNKNOWN), client spans on
    some requests, and spans no adapter claims: the new report fields are the same on both engines."""
    from budgetscope.spark.archive import SparkArchive
    from otlp_wire import MS, T0, export, jsonl, native_request, span, span_id, trace_id

    docs = [
        export(
            native_request(
                arrival=T0 + i * 10 * MS,
                client=(1, 1) if i % 3 else None,
                extra_root={"budgetscope.outcome": "error" if i % 2 else "ok"},
            )[1]
        )
        for i in range(40)
    ]
    docs += [
        export(
            [span(trace_id(), span_id(), "llm_request", T0 + i * MS, T0 + i * MS + 50 * MS, kind=2)],
            service="vllm",
            scope="vllm.llm_engine",
        )
        for i in range(12)
    ]
    docs += [
        export(
            [span(trace_id(), span_id(), f" Req {i:08x}", T0 + i * MS, T0 + i * MS + 9 * MS, kind=2)],
            service="sglang",
            scope="sglang",
        )
        for i in range(7)
    ]
    f = tmp_path / "t.jsonl"
    f.write_text(jsonl(*docs))
    with Archive(tmp_path / "a") as a:
        a.ingest(read_batches(f))
    budgets = parse_budgets("[tiers.interactive]\nttft_ms = 5000\n[tiers.default]\ne2e_ms = 5000\n")
    with Archive(tmp_path / "a", read_only=True) as a:
        want = build_report(a.con, budgets)
    with SparkArchive(tmp_path / "a", spark) as s:
        got = build_report(s.con, budgets)
    assert [t["status"] for t in want["tiers"]] == ["BROKEN", "UNKNOWN"] and want["status"] == "BROKEN"
    assert want["coverage"] == {"requests": 52, "with_server_spans": 52, "with_client_spans": 26, "with_both": 26}
    assert want["unclaimed_spans"]["top"] == [{"name": " Req <id>", "service_name": "sglang", "spans": 7}]


@pytest.mark.slow
def test_split_traces_are_joined_on_spark_as_on_duckdb(spark, tmp_path):
    """Client spans on one shard, stage spans on another: Spark's report over the root is the report of the same
    spans in one archive, and it counts the same split traces."""
    from budgetscope.spark.archive import SparkArchive
    from test_shards import build_split_fleet

    root, single, split = build_split_fleet(tmp_path)
    budgets = parse_budgets(BUDGETS)
    with Archive(single, read_only=True) as a:
        want = build_report(a.con, budgets)
    with SparkArchive(root, spark) as s:
        got = build_report(s.con, budgets)
        assert s.split_traces == split
    assert_same(want, got)


@needs_spark
def test_query_on_spark_takes_duckdb_sql(spark, sharded_archive):
    from budgetscope.query import run_query
    from budgetscope.spark.commands import run_query as run_on_spark

    sql = (
        "SELECT tier, count(*) AS n, quantile_cont(queue_ms, 0.99) AS q99, "
        "max(CAST(attributes->>'gen_ai.usage.output_tokens' AS BIGINT)) AS most "
        "FROM requests JOIN spans ON spans.trace_id = requests.trace_id AND spans.name = 'llm.request' "
        "GROUP BY 1 ORDER BY 1"
    )
    want, got = run_query(sharded_archive, sql), run_on_spark(sharded_archive, sql)
    assert got.columns == want.columns == ["tier", "n", "q99", "most"]
    assert_same(want.rows, got.rows, "rows")


@needs_spark
def test_query_on_spark_carries_duckdb_functions_over(spark, sharded_archive, capfd):
    """epoch_ns, len of a list, to_timestamp (its time zone kept); a function Spark lacks: one line of ours."""
    from budgetscope.query import run_query
    from budgetscope.spark.commands import run_query as run_on_spark
    from budgetscope.spark.session import SparkError

    sql = (
        "SELECT trace_id, len(coalesce(itl_ms, [0.5, 1.5])) AS n, len(tier) AS chars, "
        "epoch_ns(to_timestamp(arrival_ns / 1e9)) AS ns, "
        "to_timestamp(arrival_ns / 1e9) AS at, epoch(to_timestamp(arrival_ns / 1e9)) AS s "
        "FROM requests ORDER BY trace_id LIMIT 50"
    )
    want, got = run_query(sharded_archive, sql), run_on_spark(sharded_archive, sql)
    assert got.columns == want.columns
    assert any(r[1] for r in want.rows) and all(r[4].utcoffset() is not None for r in got.rows)
    assert_same(want.rows, got.rows, "rows")
    capfd.readouterr()
    with pytest.raises(SparkError) as e:
        run_on_spark(sharded_archive, "SELECT jaccard(tier, 'batch') FROM requests")
    assert str(e.value).startswith("Spark: jaccard() cannot run on Spark") and "\n" not in str(e.value)
    assert capfd.readouterr().err == ""  # no log line of Spark's before ours


@needs_spark
def test_a_spark_read_that_outlives_its_commit_says_so(spark, tmp_path, monkeypatch):
    """A query whose segments a writer's expiry deleted once readers' grace had passed: one line, as on DuckDB."""
    import contextlib

    from budgetscope.archive.reader import STALE
    from budgetscope.spark import commands
    from test_reader_stale import NOW, T0, _drop_old_hours, _fill

    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    real = commands.spark_archive

    @contextlib.contextmanager
    def opened_then_expired(*args, **kw):
        with real(*args, **kw) as a:
            _drop_old_hours(root, monkeypatch)
            yield a

    monkeypatch.setattr(commands, "spark_archive", opened_then_expired)
    with pytest.raises(commands.SparkError) as e:
        commands.run_query(root, "SELECT count(*) FROM requests")
    assert str(e.value) == f"{root}: {STALE}"
    monkeypatch.setattr(commands, "spark_archive", real)
    assert commands.run_query(root, "SELECT count(*) FROM requests").rows == [(1,)]


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM requests",
        "SELECT * FROM parquet.`/etc/hostname`",
        "SELECT reflect('java.lang.System', 'exit', 1)",
        "SELECT * FROM read_parquet('/etc/hostname')",
        "SELECT * FROM some_table",
    ],
)
def test_query_on_spark_reads_only_the_archive(sql):
    from budgetscope.spark.archive import VIEWS
    from budgetscope.spark.commands import check_read_only
    from budgetscope.spark.session import SparkError

    with pytest.raises(SparkError) as e:
        check_read_only(sql, VIEWS)
    assert "\n" not in str(e.value)


@needs_spark
def test_derive_on_spark_gives_the_rows_of_duckdb(spark, sharded_archive, tmp_path):
    _, got = derived_the_same(sharded_archive, tmp_path, 800)
    # and what the writer derived at ingest (re-derived rows dropped): the same requests
    with Archive(sharded_archive, read_only=True) as a:
        stored = a.con.execute(f"SELECT * FROM requests {DERIVED_ORDER}").fetchall()
    assert_same(stored, got, "stored")


def _small(tmp_path: Path) -> Path:
    f = tmp_path / "t.jsonl"
    write_jsonl(f, SyntheticSpec(num_requests=200, tiers=("interactive", "batch")))
    with Archive(tmp_path / "a") as a:
        a.ingest(read_batches(f))
    f.unlink()
    return tmp_path / "a"


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _cli(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "budgetscope.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def _segment(root: Path, table: str) -> Path:
    return root / next(s.path for s in mf.read(root).segments if s.table == table)


def _torn(root: Path) -> str:
    p = _segment(root, "requests")
    with open(p, "r+b") as f:
        f.truncate(p.stat().st_size // 2)
    return "not a whole Parquet file"


def _foreign(root: Path) -> str:
    _segment(root, "spans").write_text("trace_id,span_id\nabc,def\n")
    return "not a whole Parquet file"


def _missing_partition(root: Path) -> str:
    shutil.rmtree(_segment(root, "requests").parent)
    return "lists a segment that is not there"


@pytest.mark.parametrize("engine", ["spark", "duckdb"])
@pytest.mark.parametrize("spoil", [_torn, _foreign, _missing_partition], ids=["torn", "foreign", "missing-partition"])
def test_a_spoiled_archive_is_one_line_and_exit_2(tmp_path, spoil, engine):
    root = _small(tmp_path)
    said = spoil(root)
    before, cwd = _tree(root), tmp_path / "cwd"
    cwd.mkdir()
    r = _cli(["report", "-a", str(root), "--engine", engine, "--format", "json"], cwd)
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert said in r.stderr
    assert _tree(root) == before and not any(cwd.iterdir())


def _fake_java(tmp_path: Path) -> dict:
    java = tmp_path / "fakejdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'Error: this is not a JVM' >&2\nexit 1\n")
    java.chmod(0o755)
    return {"JAVA_HOME": str(tmp_path / "fakejdk")}


def test_a_local_spark_gets_memory_and_the_throughput_collector(monkeypatch):
    from budgetscope.spark.session import LOCAL_JAVA_OPTIONS, local_conf

    monkeypatch.delenv("SPARK_DRIVER_MEMORY", raising=False)
    monkeypatch.delenv("BUDGETSCOPE_SPARK_JAVA_OPTIONS", raising=False)
    assert local_conf("local[2]") == {"spark.driver.memory": "4g", "spark.driver.extraJavaOptions": LOCAL_JAVA_OPTIONS}
    assert local_conf("spark://h:7077") == {}  # a cluster keeps its own settings
    monkeypatch.setenv("SPARK_DRIVER_MEMORY", "14g")
    monkeypatch.setenv("BUDGETSCOPE_SPARK_JAVA_OPTIONS", "")
    assert local_conf("local[4]") == {}
    monkeypatch.setenv("BUDGETSCOPE_SPARK_JAVA_OPTIONS", "-Xss4m")
    assert local_conf("local[4]") == {"spark.driver.extraJavaOptions": "-Xss4m"}
    assert local_conf("local[4]", quick_jit=True) == {"spark.driver.extraJavaOptions": "-Xss4m"}  # replaced too


def test_report_and_query_compile_quickly_and_derive_fully(monkeypatch, tmp_path):
    """`report` and `query` start a local JVM with its quick compiler only, `derive` with the optimizing one too
    (session.QUICK_JIT); a cluster's master keeps its own options."""
    from budgetscope.commands.options import open_reader
    from budgetscope.spark import commands, derive
    from budgetscope.spark.session import LOCAL_JAVA_OPTIONS, QUICK_JIT, SparkError, local_conf

    monkeypatch.delenv("BUDGETSCOPE_SPARK_JAVA_OPTIONS", raising=False)
    java = local_conf("local[2]", quick_jit=True)["spark.driver.extraJavaOptions"]
    assert java.split() == [*LOCAL_JAVA_OPTIONS.split(), QUICK_JIT]
    assert local_conf("spark://h:7077", quick_jit=True) == {}
    asked = []

    def fake_session(master=None, app="budgetscope", quick_jit=False):  # a fake: records what a command asked
        asked.append(quick_jit)
        raise SparkError("fake: no JVM started")

    monkeypatch.setattr(commands, "session", fake_session)
    monkeypatch.setattr(commands, "active_session", lambda: None)
    root = _small(tmp_path)
    for run in (
        lambda: open_reader(str(root), "spark").__enter__(),
        lambda: commands.run_query(root, "SELECT count(*) FROM requests"),
        lambda: derive.derive_spark(root, tmp_path / "out"),
    ):
        with pytest.raises(SparkError, match="fake"):
            run()
    assert asked == [True, True, False]


@needs_spark
def test_the_local_session_runs_with_the_throughput_collector(spark):
    import os

    if "BUDGETSCOPE_SPARK_JAVA_OPTIONS" in os.environ:
        pytest.skip("BUDGETSCOPE_SPARK_JAVA_OPTIONS set here")
    assert "-XX:+UseParallelGC" in spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    jvm = spark.sparkContext._jvm
    names = [b.getName() for b in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()]
    assert any("PS " in n or "Parallel" in n for n in names), names  # the JVM really runs it


@pytest.mark.parametrize("case", ["no-master", "bad-master", "java-home-nowhere", "java-that-fails", "single-file"])
def test_a_spark_that_cannot_start_is_one_line_and_exit_2(tmp_path, case):
    if case == "java-that-fails" and SPARK_MISSING and "pyspark" in SPARK_MISSING:
        pytest.skip(SPARK_MISSING)
    root = _small(tmp_path)
    args, env, said = ["report", "-a", str(root), "--engine", "spark"], {}, ""
    if case == "no-master":
        args += ["--spark-master", "spark://127.0.0.1:1"]
        said = "does not answer"
    elif case == "bad-master":
        args += ["--spark-master", "nonsense"]
        said = "--spark-master"
    elif case == "java-home-nowhere":
        env, said = {"JAVA_HOME": str(tmp_path / "nowhere")}, "JAVA_HOME"
    elif case == "java-that-fails":
        env, said = _fake_java(tmp_path), "Spark cannot start"
    else:
        with Archive(tmp_path / "old.duckdb"):
            pass
        args[2] = str(tmp_path / "old.duckdb")
        said = "spark reads folder archives; convert first with budgetscope convert"
    before, cwd = _tree(tmp_path), tmp_path / "cwd"
    cwd.mkdir()
    r = _cli(args, cwd, env)
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert said in r.stderr
    assert {k: v for k, v in _tree(tmp_path).items() if not k.startswith("cwd")} == before
    assert not any(cwd.iterdir())


@needs_spark
@pytest.mark.slow
def test_report_cli_on_spark_prints_the_duckdb_json(tmp_path):
    """The whole command, its own JVM and all (one run: it costs a JVM start)."""
    root = _small(tmp_path)
    (tmp_path / "b.toml").write_text(BUDGETS)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    runs = {
        e: _cli(["report", "-a", str(root), "-b", str(tmp_path / "b.toml"), "--format", "json", "--engine", e], cwd)
        for e in ("duckdb", "spark")
    }
    assert runs["spark"].returncode == runs["duckdb"].returncode != 2, runs["spark"].stderr
    assert runs["spark"].stderr == ""
    assert_same(json.loads(runs["duckdb"].stdout), json.loads(runs["spark"].stdout))
    assert not any(cwd.iterdir())


@pytest.fixture
def gateway_archive(tmp_path) -> Path:
    """The GenAI-client and llm-d conformance cases in one archive: GenAI spans over httpx, an llm-d P/D trace, one
    without P/D, sampled ones, and a leg that lost its trace context."""
    root = Path(__file__).parent / "conformance"
    f = tmp_path / "t.jsonl"
    f.write_text(
        "".join(
            p.read_text() for p in sorted([*root.glob("genai-client/*/spans.jsonl"), *root.glob("llm-d/*/spans.jsonl")])
        )
    )
    with Archive(tmp_path / "a") as a:
        a.ingest(read_batches(f))
    return tmp_path / "a"


@pytest.mark.slow
@needs_spark
def test_genai_clients_and_llmd_report_the_same_on_spark(spark, gateway_archive):
    """The report's llm-d figures (sampling, the gateway and KV hand-off stages, the legs that lost their trace
    context) on both engines (their rows: `test_every_conformance_case_derives_the_same_on_spark`)."""
    from budgetscope.spark.archive import SparkArchive

    with Archive(gateway_archive, read_only=True) as a:
        (end,) = a.con.execute("SELECT max(end_ns) FROM requests").fetchone()
        live = {"last_commit_ns": end + 10**9, "now_ns": end + 2 * 10**9}  # as if the archive were being written
        want = build_report(a.con, **live)
    with SparkArchive(gateway_archive, spark) as s:
        got = build_report(s.con, **live)
    assert want["llmd_orphans"] == got["llmd_orphans"] and want["llmd_orphans"]["llm_request_roots"] == 1
    assert want["in_flight"] == got["in_flight"] and want["in_flight"]["without_client_span"] == 2
    (w,), (g,) = want["tiers"], got["tiers"]
    assert w["sampling"] == g["sampling"] == {"requests": {"llmd": 6}, "how": w["sampling"]["how"]}
    assert set(w["stages"]) == set(g["stages"]) >= {"gateway", "kv_handoff"}
    assert w["attribution"]["e2e"]["shares"] == pytest.approx(g["attribution"]["e2e"]["shares"], rel=1e-9)


def test_a_java_error_is_told_by_its_java_line_not_py4j_s_object_name():
    from budgetscope.spark.session import one_line

    e = RuntimeError(
        "An error occurred while calling o12483.parquet.\n: java.lang.OutOfMemoryError: GC overhead limit exceeded\n"
        "\tat org.apache.spark.sql.catalyst.analysis.DeduplicateRelations$.deduplicate(x.scala:241)"
    )
    assert one_line(e) == "java.lang.OutOfMemoryError: GC overhead limit exceeded"
