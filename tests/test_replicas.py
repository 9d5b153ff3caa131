"""Replicas of one service: the server span's resource (`service.instance.id`, `host.name`, `k8s.pod.name`) kept on
every request row, so the contrast names a slow replica; and archives written before those columns still read.
"""

from __future__ import annotations

import json

import duckdb
import pytest
from click.testing import CliRunner

from budgetscope.archive import manifest as mf
from budgetscope.archive.compaction import merge_sql
from budgetscope.cli import main
from budgetscope.opener import Archive
from budgetscope.schema import REPLICA_COLUMNS
from conftest import rows
from otlp_wire import MS, T0, attrs, export, jsonl, native_request, span, span_id

REPLICAS = 4
PER_REPLICA = 25
SLOW = 3  # replica-3 decodes 2.5x slower: 1000 ms against 400 ms
BUDGETS = """
[tiers.interactive]
percentile = 90
e2e_ms = 800
"""


def _export(spans: list[dict], resource: dict) -> dict:
    doc = export(spans, service="engine")
    doc["resourceSpans"][0]["resource"]["attributes"] += attrs(resource)
    return doc


def _resource(i: int) -> dict:
    return {"service.instance.id": f"replica-{i}", "host.name": f"node-{i}", "k8s.pod.name": f"engine-{i}"}


def fleet_jsonl(resource=_resource) -> str:
    """100 requests round-robin over four replicas of `engine`; each replica's spans under its own resource.
    Every request: frontend 2, queue 10, prefill 50, decode 400 (1000 on the slow replica), postprocess 3 ms."""
    docs = []
    for n in range(REPLICAS * PER_REPLICA):
        i = n % REPLICAS
        decode = 400 * 2.5 if i == SLOW else 400
        _, spans = native_request(
            arrival=T0 + n * 100 * MS,
            stages=(("frontend", 2), ("queue", 10), ("prefill", 50), ("decode", decode), ("postprocess", 3)),
        )
        docs.append(_export(spans, resource(i)))
    return jsonl(*docs)


@pytest.fixture
def fleet(tmp_path):
    traces, budgets = tmp_path / "fleet.jsonl", tmp_path / "budgets.toml"
    traces.write_text(fleet_jsonl())
    budgets.write_text(BUDGETS)
    return traces, budgets


def test_each_request_row_keeps_its_replica(archive_path, ingest_text):
    ingest_text(archive_path, fleet_jsonl())
    got = rows(
        archive_path,
        """SELECT service_name, service_instance_id, host_name, k8s_pod_name, count(*),
        avg(decode_ms) FROM requests GROUP BY ALL ORDER BY 2""",
    )
    assert got == [
        (
            "engine",
            f"replica-{i}",
            f"node-{i}",
            f"engine-{i}",
            PER_REPLICA,
            pytest.approx(1000.0 if i == SLOW else 400.0),
        )
        for i in range(REPLICAS)
    ]


