"""`budgetscope derive` on Spark gives DuckDB's rows: every server's conformance cases in one archive, vLLM
journey tracing, replicas and HTTP clients, imported client records, and the held recursive CTEs. (The report,
`query` and the archive's failures on Spark: tests/test_spark.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budgetscope.analysis.report import build_report
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from spark_support import assert_same, derived_the_same, needs_spark

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")


def test_the_first_step_derives_each_adapter_on_its_own_and_llmd_with_vllm():
    """Spark's first step runs one statement a span adapter (a union of all of them compiled twice as long), but
    llm-d's with vLLM's, whose legs it reads; sources without a span adapter get none, and with no adapter at all
    one empty statement gives the columns."""
    from budgetscope.spark.requests_frame import adapter_groups

    assert adapter_groups({"client", "vllm", "llmd", "tgi", "native"}) == [{"vllm", "llmd"}, {"native"}, {"tgi"}]
    assert adapter_groups({"llmd", "triton", "sglang"}) == [{"llmd"}, {"sglang"}, {"triton"}]
    assert adapter_groups({"client"}) == adapter_groups(set()) == [set()]


@needs_spark
def test_a_recursive_cte_read_twice_runs_once_and_gives_the_same_rows(spark):
    """`hold_recursion` runs a statement's recursive CTE on its own and the statement reads its rows from a view;
    the rows are those of the statement as written, the view goes with `drop_held_views`."""
    from budgetscope.spark.requests_frame import HELD_PREFIX, drop_held_views, hold_recursion

    sql = (
        "WITH RECURSIVE e AS (SELECT * FROM VALUES (1, 2), (2, 3), (3, 4), (10, 11) AS e(a, b)), "
        "d AS (SELECT a AS root, b FROM e WHERE a IN (1, 10) UNION ALL SELECT d.root, e.b FROM d JOIN e ON e.a = d.b), "
        "n AS (SELECT root, count(*) AS k FROM d GROUP BY root) "
        "SELECT d.root, d.b, n.k, (SELECT max(b) FROM d AS x WHERE x.root = d.root) AS top "
        "FROM d JOIN n ON n.root = d.root"
    )
    held: list = []
    rewritten = hold_recursion(spark, sql, held)
    assert len(held) == 1 and f"{HELD_PREFIX}d" in rewritten and " d AS (" not in rewritten, rewritten
    want = sorted(map(tuple, spark.sql(sql).collect()))
    assert want == [(1, 2, 3, 4), (1, 3, 3, 4), (1, 4, 3, 4), (10, 11, 1, 11)]
    assert sorted(map(tuple, spark.sql(rewritten).collect())) == want
    assert hold_recursion(spark, "SELECT 1 AS x", held) == "SELECT 1 AS x" and len(held) == 1
    drop_held_views(spark)
    assert not [t.name for t in spark.catalog.listTables() if t.name.startswith(HELD_PREFIX)]


CONFORMANCE = Path(__file__).parent / "conformance"


def conformance_archive(tmp_path: Path) -> tuple[Path, int]:
    """(an archive of every OTLP conformance case, the requests their expected.json list). Each case's trace ids
    are replaced by ids of its own: cases written from one upstream example share a trace id (W3C's), and would
    otherwise join each other's spans."""
    import hashlib

    texts, expected = [], 0
    for case in sorted(p.parent for p in CONFORMANCE.glob("*/*/spans.jsonl")):
        text = (case / "spans.jsonl").read_text()
        expected += len(json.loads((case / "expected.json").read_text())["requests"])
        ids = {
            s["traceId"]
            for line in text.splitlines()
            for rs in json.loads(line)["resourceSpans"]
            for ss in rs["scopeSpans"]
            for s in ss["spans"]
        }
        for t in ids:
            text = text.replace(t, hashlib.sha256(f"{case.relative_to(CONFORMANCE)}/{t}".encode()).hexdigest()[:32])
        texts.append(text)
    (tmp_path / "t.jsonl").write_text("".join(texts))
    with Archive(tmp_path / "a") as a:
        a.ingest(read_batches(tmp_path / "t.jsonl"))
    return tmp_path / "a", expected


@needs_spark
@pytest.mark.slow
def test_every_conformance_case_derives_the_same_on_spark(spark, tmp_path):
    """Every server's conformance cases (vLLM classic, journey and PD, SGLang levels 1-3 and PD, TGI, Triton's
    OpenTelemetry mode, llm-d, GenAI and HTTP clients) in one archive, so that every adapter runs in one
    derivation as in a mixed fleet's: the same rows on both engines, every column, one per expected request; and
    the same report over them (SGLang's inter-token gaps, Triton's streaming tail, the unread events...)."""
    from budgetscope.spark.archive import SparkArchive

    archive, expected = conformance_archive(tmp_path)
    with Archive(archive, read_only=True) as a:
        sources = {s for (s,) in a.con.execute("SELECT DISTINCT source FROM spans").fetchall()}
        want = build_report(a.con)
    assert sources >= {"vllm", "sglang", "tgi", "triton", "llmd", "client"}
    derived_the_same(archive, tmp_path, expected)
    with SparkArchive(archive, spark) as s:
        assert_same(want, build_report(s.con))


@pytest.fixture
def replicas_archive(tmp_path) -> Path:
    """Four replicas of one service, and the HTTP-client conformance case (httpx spans over vLLM)."""
    from test_replicas import fleet_jsonl

    case = Path(__file__).parent / "conformance" / "otel-http-client" / "httpx-to-vllm" / "spans.jsonl"
    f = tmp_path / "t.jsonl"
    f.write_text(fleet_jsonl() + case.read_text())
    with Archive(tmp_path / "a") as a:
        a.ingest(read_batches(f))
    return tmp_path / "a"


@needs_spark
def test_replica_columns_and_http_client_spans_derive_the_same_on_spark(spark, replicas_archive, tmp_path):
    con, _ = derived_the_same(replicas_archive, tmp_path, 102)
    (replicas, clients, network) = con.execute(f"""SELECT count(DISTINCT service_instance_id),
        count_if(has_client_span), sum(network_ms) FROM read_parquet('{tmp_path / "spark"}/*.parquet')""").fetchone()
    assert (replicas, clients) == (5, 2) and network == pytest.approx(10.0)  # replica-0..3, vllm-0


@needs_spark
def test_imported_records_join_their_server_rows_on_spark_as_on_duckdb(spark, tmp_path):
    # AIPerf's records imported before the engine's spans: joined across traces by request id, on both engines
    import duckdb
    from click.testing import CliRunner

    from budgetscope.cli import main
    from budgetscope.spark.derive import derive_duckdb, derive_spark
    from test_import_joins import _unpacked

    files = _unpacked(tmp_path)
    a = tmp_path / "a"
    for args in (["import", "--from", "aiperf", str(files["aiperf"])], ["ingest", str(files["spans"])]):
        assert CliRunner().invoke(main, [*args, "-a", str(a)]).exit_code == 0
    assert derive_duckdb(a, tmp_path / "duck") == derive_spark(a, tmp_path / "spark") == 80
    con = duckdb.connect()
    order = "ORDER BY trace_id, server_span_id"
    want = con.execute(f"SELECT * FROM read_parquet('{tmp_path / 'duck'}/*.parquet') {order}").fetchall()
    got = con.execute(f"SELECT * FROM read_parquet('{tmp_path / 'spark'}/*.parquet') {order}").fetchall()
    assert_same(want, got, "derived")
    assert con.execute(
        f"""SELECT count(client_span_id), count(network_ms), count_if(client_trace_id <> trace_id)
        FROM read_parquet('{tmp_path / "spark"}/*.parquet')"""
    ).fetchone() == (40, 40, 40)


@needs_spark
def test_spark_reads_requests_segments_written_before_the_replica_columns(spark, replicas_archive, tmp_path):
    from budgetscope.spark.archive import SparkArchive
    from test_replicas import _make_old, fleet_jsonl

    _make_old(replicas_archive)
    more = tmp_path / "more.jsonl"
    more.write_text(fleet_jsonl())  # 100 new requests: newer segments beside the old ones, in the same hour
    with Archive(replicas_archive) as a:
        a.ingest(read_batches(more))
    sql = "SELECT service_instance_id, count(*) FROM requests GROUP BY 1 ORDER BY 1 NULLS LAST"
    with Archive(replicas_archive, read_only=True) as a:
        want = a.con.execute(sql).fetchall()
        want_report = build_report(a.con, None)
    with SparkArchive(replicas_archive, spark) as s:
        got = s.con.execute(sql).fetchall()
        got_report = build_report(s.con, None)
    assert want == [*((f"replica-{i}", 25) for i in range(4)), (None, 102)] and [tuple(r) for r in got] == want
    assert_same(want_report, got_report)


# -- bad input: one line, exit 2, nothing written (no JVM needed) ----------------------------------------------------


@pytest.mark.slow
@needs_spark
@pytest.mark.parametrize("client", [False, True])
def test_vllm_journey_derives_the_same_on_spark(spark, tmp_path, client):
    """vLLM journey tracing (its events parsed once for the adapter and the unread-events check, preemptions, a
    failure), with and without client spans (without: the derivation skips its client side), and an event no
    adapter reads: the same rows on both engines."""
    from server_traces import draw, jsonl, vllm_journey

    mix = draw(f"spark journey {client}", "queue", 16, failed_share=0.1)
    docs = [d for r in mix.requests for d in vllm_journey(r, client)]
    core = next(
        s
        for d in docs
        for rs in d["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
        if s["name"] == "llm_core"
    )
    core.setdefault("events", []).append({"timeUnixNano": core["startTimeUnixNano"], "name": "journey.MIGRATED"})
    (tmp_path / "t.jsonl").write_text(jsonl(docs))
    with Archive(tmp_path / "a") as a:
        a.ingest(read_batches(tmp_path / "t.jsonl"))
    con, _ = derived_the_same(tmp_path / "a", tmp_path, 16)
    unread = con.execute(f"SELECT unread_events FROM read_parquet('{tmp_path / 'spark'}/*.parquet')").fetchall()
    assert sorted(u for (u,) in unread if u) == [["journey.MIGRATED"]]
