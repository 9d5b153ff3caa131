"""SGLang: the request trace (`{role} Req <rid>` root, thread spans, stage slices) → server rows.

Today's shapes, level by level and role by role, are the conformance cases (tests/conformance/sglang/). Here: the
first tracing version (python/sglang/srt/tracing/trace.py: root `Req {rid[:8]}`, `e2e` set on it), which is still
read, and what the cases do not show: which spans are claimed, several requests in one trace, a PD pair that
arrives in two batches.
"""

from __future__ import annotations

import json
from itertools import accumulate
from pathlib import Path

import pytest

from budgetscope.sources.importers import KIND_CLIENT, KIND_SERVER, document, span
from conftest import rows

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
        sl("00000000000000d1", "tokenize", 0, 2, tok),
        sl("00000000000000d2", "dispatch", 2, 3, tok),
        sl("00000000000000d3", "request_process", 3, 5, sched),
        sl("00000000000000d4", "prefill_waiting", 5, 35, sched),
        sl("00000000000000d5", "prefill_forward", 35, 58, sched),
        sl("00000000000000d6", "decode_loop", 60, 115, sched),
    ]


def test_sglang_slices_map_to_stages(archive_path, ingest_text):
    ingest_text(archive_path, document("sglang", _trace(f"{1:032x}")).decode())
    (r,) = rows(
        archive_path,
        """SELECT source, request_id, frontend_ms, queue_ms, prefill_ms, decode_ms,
        postprocess_ms, ttft_ms, e2e_ms, unaccounted_ms, ttft_unaccounted_ms, input_tokens, output_tokens,
        queue_entries FROM requests""",
    )
    assert r[:2] == ("sglang", "0123456789abcdef")
    assert r[2:9] == pytest.approx((5.0, 30.0, 25.0, 55.0, 5.0, 60.0, 120.0))
    assert r[9] == pytest.approx(0.0) and r[10] == pytest.approx(0.0)
    assert r[11:] == (40, 6, 1)
    assert {
        s
        for (s,) in rows(
            archive_path, "SELECT source FROM spans WHERE name <> 'Tokenizer' AND NOT starts_with(name, 'Scheduler')"
        )
    } == {"sglang"}


def test_sglang_without_latency_attributes_uses_the_slices(archive_path, ingest_text):
    ingest_text(archive_path, document("sglang", _trace(f"{2:032x}", latency_attrs=False)).decode())
    (r,) = rows(archive_path, "SELECT ttft_ms, prefill_ms, e2e_ms, postprocess_ms FROM requests")
    assert r == pytest.approx((58.0, 23.0, 121.0, 6.0))  # first token: end of the last prefill slice


def test_sglang_joins_its_client_span(archive_path, ingest_text):
    tid, csid = f"{3:032x}", f"{3:016x}"
    c = span(
        tid,
        csid,
        "llm.client.request",
        KIND_CLIENT,
        T0 - 2 * MS,
        T0 + 124 * MS,
        {"budgetscope.client.first_token_unix_nano": T0 + 63 * MS},
    )
    ingest_text(archive_path, document("sglang", _trace(tid, csid)).decode() + "\n" + document("loadgen", [c]).decode())
    assert rows(archive_path, "SELECT source, network_ms, ttft_network_ms FROM requests") == [
        ("sglang", pytest.approx(6.0), pytest.approx(5.0))
    ]


CASES = Path(__file__).parent / "conformance" / "sglang"
T0_CASE = 1_795_000_000_000_000_000  # the conformance cases' time zero (ns)


