"""Copies of spans among the collector's accepted batches (`Lander.accept` / `land_deferred`): the span set the
batches are decoded with is kept across landings, so a landing that repeats no pair looks for copies only among
the spans landed before the set; spans that reached the working set another way, or before the set was replaced,
are still looked for."""

from __future__ import annotations

import json

import pytest

from budgetscope.archive.spool import RawBatch
from budgetscope.ingest import jsonsql, lander, otlp_fast
from budgetscope.opener import Archive
from conftest import rows
from otlp_wire import MS, T0, export, native_request

pytestmark = pytest.mark.skipif(not otlp_fast.AVAILABLE, reason="the C decoder is not built")


def _batch(spans: list[dict], n: int) -> RawBatch:
    return RawBatch(json.dumps(export(spans)).encode(), "otlp-json", "test", f"export {n}")


def _accept_and_land(a, spans: list[dict], n: int) -> None:
    assert a.lander.accept([_batch(spans, n)]) == [True]
    a.lander.land_deferred()


def _request(k: int) -> list[dict]:
    return native_request(arrival=T0 + k * 1000 * MS)[1]


def _stored(path) -> tuple[int, int]:
    """(spans, distinct (trace_id, span_id) pairs) the archive holds."""
    return rows(path, "SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans")[0]


def test_a_copy_in_a_later_accepted_export_lands_once(tmp_path):
    first, second = _request(0), _request(1)
    a = Archive(tmp_path / "a", durable=True, compact=False)
    try:
        _accept_and_land(a, first, 1)
        _accept_and_land(a, [first[0], *second], 2)  # other bytes, one span again
        a.commit()
    finally:
        a.close()
    assert _stored(tmp_path / "a") == (len(first) + len(second),) * 2
    assert rows(tmp_path / "a", "SELECT sum(duplicate_spans) FROM ingest_batches") == [(1,)]


def test_a_copy_of_a_span_another_path_landed_is_found(tmp_path):
    """Spans landed by `ingest` (the batches `accept` did not take) never joined the accepted batches' span set:
    a copy of one arriving in an accepted export is found all the same."""
    first, other, third = _request(0), _request(1), _request(2)
    a = Archive(tmp_path / "a", durable=True, compact=False)
    try:
        _accept_and_land(a, first, 1)
        a.ingest([_batch(other, 2)], derive=False)
        _accept_and_land(a, [other[0], *third], 3)
        a.commit()
    finally:
        a.close()
    assert _stored(tmp_path / "a") == (len(first) + len(other) + len(third),) * 2


def test_copies_of_spans_landed_before_the_span_set_was_replaced_are_found(tmp_path, monkeypatch):
    monkeypatch.setattr(lander, "ACCEPTED_SET_PAIRS", 1)  # a new set after every landing
    first, second, third = _request(0), _request(1), _request(2)
    a = Archive(tmp_path / "a", durable=True, compact=False)
    try:
        _accept_and_land(a, first, 1)
        _accept_and_land(a, second, 2)
        _accept_and_land(a, [first[0], second[0], *third], 3)
        a.commit()
    finally:
        a.close()
    assert _stored(tmp_path / "a") == (len(first) + len(second) + len(third),) * 2
    assert rows(tmp_path / "a", "SELECT sum(duplicate_spans) FROM ingest_batches") == [(2,)]


def test_a_landing_that_repeats_no_pair_looks_only_before_the_span_set(tmp_path, monkeypatch):
    """The join that finds copies of stored spans is asked to look only among the spans landed before the
    accepted batches' span set (here: none), not among every span landed since."""
    looked: list = []
    land = jsonsql.land

    def spy(con, decoded, raw, expected, first_id, older_than=None):
        looked.append(older_than)
        return land(con, decoded, raw, expected, first_id, older_than)

    monkeypatch.setattr(jsonsql, "land", spy)
    a = Archive(tmp_path / "a", durable=True, compact=False)
    try:
        for k in range(3):
            _accept_and_land(a, _request(k), k + 1)
        (first_id, ingested), *_ = a.con.execute(
            "SELECT min(batch_id), max(batch_id) + 1 FROM ingest_batches"
        ).fetchall()
        a.ingest([_batch(_request(3), 4)], derive=False)  # another path: the next landing looks before it too
        _accept_and_land(a, _request(4), 5)
        a.commit()
    finally:
        a.close()
    assert looked[:3] == [0, first_id, first_id]  # an empty working set: no look at all
    assert looked[-1] == ingested + 1  # the spans the set never saw are below it


def test_accepted_batches_wait_as_columns_with_their_bytes_in_the_spool(tmp_path, monkeypatch):
    """What `accept` took waits to land as its decoded columns, and only those count against the collector's
    limits (`held_bytes`, and their spans `held_spans`), until they have landed: each batch's bytes are a
    read-only view of the spool file (not the request's buffer), read again only when a batch goes to the
    reference decoder (a copy: the tests above)."""
    a = Archive(tmp_path / "a", durable=True, compact=False)
    try:
        batches = [_batch(_request(k), k) for k in range(3)]
        assert a.lander.accept(batches) == [True] * 3
        (entry,) = a.lander._deferred
        assert [bytes(b.payload) for b in entry.batches] == [b.payload for b in batches]
        assert all(isinstance(b.payload, memoryview) and b.payload.readonly for b in entry.batches)
        held = sum(t.nbytes for t, _ in entry.parts)
        spans = sum(entry.spans)
        assert a.lander.held_bytes == held > 0 and a.lander.held_spans == a.lander.deferred_spans == spans > 0
        during = []
        ingest = a.lander._ingest
        monkeypatch.setattr(
            a.lander,
            "_ingest",
            lambda *x, **k: during.append((a.lander.held_bytes, a.lander.held_spans)) or ingest(*x, **k),
        )
        a.lander.land_deferred()
        assert during == [(held, spans)]
        assert a.lander.held_bytes == a.lander.deferred_spans == a.lander.held_spans == 0
        a.commit()
    finally:
        a.close()
    assert _stored(tmp_path / "a") == (sum(len(_request(k)) for k in range(3)),) * 2
