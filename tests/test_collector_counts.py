"""What `collect` says it stored is what the archive holds: a real collector, real HTTP exports, the summary
checked against the archive's own tables."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from budgetscope.archive import manifest as mf
from budgetscope.archive.directory import SPOOL_DIR, DirectoryArchive
from budgetscope.archive.spool import RawBatch, Spool
from budgetscope.collector import Collector
from conftest import rows
from otlp_wire import export, native_request, to_proto


def _doc(i: int) -> dict:
    return export(
        [s for k in range(3) for s in native_request(arrival=1_700_000_000_000_000_000 + (i * 3 + k) * 10**9)[1]]
    )


def _send(port: int, docs: list[dict], proto: bool) -> None:
    with httpx.Client(timeout=30) as h:
        for d in docs:
            body, ctype = (to_proto(d), "application/x-protobuf") if proto else (json.dumps(d), "application/json")
            r = h.post(f"http://127.0.0.1:{port}/v1/traces", content=body, headers={"Content-Type": ctype})
            assert r.status_code == 200, r.text


def _stored(path) -> tuple[int, int]:
    return rows(path, "SELECT (SELECT count(*) FROM ingest_batches), (SELECT count(*) FROM spans)")[0]


def test_the_summary_counts_every_batch_and_span_the_archive_holds(archive_path, monkeypatch):
    # commits every 50 ms: many land the batches accepted since the lander's own landing (the lost reports)
    monkeypatch.setattr("budgetscope.collector.writer.DERIVE_EVERY_S", 0.05)
    docs = [_doc(i) for i in range(240)]
    with Collector(archive_path, grpc_port=None, http_port=0, linger_s=0.001) as c:
        senders = [threading.Thread(target=_send, args=(c.http_port, docs[k::4], k % 2 == 1)) for k in range(4)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
    stats = c.stats
    batches, spans = _stored(archive_path)
    assert (batches, spans) == (240, 240 * 3 * 6)
    assert (stats.batches, stats.batches_landed, stats.spans, stats.batches_failed) == (240, batches, spans, 0)
    assert stats.summary().startswith(
        f"240 batches (240 landed, 0 already stored, 0 rejected, 0 failed), {spans:,} spans"
    )


@pytest.mark.parametrize("num_left", [7, 400])
def test_what_an_earlier_collector_left_in_the_spool_is_counted_apart(archive_path, num_left):
    """It lands after the receivers listen, while exports are acknowledged into newer spool files: with 400
    batches left, the 40 sent at once race it; every span lands once, each counted on its side."""
    DirectoryArchive(archive_path).close()
    # as kill -9 leaves it: acknowledged batches in the spool, never published
    left = [
        RawBatch(json.dumps(_doc(1000 + i)).encode(), "otlp-json", "otlp-http", f"request {i}") for i in range(num_left)
    ]
    Spool(archive_path / mf.WRITER_DIR / SPOOL_DIR).append(left)
    docs = [_doc(i) for i in range(40)]
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        senders = [threading.Thread(target=_send, args=(c.http_port, docs[k::4], k % 2 == 1)) for k in range(4)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
    stats, spans = c.stats, 3 * 6
    assert _stored(archive_path) == (num_left + 40, (num_left + 40) * spans)
    assert rows(archive_path, "SELECT count(*) = count(DISTINCT (trace_id, span_id)) FROM spans") == [(True,)]
    assert (stats.batches, stats.batches_landed, stats.spans) == (40, 40, 40 * spans)
    assert (stats.recovered_batches, stats.recovered_spans, stats.spooled_batches) == (num_left, num_left * spans, 0)
    assert stats.summary().endswith(
        f"; landed at start: {num_left} batches ({num_left * spans:,} spans) an earlier collector had acknowledged"
    )


def test_every_batch_is_in_exactly_one_category_when_copies_race(archive_path):
    """Copies of one body sent at once share one batch in a group: each request used to count in `batches` while
    the batch counted once (15,786 batches vs 46 landed + 2,623 already stored). The first copy counts as the
    batch, the others as already stored; rejected copies each as rejected."""
    docs = [_doc(i) for i in range(10)]
    bad = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "no ids"}]}]}]}'

    def send_all() -> None:
        with httpx.Client(timeout=30) as h:
            for d in docs:
                body = to_proto(d)
                r = h.post(
                    f"http://127.0.0.1:{c.http_port}/v1/traces",
                    content=body,
                    headers={"Content-Type": "application/x-protobuf"},
                )
                assert r.status_code == 200, r.text
            r = h.post(
                f"http://127.0.0.1:{c.http_port}/v1/traces", content=bad, headers={"Content-Type": "application/json"}
            )
            assert r.status_code == 400

    with Collector(archive_path, grpc_port=None, http_port=0, linger_s=0.05) as c:
        senders = [threading.Thread(target=send_all) for _ in range(8)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
    s = c.stats
    assert s.batches == 8 * 11
    assert (s.batches_landed, s.batches_rejected, s.batches_failed, s.spooled_batches) == (10, 8, 0, 0)
    assert s.batches_landed + s.batches_already_stored + s.batches_rejected == s.batches
    assert _stored(archive_path) == (10, 10 * 3 * 6)


def test_every_metrics_sample_is_named_as_its_type_line_names_it():
    """Text format 0.0.4: Prometheus types a sample by the TYPE line of its own name, so a counter's TYPE line
    carries `_total` as its samples do; a histogram's samples add `_bucket`, `_sum`, `_count`."""
    import re

    from budgetscope.collector.self_metrics import render
    from budgetscope.collector.writer import CollectorStats

    text = render(CollectorStats(), 0, 1 << 20, 0).decode()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert "budgetscope_collector_batches_received_total" in types
    for name in re.findall(r"^([a-z_]+)[{ ]", text, re.M):
        family = name if name in types else re.sub(r"_(bucket|sum|count)$", "", name)
        assert family in types, name
        assert types[family] != "counter" or family.endswith("_total"), family


def test_a_group_shares_a_batch_between_copies_only():
    """Bodies of one group are told apart by their bytes: copies share a batch, bodies of one length that differ
    (compared, not hashed) and one body sent as JSON and as protobuf bytes do not."""
    from budgetscope.collector.pending import Ticket
    from budgetscope.collector.writer import _batches

    def ticket(body: bytes, fmt: str, n: int) -> Ticket:
        return Ticket(body, fmt, "otlp-http", f"request {n}", len(body))

    group = [
        ticket(b"aaaa", "otlp-json", 1),
        ticket(b"aaaaa", "otlp-json", 2),
        ticket(b"aaab", "otlp-json", 3),
        ticket(b"aaaa", "otlp-json", 4),
        ticket(b"aaaa", "otlp-proto", 5),
        ticket(b"aaab", "otlp-json", 6),
    ]
    batches, tickets = _batches(group)
    # in the order of each batch's first copy: the order they land in, which keeps the first of a span sent twice
    assert [(b.payload, b.format, b.position) for b in batches] == [
        (b"aaaa", "otlp-json", "request 1"),
        (b"aaaaa", "otlp-json", "request 2"),
        (b"aaab", "otlp-json", "request 3"),
        (b"aaaa", "otlp-proto", "request 5"),
    ]
    assert {p: [t.position for t in ts] for p, ts in tickets.items()} == {
        "request 1": ["request 1", "request 4"],
        "request 2": ["request 2"],
        "request 3": ["request 3", "request 6"],
        "request 5": ["request 5"],
    }