def test_sglang_claims_its_roots_threads_and_slices_only(archive_path, ingest_text):
    tid = f"{4:032x}"
    ours = [
        span(tid, f"{i + 1:016x}", name, 1, T0, T0 + MS, attrs)
        for i, (name, attrs) in enumerate(
            [
                (" Req 0123abcd", {"rid": "0123abcd-1"}),
                ("prefill Req 0123abcd", {"rid": "0123abcd-2"}),
                ("decode Req 0123abcd", {"rid": "0123abcd-3"}),
                ("Req 0123abcd", {"rid": "0123abcd-4"}),
                ("Scheduler [TP 0] (host:3f9a1c2e | pid:7)", {"thread_label": "Scheduler", "pid": 7}),
                ("decode_waiting", {}),
                ("prefill_bootstrap", {}),
                ("fake_output", {}),
            ]
        )
    ]
    theirs = [
        span(tid, f"{i + 20:016x}", name, 1, T0, T0 + MS, attrs)
        for i, (name, attrs) in enumerate([("tokenize", {}), ("Req 0123abcd", {}), ("worker", {"thread_label": "w"})])
    ]
    ingest_text(
        archive_path,
        document("sglang", ours, scope="sglang server").decode()
        + "\n"
        + document("my-app", theirs, scope="my.app").decode(),
    )
    got = dict(rows(archive_path, "SELECT span_id, source FROM spans"))
    assert [got[s["spanId"]] for s in ours] == ["sglang"] * len(ours)
    assert [got[s["spanId"]] for s in theirs] == ["other"] * len(theirs)  # generic names, another service


def test_two_requests_in_one_trace_each_read_their_own_slices(archive_path, ingest_text):
    """One client trace may hold several requests: slices belong to the root they hang under, not the trace."""
    tid = f"{5:032x}"

    def request(n: int, queue_ms: float) -> list[dict]:
        root, thread = f"{n:08x}00000001", f"{n:08x}00000002"
        attrs = {"rid": f"req-{n}", "gen_ai.latency.time_to_first_token": (10 + queue_ms) / 1e3}
        return [
            span(tid, root, f" Req req-{n}", 1, T0, T0 + 100 * MS, attrs),
            span(
                tid,
                thread,
                "Scheduler [TP 0] (host:3f9a1c2e | pid:7)",
                1,
                T0 + MS,
                T0 + 99 * MS,
                {"thread_label": "Scheduler"},
                parent_span_id=root,
            ),
            span(
                tid,
                f"{n:08x}00000003",
                "prefill_waiting",
                1,
                T0 + 2 * MS,
                T0 + int((2 + queue_ms) * MS),
                {},
                parent_span_id=thread,
            ),
            span(
                tid,
                f"{n:08x}00000004",
                "prefill_forward",
                1,
                T0 + int((2 + queue_ms) * MS),
                T0 + int((9 + queue_ms) * MS),
                {},
                parent_span_id=thread,
            ),
            span(
                tid,
                f"{n:08x}00000005",
                "decode_forward",
                1,
                T0 + int((9 + queue_ms) * MS),
                T0 + 99 * MS,
                {},
                parent_span_id=thread,
            ),
        ]

    ingest_text(archive_path, document("sglang", request(1, 5.0) + request(2, 30.0), scope="sglang server").decode())
    assert rows(
        archive_path,
        "SELECT request_id, frontend_ms, queue_ms, prefill_ms, postprocess_ms, unaccounted_ms FROM requests ORDER BY 1",
    ) == [
        ("req-1", pytest.approx(2.0), pytest.approx(5.0), pytest.approx(8.0), pytest.approx(1.0), pytest.approx(0.0)),
        ("req-2", pytest.approx(2.0), pytest.approx(30.0), pytest.approx(8.0), pytest.approx(1.0), pytest.approx(0.0)),
    ]


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
    assert got == [
        (
            want["request_id"],
            pytest.approx(want["queue_ms"]),
            pytest.approx(want["prefill_ms"]),
            pytest.approx(want["e2e_ms"]),
            pytest.approx(want["network_ms"]),
        )
    ]


def _relation(rid: str, waits: list[tuple[str, str, int, int]]):
    """A DuckDB relation `s` no ingest made: an SGLang root (`rid`), its scheduler thread span, and the `waits`
    (span id, parent id, start and end ms after the root's start), which may repeat a span id."""
    import duckdb

    con = duckdb.connect()
    con.execute("""CREATE TABLE s (trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR, name VARCHAR,
        start_ns BIGINT, end_ns BIGINT, status_code VARCHAR, source VARCHAR, service_name VARCHAR, attributes JSON)""")
    con.executemany(
        "INSERT INTO s VALUES ('t', ?, ?, ?, ?, ?, 'UNSET', 'sglang', 'sglang', ?)",
        [
            ("r", None, " Req 0123abcd", T0, T0 + 10 * MS, json.dumps({"rid": rid})),
            ("th", "r", "Scheduler", T0, T0 + 9 * MS, '{"thread_label": "Scheduler"}'),
            *((sid, parent, "prefill_waiting", T0 + a * MS, T0 + b * MS, "{}") for sid, parent, a, b in waits),
        ],
    )
    return con


