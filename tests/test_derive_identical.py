"""Derivation made faster derives the same rows, bit for bit: native, vLLM classic and vLLM journey requests (with
preemptions, failures, client spans), each through the derivation as it is and through a slower path that gives
the rows by definition — the SQL before a speed-up, one trace at a time, or one batch per commit."""

from __future__ import annotations

import pytest

from budgetscope.derive import vllm
from budgetscope.derive.requests import requests_sql
from conftest import rows
from server_traces import draw, jsonl, native, sglang, tgi, triton, vllm_classic, vllm_journey, vllm_openai_v2

WRITERS = {"native": native, "vllm_classic": vllm_classic, "vllm_journey": vllm_journey}

PREEMPTED_ONLY = " AND (trace_id, api_id) IN (SELECT trace_id, api_id FROM j WHERE preemptions > 0)"
"""The journey adapter's window runs over preempted requests only (derive/vllm.py, `w`)."""


def _text(fmt: str, n: int = 40) -> str:
    mix = draw(f"identical {fmt}", "queue", n, failed_share=0.1)
    return jsonl([d for r in mix.requests for d in WRITERS[fmt](r, r.k % 2 == 0)])


def _same(a: list, b: list) -> bool:
    """Rows equal value for value, NaN (a one-token TPOT) included."""
    return [[repr(v) for v in r] for r in a] == [[repr(v) for v in r] for r in b]


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """Each format ingested once (a single-file archive: its `spans` readable as one table)."""
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    out = {}
    for fmt in WRITERS:
        d = tmp_path_factory.mktemp(fmt)
        (d / "t.jsonl").write_text(_text(fmt))
        with Archive(d / "a.duckdb") as a:
            a.ingest(read_batches(d / "t.jsonl"))
        out[fmt] = d / "a.duckdb"
    return out


