"""The scope a derivation reads (derive/pending.py `_scope`): exactly the spans of the pending traces, whatever
order their batches landed in, read in place where they are the newest and copied where they are not."""

from __future__ import annotations

import random

import duckdb
import pytest

from budgetscope.derive.pending import _scope


def _working_set(rng: random.Random, spans: int, traces: int, pending: float, nulls: bool):
    con = duckdb.connect()
    con.execute("CREATE TABLE spans (trace_id VARCHAR, span_id VARCHAR, batch_id BIGINT)")
    rows = [
        (
            f"t{rng.randrange(traces)}",
            f"s{i}",
            None if nulls and rng.random() < 0.05 else rng.randrange(1, 40),
        )
        for i in range(spans)
    ]
    con.executemany("INSERT INTO spans VALUES (?, ?, ?)", rows)
    con.execute("CREATE TABLE pending_traces (trace_id VARCHAR)")
    chosen = sorted({t for t, _, _ in rows if rng.random() < pending})
    if chosen:
        con.executemany("INSERT INTO pending_traces VALUES (?)", [(t,) for t in chosen])
    return con


def _pending_spans(con, relation: str) -> list:
    return con.execute(f"SELECT trace_id, span_id, batch_id FROM {relation} ORDER BY span_id").fetchall()


@pytest.mark.parametrize("seed", range(12))
def test_the_scope_is_every_span_of_the_pending_traces_and_no_other(seed):
    rng = random.Random(seed)
    con = _working_set(rng, spans=300, traces=rng.choice([5, 40, 200]), pending=rng.random(), nulls=seed % 3 == 0)
    want = _pending_spans(con, "(SELECT * FROM spans WHERE trace_id IN (SELECT trace_id FROM pending_traces))")
    assert _pending_spans(con, _scope(con)) == want


def test_the_newest_spans_are_read_in_place_and_only_older_spans_of_pending_traces_copied():
    con = duckdb.connect()
    con.execute("CREATE TABLE spans (trace_id VARCHAR, span_id VARCHAR, batch_id BIGINT)")
    # batch 1: a (derived) and b's first span; batch 2: c (derived); batch 3: b's second span and d (pending)
    con.execute(
        "INSERT INTO spans VALUES ('a', 'a1', 1), ('b', 'b1', 1), ('c', 'c1', 2), ('b', 'b2', 3), ('d', 'd1', 3)"
    )
    con.execute("CREATE TABLE pending_traces AS SELECT * FROM (VALUES ('b'), ('d')) t(trace_id)")
    assert _scope(con) == "bs_scope"
    assert con.execute("SELECT span_id FROM bs_scope_old").fetchall() == [("b1",)]
    assert [s for _, s, _ in _pending_spans(con, "bs_scope")] == ["b1", "b2", "d1"]


def test_when_every_span_held_is_pending_the_scope_is_the_table_itself():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE spans AS SELECT * FROM (VALUES ('a', 'a1', 1), ('b', 'b1', 2)) t(trace_id, span_id, batch_id)"
    )
    con.execute("CREATE TABLE pending_traces AS SELECT * FROM (VALUES ('a'), ('b')) t(trace_id)")
    assert _scope(con) == "spans"


def test_a_span_without_a_batch_is_kept_out_unless_its_trace_is_pending():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE spans AS SELECT * FROM (VALUES ('a', 'a1', NULL), ('b', 'b0', NULL), ('b', 'b1', 2)) "
        "t(trace_id, span_id, batch_id)"
    )
    con.execute("CREATE TABLE pending_traces AS SELECT * FROM (VALUES ('b')) t(trace_id)")
    assert [s for _, s, _ in _pending_spans(con, _scope(con))] == ["b0", "b1"]