def test_looping_parent_links_end_the_walk():
    """Ingest keeps one copy of a span id, but the adapter reads any relation: a span id present twice, once as
    its own parent, would walk forever. The walk stops at a bounded depth and the row stays right."""
    from budgetscope.derive import sglang

    con = _relation("0123abcd-loop", [("w", "th", 1, 2), ("w", "w", 1, 2)])
    got = con.execute(f"SELECT request_id, frontend_ms, queue_ms FROM ({sglang.server_rows('s')})").fetchall()
    assert got == [("0123abcd-loop", pytest.approx(1.0), pytest.approx(1.0))]


def test_a_slice_sent_twice_counts_once_as_its_least_version():
    """A span id present twice under one root with different times (no ingest keeps both; another relation may):
    the slice counts once, and the same one on every run, the least version (here the shorter wait)."""
    from budgetscope.derive import sglang

    con = _relation("0123abcd-twice", [("w", "th", 1, 4), ("w", "th", 1, 2)])
    for _ in range(3):
        got = con.execute(f"SELECT request_id, queue_ms FROM ({sglang.server_rows('s')})").fetchall()
        assert got == [("0123abcd-twice", pytest.approx(1.0))]


class _Req:
    """One request's trace: its id, and its spans as SGLang writes them (trace.py, req_time_stats.py)."""

    def __init__(self, n: int):
        self.tid, self.n, self.k, self.spans = f"{n:032x}", n, 0, []
        self.rid = f"rid{n:05d}" + "0" * 24

    def sid(self) -> str:
        self.k += 1
        return f"{self.n:08x}{self.k:08x}"

    def add(self, name, a_us, b_us, parent, attrs=None) -> str:
        s = span(self.tid, self.sid(), name, 1, T0 + a_us * 1000, T0 + b_us * 1000, attrs or {}, parent_span_id=parent)
        self.spans.append(s)
        return s["spanId"]


def _unified(rng, n: int, level: int) -> tuple[_Req, dict]:
    """A single-server request at trace `level` on a random timeline (µs), and the stages (ms) that timeline
    implies: the truth its derived row is checked against."""
    r, u = _Req(n), rng.randint
    created = u(0, 2_000_000)
    tok_end = created + u(200, 3000)
    disp, recv = tok_end + u(0, 500), tok_end + u(600, 3000)
    enq = recv + u(100, 2000)
    sched = enq + u(0, 500_000)
    chunk_ends = list(accumulate((u(5000, 50_000) for _ in range(u(1, 4))), initial=sched))[1:]
    prefilled = chunk_ends[-1]
    dsched = prefilled + u(100, 5000)
    loops = list(accumulate((u(5000, 40_000) for _ in range(u(1, 30))), initial=dsched))[1:]
    completed, first = loops[-1] + u(0, 1000), prefilled + u(300, 3000)
    finished = completed + u(200, 5000)
    root, tok, sch = r.sid(), r.sid(), r.sid()
    r.add("tokenize", created, tok_end, tok)
    if level >= 2:
        r.add("api_server_dispatch", disp, disp + 100, tok)
        r.add("request_process", recv, enq, sch)
    r.add("prefill_waiting", enq, sched, sch)
    pf, df = r.sid(), r.sid()
    r.spans.append(
        span(r.tid, pf, "prefill_forward", 1, T0 + sched * 1000, T0 + prefilled * 1000, {}, parent_span_id=sch)
    )
    r.add("decode_waiting", prefilled, dsched, sch)
    r.spans.append(
        span(r.tid, df, "decode_forward", 1, T0 + dsched * 1000, T0 + completed * 1000, {}, parent_span_id=sch)
    )
    if level >= 3:
        for a, b in zip([sched] + chunk_ends[:-1], chunk_ends):
            r.add("chunked_prefill", a, b, pf)
        for i, (a, b) in enumerate(zip([dsched] + loops[:-1], loops)):
            r.add("decode_loop", a, b, df, {"decode_ct": i})
    r.spans += [
        span(
            r.tid,
            tok,
            "Tokenizer(host:3f9a1c2e | pid:7)",
            1,
            T0 + created * 1000,
            T0 + (disp + 100 if level >= 2 else finished) * 1000,
            {"thread_label": "Tokenizer"},
            parent_span_id=root,
        ),
        span(
            r.tid,
            sch,
            "Scheduler [TP 0] (host:3f9a1c2e | pid:8)",
            1,
            T0 + recv * 1000,
            T0 + completed * 1000,
            {"thread_label": "Scheduler", "tp_rank": 0},
            parent_span_id=root,
        ),
        span(
            r.tid,
            root,
            f" Req {r.rid[:8]}",
            1,
            T0 + created * 1000,
            T0 + finished * 1000,
            {
                "rid": r.rid,
                "gen_ai.usage.completion_tokens": len(loops) + 1,
                "gen_ai.latency.time_to_first_token": (first - created) / 1e6,
            },
        ),
    ]
    ms = lambda us: us / 1000  # noqa: E731 - a one-line helper where it is used
    itl = [ms(b - a) for a, b in zip([prefilled] + loops[:-1], loops)] if level >= 3 else None
    return r, {
        "frontend_ms": ms(enq - created),
        "queue_ms": ms(sched - enq),
        "prefill_ms": ms(first - sched),
        "decode_ms": ms(completed - first),
        "postprocess_ms": ms(finished - completed),
        "ttft_ms": ms(first - created),
        "e2e_ms": ms(finished - created),
        "itl_ms": itl,
    }


