"""A misread announces itself: every derived row states the instants its format saw, breaks no invariant of
derive/invariants.py unless it was misread, and the report, its JSON and the dashboard count and name the
misreads and the span events no adapter reads, per format, as they do the spans no adapter claimed."""

from __future__ import annotations

import json

import duckdb
import pytest
from click.testing import CliRunner

from budgetscope.archive import manifest as mf
from budgetscope.cli import main
from budgetscope.derive.instants import filled
from budgetscope.derive.invariants import VIOLATIONS
from budgetscope.derive.server_row import SERVER_COLUMNS
from budgetscope.schema import EVENTS_KEY
from conftest import rows
from otlp_wire import MS, T0, export, jsonl, native_request, span, span_id
from spark_support import needs_spark

ALL_INSTANTS = [
    "arrival",
    "queue_start",
    "scheduled",
    "first_token",
    "last_token",
    "end",
    "client_send",
    "client_first_token",
    "client_end",
]
COLS = "violations, instants, unread_events, client_end_ns, network_ms, client_e2e_ms, ttft_network_ms"


def _root(spans: list[dict]) -> dict:
    return next(s for s in spans if s["name"] == "llm.request")


def test_a_clean_request_sees_every_instant_and_breaks_nothing(archive_path, ingest_text):
    _, spans = native_request(client=(1, 2))
    ingest_text(archive_path, jsonl(export(spans)))
    ((violations, seen, unread, *_),) = rows(archive_path, f"SELECT {COLS} FROM requests")
    assert (violations, seen, unread) == ([], ALL_INSTANTS, [])


def _shorter_root(spans):
    root = _root(spans)
    root["endTimeUnixNano"] = str(int(root["startTimeUnixNano"]) + 100 * MS)  # the stages run to 465 ms


def _early_first_token(spans):
    root = _root(spans)
    root["attributes"].append({"key": "budgetscope.first_token_unix_nano", "value": {"intValue": str(T0 - MS)}})


MISREADS = [
    # the root ends at 100 ms, its decode span runs to 462 ms
    (_shorter_root, None, ["decode_longer_than_request", "parts_exceed_e2e", "instants_out_of_order"]),
    # a first token stamped 1 ms before the arrival
    (_early_first_token, None, ["parts_exceed_ttft", "first_token_outside_request", "instants_out_of_order"]),
]


@pytest.mark.parametrize("spoil,client,want", MISREADS, ids=["stage-past-the-end", "first-token-before-arrival"])
def test_a_misread_row_names_the_invariants_it_breaks(spoil, client, want, archive_path, ingest_text):
    _, spans = native_request(client=client)
    spoil(spans)
    ingest_text(archive_path, jsonl(export(spans)))
    ((violations, *_),) = rows(archive_path, f"SELECT {COLS} FROM requests")
    assert violations == want and set(want) <= set(VIOLATIONS)


def test_a_client_span_shorter_than_the_server_is_no_network(archive_path, ingest_text):
    """The client span ends 5 ms before the server span (its clock runs 1 ms ahead at the send): a span that read the
    response to its end (`llm.client.request`) keeps its end and E2E, the client's own, but no network comes of it,
    and its first token, before the server's, gives no TTFT network; both are named. (An HTTP client span that
    ended at the headers has no client end either: tests/test_sources_http_client.py.)"""
    _, spans = native_request(client=(1, -5))
    ingest_text(archive_path, jsonl(export(spans)))
    ((violations, seen, _, client_end, network, client_e2e, ttft_network),) = rows(
        archive_path, f"SELECT {COLS} FROM requests"
    )
    assert violations == ["client_end_before_server_end", "client_first_token_before_server"]
    (server_e2e,) = rows(archive_path, "SELECT e2e_ms FROM requests")[0]
    assert (network, ttft_network, client_e2e) == (None, None, pytest.approx(server_e2e - 4.0))
    assert client_end is not None and "client_end" in seen


def _literal(v) -> str:
    return "NULL" if v is None else f"'{v}'" if isinstance(v, str) else str(v)


def _server_rows(values: list[dict]) -> str:
    """A relation of server rows with the given columns, every other one NULL."""
    selects = [
        "SELECT " + ", ".join(f"CAST({_literal(v.get(c))} AS {t}) AS {c}" for c, t in SERVER_COLUMNS.items())
        for v in values
    ]
    return "(" + " UNION ALL ".join(selects) + ")"