def test_the_journey_window_over_preempted_requests_only_changes_nothing(archives):
    sql = requests_sql("spans", {"vllm", "client"})
    assert PREEMPTED_ONLY in vllm._journey("spans")
    got = rows(archives["vllm_journey"], f"SELECT * FROM ({sql}) ORDER BY trace_id, server_span_id")
    before = rows(
        archives["vllm_journey"], f"SELECT * FROM ({sql.replace(PREEMPTED_ONLY, '')}) ORDER BY trace_id, server_span_id"
    )
    assert len(got) == 40 and _same(got, before)
    preempted = [r for r in rows(archives["vllm_journey"], "SELECT queue_entries FROM requests") if r[0] and r[0] > 1]
    assert preempted  # the case the window is for is there


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_all_traces_at_once_derive_what_each_trace_alone_derives(archives, fmt):
    """The derivation over every trace (what an ingest's commit runs) gives each trace the row it gets alone."""
    path = archives[fmt]
    present = {s for (s,) in rows(path, "SELECT DISTINCT source FROM spans")}
    sql = requests_sql("spans", present)
    together = rows(path, f"SELECT * FROM ({sql}) ORDER BY trace_id, server_span_id")
    traces = [t for (t,) in rows(path, "SELECT DISTINCT trace_id FROM spans ORDER BY 1")]
    alone = [
        r
        for t in traces[:6]  # hex ids: safe as literals
        for r in rows(path, f"SELECT * FROM ({requests_sql(f'(SELECT * FROM spans WHERE trace_id = {t!r})', present)})")
    ]
    assert len(together) == 40 and _same([r for r in together if r[0] in traces[:6]], alone)


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_one_derivation_derives_what_one_a_chunk_derives(tmp_path, fmt, monkeypatch):
    """An ingest deriving once at the end and one deriving after each of its chunks (a trace's spans split
    between two derivations here and there): the same `requests` rows."""
    from budgetscope.ingest import batches, lander
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    f = tmp_path / "t.jsonl"
    f.write_text(_text(fmt, 12))
    with Archive(tmp_path / "once") as a:
        a.ingest(read_batches(f))
    monkeypatch.setattr(batches, "CHUNK_BYTES", f.stat().st_size // 4)
    monkeypatch.setattr(lander, "DERIVE_EVERY_SPANS", 1)
    with Archive(tmp_path / "often") as a:
        a.ingest(read_batches(f))
    q = "SELECT * FROM requests ORDER BY trace_id"
    once = rows(tmp_path / "once", q)
    assert len(once) == 12 and _same(once, rows(tmp_path / "often", q))


SERVER_ONLY = {
    "native": native,
    "vllm_classic": vllm_classic,
    "vllm_journey": vllm_journey,
    "sglang": sglang,
    "tgi": tgi,
    "triton": triton,
}
"""Formats written without client spans (llm-d's sidecar legs are HTTP client spans: never without them)."""


@pytest.mark.parametrize("fmt", list(SERVER_ONLY))
def test_without_client_spans_the_lean_derivation_derives_what_the_whole_one_does(tmp_path, fmt):
    """A batch with no client span skips the client side of the derivation (derive/requests.py): the same rows,
    value for value and type for type, as the derivation with it (which finds nothing there)."""
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    mix = draw(f"lean {fmt}", "queue", 24, failed_share=0.1)
    (tmp_path / "t.jsonl").write_text(jsonl([d for r in mix.requests for d in SERVER_ONLY[fmt](r, False)]))
    with Archive(tmp_path / "a.duckdb") as a:
        a.ingest(read_batches(tmp_path / "t.jsonl"))
    path = tmp_path / "a.duckdb"
    present = {s for (s,) in rows(path, "SELECT DISTINCT source FROM spans")}
    assert "client" not in present
    order = "ORDER BY trace_id, server_span_id"
    lean, whole = requests_sql("spans", present), requests_sql("spans", present | {"client"})
    assert "links AS" in whole and "links AS" not in lean
    got = rows(path, f"SELECT * FROM ({lean}) {order}")
    types = [f"SELECT typeof(COLUMNS(*)) FROM ({q}) LIMIT 1" for q in (lean, whole)]
    assert len(got) >= 20 and _same(got, rows(path, f"SELECT * FROM ({whole}) {order}"))
    assert rows(path, types[0]) == rows(path, types[1])


JOINED_BACK = {
    "sglang": (
        """up AS (SELECT trace_id, root_id, v.* FROM (
         SELECT trace_id, span_id, root_id, min(v) AS v FROM tree WHERE depth > 0 GROUP BY trace_id, span_id, root_id))""",
        """up AS (SELECT s.*, t.root_id FROM (SELECT DISTINCT trace_id, span_id, root_id FROM tree) t
       JOIN sg s ON s.trace_id = t.trace_id AND s.span_id = t.span_id
       WHERE NOT s.is_root QUALIFY row_number() OVER (PARTITION BY s.trace_id, s.span_id, t.root_id) = 1)""",
    ),
    "tgi": (
        "k AS (SELECT request_id, name, start_ns, end_ns, status_code FROM d),",
        """k AS (SELECT d.request_id, c.name, c.start_ns, c.end_ns, c.status_code
      FROM d JOIN t c ON c.trace_id = d.trace_id AND c.span_id = d.span_id),""",
    ),
    "triton": (
        "x AS (SELECT * FROM d),",
        """x AS (SELECT d.request_id, s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.status_code, s.a,
        d.root_start FROM d JOIN t s ON s.trace_id = d.trace_id AND s.span_id = d.span_id),""",
    ),
}
"""SGLang's, TGI's and Triton's walks carry each span's columns; before, they joined the walked ids back to the
spans."""
ROOT_JOINED_BACK = (
    """ev AS (SELECT request_id, trace_id, span_id, n, ts FROM e0
       WHERE ts > 0 AND (ts >= root_start OR n IN""",
    """ev AS (SELECT e0.request_id, e0.trace_id, e0.span_id, e0.n, e0.ts FROM e0
       JOIN r ON r.trace_id = e0.trace_id AND r.span_id = e0.request_id
       WHERE e0.ts > 0 AND (e0.ts >= r.start_ns OR e0.n IN""",
)
"""Triton's walk carries its request's start to every stamp; before, each stamp was joined back to its request."""


@pytest.mark.parametrize("fmt", list(JOINED_BACK))
def test_the_walk_carrying_each_spans_columns_derives_what_a_join_back_derives(tmp_path, fmt):
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    mix = draw(f"walk {fmt}", "queue", 24, failed_share=0.1)
    (tmp_path / "t.jsonl").write_text(jsonl([d for r in mix.requests for d in SERVER_ONLY[fmt](r, r.k % 2 == 0)]))
    with Archive(tmp_path / "a.duckdb") as a:
        a.ingest(read_batches(tmp_path / "t.jsonl"))
    path = tmp_path / "a.duckdb"
    present = {s for (s,) in rows(path, "SELECT DISTINCT source FROM spans")}
    sql = requests_sql("spans", present)
    carried, joined = JOINED_BACK[fmt]
    assert carried in sql
    if fmt == "triton":
        assert ROOT_JOINED_BACK[0] in sql
        joined_sql = sql.replace(*ROOT_JOINED_BACK)
        assert _same(
            rows(path, f"SELECT * FROM ({sql}) ORDER BY trace_id, server_span_id"),
            rows(path, f"SELECT * FROM ({joined_sql}) ORDER BY trace_id, server_span_id"),
        )
    order = "ORDER BY trace_id, server_span_id"
    got = rows(path, f"SELECT * FROM ({sql}) {order}")
    assert len(got) >= 20 and _same(got, rows(path, f"SELECT * FROM ({sql.replace(carried, joined)}) {order}"))


@pytest.mark.parametrize("fmt", ["native", "vllm_classic", "vllm_openai_v2"])
def test_the_client_roots_found_once_derive_what_each_reader_finding_its_own_derives(tmp_path, fmt):
    """budgetscope's client spans (native), httpx's (vLLM classic), a GenAI span over httpx's (openai-v2): the
    derivation that finds the client roots once (`bs_croots`) gives the rows of the one where each reader (the
    reported-timing adapters, the client spans, the unclaimed ones) tests every span itself."""
    from budgetscope.derive.classify import CLIENT_ROOT_SQL
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    writer = {"native": native, "vllm_classic": vllm_classic, "vllm_openai_v2": vllm_openai_v2}[fmt]
    mix = draw(f"croots {fmt}", "queue", 24, failed_share=0.1)
    (tmp_path / "t.jsonl").write_text(jsonl([d for r in mix.requests for d in writer(r, r.k % 3 != 0)]))
    with Archive(tmp_path / "a.duckdb") as a:
        a.ingest(read_batches(tmp_path / "t.jsonl"))
    path = tmp_path / "a.duckdb"
    present = {s for (s,) in rows(path, "SELECT DISTINCT source FROM spans")}
    assert "client" in present
    sql = requests_sql("spans", present)
    once = f"bs_croots AS (SELECT * FROM spans WHERE {CLIENT_ROOT_SQL}),\n"
    assert once in sql
    each = sql.replace(once, "").replace("bs_croots", f"(SELECT * FROM spans WHERE {CLIENT_ROOT_SQL})")
    order = "ORDER BY trace_id, server_span_id, client_span_id"
    got = rows(path, f"SELECT * FROM ({sql}) {order}")
    assert len(got) >= 24 and _same(got, rows(path, f"SELECT * FROM ({each}) {order}"))
    assert any(r[0] is not None for r in rows(path, f"SELECT client_span_id FROM ({sql})"))


def test_the_scope_tested_before_sglangs_thread_label_classifies_every_span_alike(tmp_path):
    """SGLang's branch of `classify.SOURCE_SQL` tests the service or scope before it parses a span's attributes for
    `thread_label`; in the order it had (the parse first) it gives every span of every format the same source."""
    import duckdb

    from budgetscope.derive import classify
    from budgetscope.ingest import staging
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    parse = f"(name IN {classify.SGLANG_SLICES!r} OR json_exists(attributes, '$.thread_label'))"
    now = f"({classify.SGLANG_SCOPED} AND {parse})"
    assert now in classify.SOURCE_SQL
    before = classify.SOURCE_SQL.replace(now, f"({parse} AND {classify.SGLANG_SCOPED})")
    writers = (native, vllm_journey, sglang, tgi, triton, vllm_openai_v2)
    docs = []
    for w in writers:
        mix = draw(f"classify {w.__name__}", "queue", 8, failed_share=0.1)
        docs += [d for r in mix.requests for d in w(r, r.k % 2 == 0)]
    (tmp_path / "t.jsonl").write_text(jsonl(docs))
    with Archive(tmp_path / "a.duckdb") as a:
        a.ingest(read_batches(tmp_path / "t.jsonl"))
    con = duckdb.connect()
    staging.setup(con)  # bs_kind
    con.execute(f"ATTACH '{tmp_path / 'a.duckdb'}' AS a (READ_ONLY)")
    got = con.execute(
        f"SELECT source, {classify.SOURCE_SQL}, {before} FROM a.spans ORDER BY trace_id, span_id"
    ).fetchall()
    assert {s for s, _, _ in got} >= {"native", "client", "vllm", "sglang", "tgi", "triton"}
    assert all(stored == now_ == then for stored, now_, then in got)


def test_tritons_file_mark_tested_after_its_scope_derives_what_the_attribute_alone_did(tmp_path):
    """`triton.FILE_MARK` tests the import's scope before it parses for `triton.responses`: over OpenTelemetry-mode
    requests and an imported trace file in one archive, the rows are those of the attribute test alone."""
    from pathlib import Path

    from budgetscope.derive import triton as tr
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive
    from budgetscope.sources import importers

    mix = draw("file mark triton", "queue", 16, failed_share=0.1)
    (tmp_path / "t.jsonl").write_text(jsonl([d for r in mix.requests for d in triton(r, r.k % 2 == 0)]))
    case = Path(__file__).parent / "conformance" / "triton" / "trace_file" / "trace.json"
    (tmp_path / "f.jsonl").write_bytes(importers.triton(case, case.read_bytes(), 0) + b"\n")
    with Archive(tmp_path / "a.duckdb") as a:
        a.ingest(read_batches(tmp_path / "t.jsonl"))
        a.ingest(read_batches(tmp_path / "f.jsonl"))
    path = tmp_path / "a.duckdb"
    sql = requests_sql("spans", {"triton"})
    alone = "json_exists(attributes, '$.\"triton.responses\"')"
    assert tr.FILE_MARK in sql and tr.FILE_MARK != alone
    order = "ORDER BY trace_id, server_span_id"
    got = rows(path, f"SELECT * FROM ({sql}) {order}")
    assert _same(got, rows(path, f"SELECT * FROM ({sql.replace(tr.FILE_MARK, alone)}) {order}"))
    files = rows(path, f"SELECT count(*) FROM spans WHERE {alone}")[0][0]
    assert len(got) > 16 and files > 0  # both modes are there


def test_pd_legs_selected_before_the_join_derive_what_joining_every_server_row_did(tmp_path):
    """vLLM's PD pairs take their legs from the server rows by a membership test (`vllm._leg`) before the join that
    folds them: over the PD conformance case (a prefill and a decode leg, two traces), the rows are those of the
    join of `r` itself."""
    from pathlib import Path

    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    case = Path(__file__).parent / "conformance" / "vllm" / "pd-disaggregated" / "spans.jsonl"
    with Archive(tmp_path / "a.duckdb") as a:
        a.ingest(read_batches(case))
    path = tmp_path / "a.duckdb"
    present = {s for (s,) in rows(path, "SELECT DISTINCT source FROM spans")}
    sql = requests_sql("spans", present)
    legs = [vllm._leg("d_id"), vllm._leg("p_id")]
    assert all(leg in sql for leg in legs)
    joined = sql.replace(f"{legs[0]} d", "r d").replace(f"{legs[1]} p", "r p")
    order = "ORDER BY trace_id, server_span_id"
    got = rows(path, f"SELECT * FROM ({sql}) {order}")
    assert _same(got, rows(path, f"SELECT * FROM ({joined}) {order}"))
    # the two legs folded into one request, its E2E from the prefill leg's arrival (the case's expected.json)
    assert rows(path, f"SELECT service_name, e2e_ms FROM ({sql})") == [("vllm-decode", 1592.0)]


# (the format, its writer, the two spans given an event no adapter reads: the first two spans of these names in
# different traces, and the events)
PARSED = {
    "vllm": (vllm_journey, ("llm_core", "llm_request"), ("journey.MIGRATED", "api.RETRIED")),
    "triton": (triton, ("compute", "InferRequest"), ("COMPUTE_RETRY_START", "HTTP_RETRY_END")),
}


@pytest.mark.parametrize("fmt", list(PARSED))
def test_events_parsed_once_name_the_unread_ones_as_a_parse_of_their_own_does(tmp_path, fmt):
    """The vLLM and Triton adapters' events serve the unread-events check too (derive/requests.py, PARSED_EVENTS):
    the names it gives are those the check gives parsing every span itself, an unknown event on a request's root and
    on a span below it included."""
    from budgetscope.derive import unread_events
    from budgetscope.derive.requests import EVENTS_READ, PARSED_EVENTS
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    writer, (below, root), (new_below, new_root) = PARSED[fmt]
    mix = draw(f"unread {fmt}", "queue", 12, failed_share=0.1)
    docs = [d for r in mix.requests for d in writer(r, r.k % 2 == 0)]
    spans = [s for d in docs for rs in d["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    low = next(s for s in spans if s["name"] == below)
    top = next(s for s in spans if s["name"] == root and s["traceId"] != low["traceId"])
    for s, name in ((low, new_below), (top, new_root), (top, new_root)):
        s.setdefault("events", []).append({"timeUnixNano": s["startTimeUnixNano"], "name": name})
    (tmp_path / "t.jsonl").write_text(jsonl(docs))
    with Archive(tmp_path / "a.duckdb") as a:
        a.ingest(read_batches(tmp_path / "t.jsonl"))
    path = tmp_path / "a.duckdb"
    assert f"{PARSED_EVENTS[fmt][0]} AS (" in requests_sql("spans", {fmt})  # the parse the adapter shares
    got = dict(rows(path, "SELECT trace_id, unread_events FROM requests"))
    assert {t: v for t, v in got.items() if v} == {low["traceId"]: [new_below], top["traceId"]: [new_root]}
    alone = dict(rows(path, unread_events.unread_sql("spans", EVENTS_READ)))
    assert alone == {t: v for t, v in got.items() if v}


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_the_planner_settings_derive_the_same_rows(archives, fmt):
    """A derivation runs under `requests.PLANNER` (DuckDB's join-side swap off): the rows it gives are those
    DuckDB's default plan gives, value for value, client spans and failures included."""
    import duckdb

    from budgetscope.derive.requests import PLANNER, planned

    assert PLANNER
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{archives[fmt]}' AS a (READ_ONLY)")
        con.execute("USE a")
        present = {s for (s,) in con.execute("SELECT DISTINCT source FROM spans").fetchall()}
        sql = f"SELECT * FROM ({requests_sql('spans', present)}) ORDER BY trace_id, server_span_id"
        default = con.execute(sql).fetchall()
        with planned(con):
            assert con.execute("SELECT current_setting('disabled_optimizers')").fetchone()[0]
            got = con.execute(sql).fetchall()
        assert con.execute("SELECT current_setting('disabled_optimizers')").fetchone()[0] == ""
    finally:
        con.close()
    assert len(got) == 40 and _same(got, default)


def test_a_failed_derivation_raises_its_own_error_and_leaves_the_planner_as_it_was(tmp_path, monkeypatch):
    """The settings are reset after the transaction, not in it: DuckDB refuses a RESET in a transaction that a
    failed statement aborted, and that refusal had replaced the derivation's own error. Nothing is lost: the
    traces are still pending, their rows as they were."""
    import duckdb

    from budgetscope.derive import pending
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    (tmp_path / "t.jsonl").write_text(_text("vllm_classic", 6))
    with Archive(tmp_path / "a.duckdb") as a:
        a.ingest(read_batches(tmp_path / "t.jsonl"))
        con = a.con
        before = con.execute("SELECT * FROM requests ORDER BY trace_id").fetchall()
        con.execute("INSERT INTO pending_traces SELECT DISTINCT trace_id FROM spans")
        monkeypatch.setattr(pending, "requests_sql", lambda *a: "SELECT error('the derivation failed') AS trace_id")
        with pytest.raises(duckdb.Error, match="the derivation failed"):
            pending.derive_pending(con)
        assert con.execute("SELECT current_setting('disabled_optimizers')").fetchone()[0] == ""
        assert con.execute("SELECT count(*) FROM pending_traces").fetchone()[0] == 6
        assert _same(con.execute("SELECT * FROM requests ORDER BY trace_id").fetchall(), before)