def test_the_slow_replica_is_named_first_through_ingest_and_report(fleet, tmp_path):
    traces, budgets = fleet
    runner, archive = CliRunner(), tmp_path / "a"
    r = runner.invoke(main, ["ingest", str(traces), "-a", str(archive)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["report", "-a", str(archive), "-b", str(budgets), "--format", "json"])
    assert r.exit_code == 1, r.output  # p90 E2E 1065 ms > 800
    (tier,) = json.loads(r.stdout)["tiers"]
    # tail: E2E ≥ p90 = 1065 ms, the 25 requests of replica-3; body: E2E ≤ median = 465 ms, the other 75
    first = tier["contrast"]["e2e"][0]
    assert first == {
        "dimension": "instance",
        "value": "engine/replica-3",
        "tail_share": 1.0,
        "body_share": 0.0,
        "distance": pytest.approx(1.0),
    }  # ½(1 + 3 · ⅓), summed in the order the values come
    assert tier["attribution"]["e2e"]["dominant"] == "decode"
    text = runner.invoke(main, ["report", "-a", str(archive), "-b", str(budgets)]).stdout
    assert (
        "What sets that tail apart most: instance = engine/replica-3 (100% of the tail vs 0% of the body)."
        in " ".join(text.split())
    )


@pytest.mark.parametrize("key", list(REPLICA_COLUMNS.values()))
def test_the_instance_is_the_first_replica_attribute_present(key, archive_path, ingest_text):
    """service.instance.id, else k8s.pod.name, else host.name: whichever one the fleet sets names the replica."""
    ingest_text(archive_path, fleet_jsonl(lambda i: {key: f"r{i}"}))
    from budgetscope.analysis.contrast import INSTANCE_SQL

    got = rows(archive_path, f"SELECT DISTINCT {INSTANCE_SQL} FROM requests ORDER BY 1")
    assert got == [(f"engine/r{i}",) for i in range(REPLICAS)]


def test_without_replica_attributes_the_instance_is_the_service(archive_path, ingest_text):
    ingest_text(archive_path, fleet_jsonl(lambda i: {}))
    from budgetscope.analysis.contrast import INSTANCE_SQL

    assert rows(archive_path, f"SELECT DISTINCT {INSTANCE_SQL}, service_instance_id FROM requests") == [
        ("engine", None)
    ]


# -- archives written before the columns --------------------------------------------------------------------------
OLD = ", ".join(REPLICA_COLUMNS)


def _make_old(archive) -> None:
    """Rewrite the archive's `requests` segments as a budgetscope before the replica columns wrote them."""
    con = duckdb.connect()
    for seg in mf.read(archive).files("requests"):
        p = archive / seg.path
        con.execute(f"COPY (SELECT * EXCLUDE ({OLD}) FROM read_parquet('{p}')) TO '{p}.old' (FORMAT parquet)")
        p.with_name(p.name + ".old").replace(p)
        assert "service_instance_id" not in {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM '{p}'").fetchall()}


def test_old_segments_read_the_new_columns_as_null_beside_new_ones(archive_path, ingest_text, tmp_path):
    ingest_text(archive_path, fleet_jsonl())
    _make_old(archive_path)
    assert rows(archive_path, "SELECT count(*), count(service_instance_id) FROM requests") == [(100, 0)]
    # a later ingest writes segments with the columns: both ages read together, in either order
    more = [
        _export(native_request(arrival=T0 - 3600 * 1000 * MS)[1], _resource(0)),
        _export(native_request(arrival=T0 + 3600 * 1000 * MS)[1], _resource(1)),
    ]
    ingest_text(archive_path, jsonl(*more))
    assert rows(archive_path, "SELECT service_instance_id, count(*) FROM requests GROUP BY 1 ORDER BY 1") == [
        ("replica-0", 1),
        ("replica-1", 1),
        (None, 100),
    ]
    with Archive(archive_path, read_only=True, create=False) as a:
        lazy = a.lazy("requests").group_by("service_instance_id").len().sort("service_instance_id").collect()
    assert lazy.rows() == [(None, 100), ("replica-0", 1), ("replica-1", 1)]
    # compaction merges old and new segments of one hour by name, old first or new first
    segs = mf.read(archive_path).files("requests")
    for job in (segs, segs[::-1]):
        _, sql = merge_sql(archive_path, job)
        got = duckdb.connect().execute(f"SELECT count(*), count(service_instance_id) FROM ({sql})").fetchone()
        assert got == (102, 2)
    r = CliRunner().invoke(main, ["report", "-a", str(archive_path), "--format", "json"])
    assert r.exit_code == 0, r.output


def test_a_late_span_of_a_trace_in_an_old_segment_re_derives_it_with_its_replica(archive_path, ingest_text):
    text = fleet_jsonl()
    ingest_text(archive_path, text)
    _make_old(archive_path)
    first = json.loads(text.splitlines()[0])  # replica-0's first request
    (root,) = [s for s in first["resourceSpans"][0]["scopeSpans"][0]["spans"] if s["name"] == "llm.request"]
    tid, end = root["traceId"], int(root["endTimeUnixNano"])
    late = span(
        tid,
        span_id(),
        "stage.postprocess",
        end,
        end + 5 * MS,
        parent=root["spanId"],
        attributes={"budgetscope.stage": "postprocess"},
    )
    ingest_text(archive_path, jsonl(_export([late], _resource(0))))
    # the old row (no replica) is superseded by one derived from every span of the trace, read back from the
    # old segments: postprocess 3 + 5 ms, and the replica from the root's resource
    assert rows(archive_path, "SELECT count(*), count(service_instance_id) FROM requests") == [(100, 1)]
    assert rows(archive_path, "SELECT service_instance_id, postprocess_ms FROM requests WHERE trace_id = ?", [tid]) == [
        ("replica-0", pytest.approx(8.0))
    ]


def test_an_old_single_file_archive_reads_and_gains_the_columns(tmp_path, ingest_text):
    db = tmp_path / "old.duckdb"
    ingest_text(db, fleet_jsonl())
    con = duckdb.connect(str(db))
    for c in REPLICA_COLUMNS:
        con.execute(f"ALTER TABLE requests DROP COLUMN {c}")
    con.close()
    # read-only: the columns read as NULL, the file is not changed
    assert rows(db, "SELECT count(*), count(service_instance_id), count(k8s_pod_name) FROM requests") == [(100, 0, 0)]
    con = duckdb.connect(str(db), read_only=True)
    assert "host_name" not in {r[0] for r in con.execute("DESCRIBE requests").fetchall()}
    con.close()
    r = CliRunner().invoke(main, ["report", "-a", str(db), "--format", "json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        main, ["query", "-a", str(db), "SELECT count(*), count(host_name) FROM requests", "--format", "csv"]
    )  # sandboxed, from a cursor
    assert r.exit_code == 0 and r.stdout.split() == ["count_star(),count(host_name)", "100,0"], r.output
    # opened to write, it gains them, and what it derives next keeps the replica
    ingest_text(db, jsonl(_export(native_request(arrival=T0 - 10 * MS)[1], _resource(2))))
    assert rows(db, "SELECT service_instance_id, count(*) FROM requests GROUP BY 1 ORDER BY 1") == [
        ("replica-2", 1),
        (None, 100),
    ]