def test_a_stage_is_taken_from_its_instants_only_where_both_were_seen():
    """frontend from arrival → queue start; postprocess needs the end, which is seen only with a known E2E; a stage
    the adapter measured itself is kept; a row without a server span (a client's clock) gets nothing."""
    base = {"server_span_id": "s", "arrival_ns": 0, "queue_start_ns": 2_000_000, "last_token_ns": 9_000_000}
    rows_in = [
        {**base, "end_ns": 10_000_000, "e2e_ms": 10.0},
        {**base, "end_ns": 10_000_000},  # E2E unknown: the end is a stand-in
        {**base, "end_ns": 10_000_000, "e2e_ms": 10.0, "frontend_ms": 1.5},
        {**base, "server_span_id": None, "end_ns": 10_000_000, "e2e_ms": 10.0},
    ]
    con = duckdb.connect()
    got = con.execute(
        f"SELECT frontend_ms, queue_ms, prefill_ms, decode_ms, postprocess_ms, ttft_frontend_ms "
        f"FROM ({filled(_server_rows(rows_in))})"
    ).fetchall()
    assert got == [
        (2.0, None, None, None, 1.0, None),  # no first token: no TTFT window
        (2.0, None, None, None, None, None),
        (1.5, None, None, None, 1.0, None),
        (None, None, None, None, None, None),
    ]


def _with_events(spans: list[dict], names: list[str]) -> None:
    _root(spans)["events"] = [{"timeUnixNano": str(T0 + i * MS), "name": n} for i, n in enumerate(names)]


def test_span_events_no_adapter_reads_are_named_per_format(archive_path, ingest_text, tmp_path):
    """An event on a claimed span that its adapter does not read is on its request's row and in the report (JSON,
    text, markdown); the rows without one are not counted."""
    _, flagged = native_request()
    _with_events(flagged, ["llm.mystery", "llm.mystery", "llm.other"])
    _, clean = native_request(arrival=T0 + 1000 * MS)
    ingest_text(archive_path, jsonl(export(flagged), export(clean)))
    assert sorted(rows(archive_path, "SELECT unread_events FROM requests")) == [([],), (["llm.mystery", "llm.other"],)]
    runner = CliRunner()
    rep = json.loads(runner.invoke(main, ["report", "-a", str(archive_path), "--format", "json"]).stdout)
    assert rep["unread_events"] == {
        "total": 1,
        "groups": 2,
        "top": [
            {"source": "native", "name": "llm.mystery", "requests": 1},
            {"source": "native", "name": "llm.other", "requests": 1},
        ],
        "by_source": {"native": 1},
    }
    assert rep["violations"] == {"total": 0, "groups": 0, "top": [], "by_source": {}}
    line = "1 request with span events no adapter reads: native 'llm.mystery' (1), native 'llm.other' (1)"
    assert line in runner.invoke(main, ["report", "-a", str(archive_path)]).stdout
    assert line in runner.invoke(main, ["report", "-a", str(archive_path), "--format", "markdown"]).stdout


def test_misreads_are_counted_per_format_and_leave_the_status_alone(archive_path, ingest_text, tmp_path):
    """Two misread native rows of three: the JSON counts and names them, the text says it in one line, and the
    status and exit code are the budgets' (the figures are reported as measured)."""
    docs = []
    for i in range(3):
        _, spans = native_request(arrival=T0 + i * 1000 * MS)
        if i:
            _shorter_root(spans)
        docs.append(export(spans))
    ingest_text(archive_path, jsonl(*docs))
    b = tmp_path / "b.toml"
    b.write_text("[tiers.interactive]\ne2e_ms = 10000\n")
    runner = CliRunner()
    r = runner.invoke(main, ["report", "-a", str(archive_path), "-b", str(b), "--format", "json"])
    rep = json.loads(r.stdout)
    assert (r.exit_code, rep["status"]) == (0, "KEPT")
    assert rep["violations"]["total"] == 2 and rep["violations"]["by_source"] == {"native": 2}
    assert [t["name"] for t in rep["violations"]["top"]] == [
        "decode_longer_than_request",
        "instants_out_of_order",
        "parts_exceed_e2e",
    ]
    text = runner.invoke(main, ["report", "-a", str(archive_path), "-b", str(b)]).stdout
    assert "2 requests misread (breaking an invariant of their format" in text