def test_a_random_mix_of_levels_in_interleaved_batches_derives_each_timeline(archive_path, ingest_text):
    """Timelines nobody tuned to, each request at its own trace level, their spans shuffled into batches of 64
    (SGLang's exporter batch) over two ingests: every row equals its timeline to the microsecond, once."""
    import random

    rng = random.Random(23)
    reqs = [_unified(rng, 100 + i, rng.choice((1, 2, 3))) for i in range(60)]
    spans = [s for r, _ in reqs for s in r.spans]
    rng.shuffle(spans)
    docs = [document("sglang", spans[i : i + 64], scope="sglang server").decode() for i in range(0, len(spans), 64)]
    half = len(docs) // 2
    ingest_text(archive_path, "\n".join(docs[:half]) + "\n")
    ingest_text(archive_path, "\n".join(docs[half:]) + "\n")
    keys = ["frontend_ms", "queue_ms", "prefill_ms", "decode_ms", "postprocess_ms", "ttft_ms", "e2e_ms", "itl_ms"]
    derived = rows(archive_path, f"SELECT request_id, {', '.join(keys)} FROM requests")
    got = {r[0]: dict(zip(keys, r[1:])) for r in derived}
    assert len(got) == len(reqs)
    for r, want in reqs:
        g = got[r.rid]
        for k in keys[:-1]:
            assert g[k] == pytest.approx(want[k], abs=1e-3), (r.rid, k)
        assert (g["itl_ms"] is None) == (want["itl_ms"] is None), r.rid
        if want["itl_ms"] is not None:
            assert g["itl_ms"] == pytest.approx(want["itl_ms"], abs=1e-3), r.rid


def test_a_prefill_sent_twice_for_one_room_still_makes_one_request(archive_path, ingest_text):
    """Two prefill roots of one bootstrap room (a prefill sent again) and one decode root: one row, and it
    pairs with the later prefill."""
    case = CASES / "pd_pair_one_trace"
    lines = (case / "spans.jsonl").read_text().splitlines(keepends=True)
    again = [
        ln.replace('"spanId":"0c0f', '"spanId":"1c0f').replace('"parentSpanId":"0c0f', '"parentSpanId":"1c0f')
        for ln in lines
        if '"prefill' in ln or "Prefill" in ln
    ]
    early = T0_CASE - 5 * MS  # the first try started 5 ms before the one the decode used
    again = [ln.replace(f'"startTimeUnixNano":"{T0_CASE + 400_000}"', f'"startTimeUnixNano":"{early}"') for ln in again]
    ingest_text(archive_path, "".join(again + lines))
    (want,) = json.loads((case / "expected.json").read_text())["requests"]
    assert rows(archive_path, "SELECT request_id, frontend_ms, e2e_ms FROM requests") == [
        (want["request_id"], pytest.approx(want["frontend_ms"]), pytest.approx(want["e2e_ms"]))
    ]
