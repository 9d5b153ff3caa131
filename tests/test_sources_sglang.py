"""SGLang: the request trace (`{role} Req <rid>` root, thread spans, stage slices) → server rows.

Today's shapes, level by level and role by role, are the conformance cases (tests/conformance/sglang/). Here: the
first tracing version (python/sglang/srt/tracing/trace.py: root `Req {rid[:8]}`, `e2e` set on it), which is still
read, and what the cases do not show: which spans are claimed, several requests in one trace, a PD pair that
arrives in two batches.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import rows

from budgetscope.sources.importers import KIND_CLIENT, KIND_SERVER, document, span

T0 = 1_800_000_000_000_000_000
MS = 1_000_000


def _trace(tid: str, parent: str | None = None, *, latency_attrs: bool = True) -> list[dict]:
    root, tok, sched = "00000000000000c1", "00000000000000c2", "00000000000000c3"
    attrs = {"rid": "0123456789abcdef", "gen_ai.usage.prompt_tokens": 40, "gen_ai.usage.completion_tokens": 6}
    if latency_attrs:
        attrs |= {"gen_ai.latency.time_to_first_token": 0.060, "gen_ai.latency.e2e": 0.120}

    def sl(sid, name, a, b, parent_id):
        return span(tid, sid, name, 1, T0 + int(a * MS), T0 + int(b * MS), {}, parent_span_id=parent_id)

    return [
        span(tid, root, "Req 01234567", KIND_SERVER, T0, T0 + 121 * MS, attrs, parent_span_id=parent),
        span(tid, tok, "Tokenizer", 1, T0, T0 + 121 * MS, {}, parent_span_id=root),
        span(tid, sched, "Scheduler [TP 0]", 1, T0 + 3 * MS, T0 + 118 * MS, {}, parent_span_id=root),
        sl("00000000000000d1", "tokenize", 0, 2, tok), sl("00000000000000d2", "dispatch", 2, 3, tok),
        sl("00000000000000d3", "request_process", 3, 5, sched), sl("00000000000000d4", "prefill_waiting", 5, 35, sched),
        sl("00000000000000d5", "prefill_forward", 35, 58, sched), sl("00000000000000d6", "decode_loop", 60, 115, sched),
    ]


def test_sglang_slices_map_to_stages(archive_path, ingest_text):
    ingest_text(archive_path, document("sglang", _trace(f"{1:032x}")).decode())
    (r,) = rows(archive_path, """SELECT source, request_id, frontend_ms, queue_ms, prefill_ms, decode_ms,
        postprocess_ms, ttft_ms, e2e_ms, unaccounted_ms, ttft_unaccounted_ms, input_tokens, output_tokens,
        queue_entries FROM requests""")
    assert r[:2] == ("sglang", "0123456789abcdef")
    assert r[2:9] == pytest.approx((5.0, 30.0, 25.0, 55.0, 5.0, 60.0, 120.0))
    assert r[9] == pytest.approx(0.0) and r[10] == pytest.approx(0.0)
    assert r[11:] == (40, 6, 1)
    assert {s for (s,) in rows(archive_path, "SELECT source FROM spans WHERE name <> 'Tokenizer' "
                                             "AND NOT starts_with(name, 'Scheduler')")} == {"sglang"}


def test_sglang_without_latency_attributes_uses_the_slices(archive_path, ingest_text):
    ingest_text(archive_path, document("sglang", _trace(f"{2:032x}", latency_attrs=False)).decode())
    (r,) = rows(archive_path, "SELECT ttft_ms, prefill_ms, e2e_ms, postprocess_ms FROM requests")
    assert r == pytest.approx((58.0, 23.0, 121.0, 6.0))  # first token: end of the last prefill slice


def test_sglang_joins_its_client_span(archive_path, ingest_text):
    tid, csid = f"{3:032x}", f"{3:016x}"
    c = span(tid, csid, "llm.client.request", KIND_CLIENT, T0 - 2 * MS, T0 + 124 * MS,
             {"budgetscope.client.first_token_unix_nano": T0 + 63 * MS})
    ingest_text(archive_path, document("sglang", _trace(tid, csid)).decode() + "\n" +
                document("loadgen", [c]).decode())
    assert rows(archive_path, "SELECT source, network_ms, ttft_network_ms FROM requests") == [
        ("sglang", pytest.approx(6.0), pytest.approx(5.0))]


CASES = Path(__file__).parent / "conformance" / "sglang"


def test_sglang_claims_its_roots_threads_and_slices_only(archive_path, ingest_text):
    tid = f"{4:032x}"
    ours = [span(tid, f"{i + 1:016x}", name, 1, T0, T0 + MS, attrs) for i, (name, attrs) in enumerate([
        (" Req 0123abcd", {"rid": "0123abcd-1"}), ("prefill Req 0123abcd", {"rid": "0123abcd-2"}),
        ("decode Req 0123abcd", {"rid": "0123abcd-3"}), ("Req 0123abcd", {"rid": "0123abcd-4"}),
        ("Scheduler [TP 0] (host:3f9a1c2e | pid:7)", {"thread_label": "Scheduler", "pid": 7}),
        ("decode_waiting", {}), ("prefill_bootstrap", {}), ("fake_output", {})])]
    theirs = [span(tid, f"{i + 20:016x}", name, 1, T0, T0 + MS, attrs) for i, (name, attrs) in enumerate([
        ("tokenize", {}), ("Req 0123abcd", {}), ("worker", {"thread_label": "w"})])]
    ingest_text(archive_path, document("sglang", ours, scope="sglang server").decode() + "\n"
                + document("my-app", theirs, scope="my.app").decode())
    got = dict(rows(archive_path, "SELECT span_id, source FROM spans"))
    assert [got[s["spanId"]] for s in ours] == ["sglang"] * len(ours)
    assert [got[s["spanId"]] for s in theirs] == ["other"] * len(theirs)  # generic names, another service


def test_two_requests_in_one_trace_each_read_their_own_slices(archive_path, ingest_text):
    """One client trace may hold several requests: slices belong to the root they hang under, not the trace."""
    tid = f"{5:032x}"

    def request(n: int, queue_ms: float) -> list[dict]:
        root, thread = f"{n:08x}00000001", f"{n:08x}00000002"
        attrs = {"rid": f"req-{n}", "gen_ai.latency.time_to_first_token": (10 + queue_ms) / 1e3}
        return [span(tid, root, f" Req req-{n}", 1, T0, T0 + 100 * MS, attrs),
                span(tid, thread, "Scheduler [TP 0] (host:3f9a1c2e | pid:7)", 1, T0 + MS, T0 + 99 * MS,
                     {"thread_label": "Scheduler"}, parent_span_id=root),
                span(tid, f"{n:08x}00000003", "prefill_waiting", 1, T0 + 2 * MS, T0 + int((2 + queue_ms) * MS), {},
                     parent_span_id=thread),
                span(tid, f"{n:08x}00000004", "prefill_forward", 1, T0 + int((2 + queue_ms) * MS),
                     T0 + int((9 + queue_ms) * MS), {}, parent_span_id=thread),
                span(tid, f"{n:08x}00000005", "decode_forward", 1, T0 + int((9 + queue_ms) * MS), T0 + 99 * MS, {},
                     parent_span_id=thread)]

    ingest_text(archive_path, document("sglang", request(1, 5.0) + request(2, 30.0), scope="sglang server").decode())
    assert rows(archive_path, "SELECT request_id, frontend_ms, queue_ms, prefill_ms, postprocess_ms, "
                              "unaccounted_ms FROM requests ORDER BY 1") == [
        ("req-1", pytest.approx(2.0), pytest.approx(5.0), pytest.approx(8.0), pytest.approx(1.0), pytest.approx(0.0)),
        ("req-2", pytest.approx(2.0), pytest.approx(30.0), pytest.approx(8.0), pytest.approx(1.0),
         pytest.approx(0.0))]


def test_a_pd_pair_split_over_two_batches_is_one_request(archive_path, ingest_text):
    """The decode instance exports after the prefill instance: the trace is derived again, and the pair is one
    row with the figures of the whole case."""
    case = CASES / "pd_pair_one_trace"
    lines = (case / "spans.jsonl").read_text().splitlines(keepends=True)
    prefill = [ln for ln in lines if '"prefill' in ln or "Prefill" in ln or "llm.client.request" in ln]
    ingest_text(archive_path, "".join(prefill))
    assert rows(archive_path, "SELECT count(*) FROM requests WHERE source = 'sglang'") == [(0,)]
    ingest_text(archive_path, "".join(ln for ln in lines if ln not in prefill))
    (want,) = json.loads((case / "expected.json").read_text())["requests"]
    got = rows(archive_path, "SELECT request_id, queue_ms, prefill_ms, e2e_ms, network_ms FROM requests")
    assert got == [(want["request_id"], pytest.approx(want["queue_ms"]), pytest.approx(want["prefill_ms"]),
                    pytest.approx(want["e2e_ms"]), pytest.approx(want["network_ms"]))]


def test_looping_parent_links_end_the_walk():
    """Ingest keeps one copy of a span id, but the adapter reads any relation: a span id present twice, once as
    its own parent, would walk forever. The walk stops at a bounded depth and the row stays right."""
    import duckdb

    from budgetscope.sources import sglang

    con = duckdb.connect()
    con.execute("""CREATE TABLE s (trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR, name VARCHAR,
        start_ns BIGINT, end_ns BIGINT, status_code VARCHAR, source VARCHAR, service_name VARCHAR, attributes JSON)""")
    con.executemany("INSERT INTO s VALUES ('t', ?, ?, ?, ?, ?, 'UNSET', 'sglang', 'sglang', ?)", [
        ("r", None, " Req 0123abcd", T0, T0 + 10 * MS, '{"rid": "0123abcd-loop"}'),
        ("th", "r", "Scheduler", T0, T0 + 9 * MS, '{"thread_label": "Scheduler"}'),
        ("w", "th", "prefill_waiting", T0 + MS, T0 + 2 * MS, "{}"),
        ("w", "w", "prefill_waiting", T0 + MS, T0 + 2 * MS, "{}")])
    got = con.execute(f"SELECT request_id, frontend_ms, queue_ms FROM ({sglang.server_rows('s')})").fetchall()
    assert got == [("0123abcd-loop", pytest.approx(1.0), pytest.approx(1.0))]