def test_rows_written_before_the_checks_read_as_unchecked(archive_path, ingest_text):
    """Segments written before `instants`, `violations` and `unread_events` existed read them as NULL: the report
    counts nothing there and runs."""
    _, spans = native_request()
    _shorter_root(spans)
    ingest_text(archive_path, jsonl(export(spans)))
    con = duckdb.connect()
    for seg in mf.read(archive_path).files("requests"):
        p = archive_path / seg.path
        old = "instants, violations, unread_events, queue_start_ns, scheduled_ns, last_token_ns, ttft_content_gap_ms"
        con.execute(f"COPY (SELECT * EXCLUDE ({old}) FROM read_parquet('{p}')) TO '{p}.old' (FORMAT parquet)")
        p.with_name(p.name + ".old").replace(p)
    assert rows(archive_path, "SELECT violations, instants FROM requests") == [(None, None)]
    r = CliRunner().invoke(main, ["report", "-a", str(archive_path), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["violations"]["total"] == 0


def test_an_event_on_an_unclaimed_span_is_not_an_unread_event(archive_path, ingest_text):
    """Only claimed spans count: an HTTP framework's span beside the request, with its own events, is context."""
    tid, spans = native_request()
    other = span(tid, span_id(), "GET /health", T0, T0 + MS, kind=2)
    other["events"] = [{"timeUnixNano": str(T0), "name": "framework.thing"}]
    ingest_text(archive_path, jsonl(export(spans), export([other], service="web", scope="web")))
    assert rows(archive_path, "SELECT unread_events FROM requests") == [([],)]


def test_a_declared_event_name_is_matched_exactly_and_only_a_percent_makes_a_pattern():
    """`EVENTS_READ` names are names: `_` in one is a character (LIKE would read `HTTPXRECV_START` as Triton's
    `HTTP_RECV_START`), and only a name holding `%` is a LIKE pattern (TGI reads every event)."""
    from budgetscope.derive.unread_events import unread_sql

    con = duckdb.connect()
    con.execute("CREATE TABLE spans (trace_id VARCHAR, source VARCHAR, attributes JSON)")
    for tid, source, name in [
        ("t1", "triton", "HTTP_RECV_START"),
        ("t2", "triton", "HTTPXRECV_START"),
        ("t3", "tgi", "anything_at_all"),
        ("t4", "triton", "http_recv_start"),
    ]:
        con.execute("INSERT INTO spans VALUES (?, ?, ?)", [tid, source, json.dumps({EVENTS_KEY: [{"name": name}]})])
    read = {"triton": ("HTTP_RECV_START",), "tgi": ("%",)}
    got = dict(con.execute(unread_sql("spans", read)).fetchall())
    assert got == {"t2": ["HTTPXRECV_START"], "t4": ["http_recv_start"]}


@needs_spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_misreads_and_unread_events_count_the_same_on_spark(spark, tmp_path):
    """The report's `violations` and `unread_events`, and each tier's `misread_requests`, from Spark over the same
    files: the same as DuckDB's."""
    from budgetscope.analysis.report import build_report
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive
    from budgetscope.spark.archive import SparkArchive
    from spark_support import assert_same

    docs = []
    for i in range(6):
        _, spans = native_request(arrival=T0 + i * 1000 * MS, tier="interactive" if i % 2 else "batch")
        if i % 3 == 0:
            _shorter_root(spans)
        if i % 2 == 0:
            _root(spans)["events"] = [{"timeUnixNano": str(T0), "name": "odd"}]
        docs.append(export(spans))
    f = tmp_path / "t.jsonl"
    f.write_text(jsonl(*docs))
    with Archive(tmp_path / "a") as a:
        a.ingest(read_batches(f))
    with Archive(tmp_path / "a", read_only=True) as a:
        want = build_report(a.con, None)
    with SparkArchive(tmp_path / "a", spark) as s:
        got = build_report(s.con, None)
    assert want["violations"]["total"] == 2 and want["unread_events"]["by_source"] == {"native": 3}
    assert [t["misread_requests"] for t in want["tiers"]] == [1, 1]  # batch, interactive
    for key in ("violations", "unread_events"):
        assert_same(want[key], got[key], key)
    assert [t["misread_requests"] for t in got["tiers"]] == [1, 1]
