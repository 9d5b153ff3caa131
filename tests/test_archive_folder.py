"""The folder archive: the same rows and report as the single file, commits readers see whole, compaction,
the writer lock, crash leftovers, conversion."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from budgetscope import cores as cores_module
from budgetscope.archive import compaction, directory
from budgetscope.archive import manifest as mf
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.holding import HOLDING
from budgetscope.ingest import batches, lander
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from conftest import rows
from otlp_wire import MS, T0, export, jsonl, native_request

ROWS = "SELECT * FROM requests ORDER BY trace_id, server_span_id"


def _report(path):
    """The report, its floats rounded to 9 significant digits (DuckDB sums in whatever order its threads
    meet the rows, so the last digits of a mean can differ between two reads of the same rows)."""
    from pathlib import Path

    from budgetscope.analysis import build_report, load_budgets

    budgets = load_budgets(Path(__file__).parent.parent / "sample_traces" / "budgets.toml")
    with Archive(path, read_only=True) as r:
        rep = build_report(r.con, budgets)
    return json.loads(json.dumps(rep, default=str), parse_float=lambda x: float(f"{float(x):.9g}"))


def _ingest(path, *files) -> None:
    with Archive(path) as a:
        for f in files:
            a.ingest(read_batches(f))


@pytest.fixture(params=["spans", "bytes"])
def small_parts(monkeypatch, request):
    """Many commits per file, and a working set emptied after each: traces straddle commits, are read back
    from the segments and re-derived (which writes requests_deletes). Parts and emptying by spans counted, or
    by bytes (of batches landed; of attributes and resources held)."""
    monkeypatch.setattr(batches, "CHUNK_BYTES", 32 << 10)
    if request.param == "spans":
        monkeypatch.setattr(lander, "DERIVE_EVERY_SPANS", 700)
        monkeypatch.setattr(directory, "MEMORY_SPANS", 1)
    else:
        monkeypatch.setattr(lander, "DERIVE_EVERY_BYTES", 96 << 10)
        monkeypatch.setattr(directory, "MEMORY_BYTES", 1)


@pytest.mark.parametrize("limit", ["spans", "bytes", None])
def test_ingest_lets_go_of_published_spans_once_it_holds_enough(tmp_path, monkeypatch, limit):
    """`ingest`'s working set is emptied of what it published once it holds MEMORY_SPANS spans or
    MEMORY_BYTES of attributes and resources, whichever comes first; else it keeps them."""
    monkeypatch.setattr(directory, "MEMORY_SPANS", 1 if limit == "spans" else 10**9)
    monkeypatch.setattr(directory, "MEMORY_BYTES", 1 if limit == "bytes" else 1 << 40)
    f = tmp_path / "t.jsonl"
    spans = write_jsonl(f, SyntheticSpec(num_requests=50, spans_per_line=64))
    with Archive(tmp_path / "a") as a:
        a.ingest(read_batches(f))
        (held,) = a.con.execute("SELECT count(*) FROM spans").fetchone()
    assert held == (spans if limit is None else 0)
    assert rows(tmp_path / "a", "SELECT count(*) FROM spans") == [(spans,)]


def test_folder_and_file_give_the_same_rows_and_report(tmp_path, small_parts, monkeypatch):
    monkeypatch.setattr(compaction, "plan", lambda *a: [])  # readers apply requests_deletes themselves
    f = tmp_path / "t.jsonl"
    write_jsonl(f, SyntheticSpec(num_requests=500, tiers=("interactive", "batch"), spans_per_line=64))
    _ingest(tmp_path / "a.duckdb", f)
    _ingest(tmp_path / "a", f)
    m = mf.read(tmp_path / "a")
    assert m.publish_seq > 3 and m.rows("requests_deletes") > 0  # the test did exercise re-derivation
    assert rows(tmp_path / "a", ROWS) == rows(tmp_path / "a.duckdb", ROWS)
    assert rows(tmp_path / "a", "SELECT count(*) FROM requests") == [(500,)]
    assert _report(tmp_path / "a") == _report(tmp_path / "a.duckdb")


def test_client_and_server_spans_ingested_apart_join(tmp_path):
    """The load generator's file and the server's file, ingested by two commands: the second reads the
    first's spans back and re-derives, superseding the client-only rows."""
    f = tmp_path / "t.jsonl"
    write_jsonl(f, SyntheticSpec(num_requests=200, spans_per_line=64))
    lines = f.read_text().splitlines(keepends=True)
    client, server = tmp_path / "client.jsonl", tmp_path / "server.jsonl"
    client.write_text("".join(x for x in lines if "synthetic-loadgen" in x))
    server.write_text("".join(x for x in lines if "synthetic-loadgen" not in x))
    _ingest(tmp_path / "a.duckdb", f)
    _ingest(tmp_path / "a", client)
    assert rows(tmp_path / "a", "SELECT count(*), count(server_span_id) FROM requests") == [(200, 0)]
    _ingest(tmp_path / "a", server)
    assert rows(tmp_path / "a", ROWS) == rows(tmp_path / "a.duckdb", ROWS)
    _ingest(tmp_path / "a", server, client)  # again: nothing changes
    assert rows(tmp_path / "a", ROWS) == rows(tmp_path / "a.duckdb", ROWS)
    assert rows(tmp_path / "a", "SELECT count(*) FROM spans") == rows(
        tmp_path / "a.duckdb", "SELECT count(*) FROM spans"
    )


def test_compaction_leaves_one_segment_an_ended_hour_and_the_same_rows(tmp_path, small_parts, monkeypatch):
    monkeypatch.setattr(compaction, "COLD_AFTER_S", 0.0)
    f = tmp_path / "t.jsonl"
    write_jsonl(f, SyntheticSpec(num_requests=500, tiers=("interactive", "batch"), spans_per_line=64))
    _ingest(tmp_path / "a.duckdb", f)
    _ingest(tmp_path / "a", f)  # 2026-01-01: every hour has ended, so each is merged whole at once
    m = mf.read(tmp_path / "a")
    per_hour = {}
    for s in m.segments:
        if s.table != "ingest_batches":  # received now: this hour's, merged by level
            per_hour[(s.table, s.hour)] = per_hour.get((s.table, s.hour), 0) + 1
    assert set(per_hour.values()) == {1} and not m.files("requests_deletes")
    assert any(s.level > 0 for s in m.segments)
    assert rows(tmp_path / "a", ROWS) == rows(tmp_path / "a.duckdb", ROWS)


def test_an_ended_hour_still_receiving_segments_is_merged_by_level_not_whole():
    """Merging a backfilled hour whole at each commit rewrote it again and again; it waits until quiet."""
    import time

    def seg(i, committed_ns):
        return mf.Segment("spans", f"spans/x/{i}.parquet", 10, 1000, T0, T0 + MS, i, 0, committed_ns)

    now = time.time_ns()
    busy = mf.Manifest(segments=tuple(seg(i, now - i * 10**9) for i in range(3)))
    assert compaction.plan(busy, now) == []  # T0's hour ended long ago, but it got a segment 0 s ago
    quiet = mf.Manifest(segments=tuple(seg(i, now - 700 * 10**9) for i in range(3)))
    assert [len(j) for j in compaction.plan(quiet, now)] == [3]
    busy = mf.Manifest(segments=tuple(seg(i, now) for i in range(compaction.FANIN)))
    assert [len(j) for j in compaction.plan(busy, now)] == [compaction.FANIN]  # by level


def test_compaction_of_the_current_hour_is_tiered(tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(compaction, "FANIN", 4)
    now = time.time_ns() // mf.HOUR_NS * mf.HOUR_NS + MS  # within this hour, so never merged as ended
    with Archive(tmp_path / "a") as a:
        for i in range(40):  # 40 commits of one request each
            p = tmp_path / f"{i}.jsonl"
            p.write_text(jsonl(export(native_request(arrival=now + i * MS)[1])))
            a.ingest(read_batches(p))
        a.compactor.run_once(_duckdb())
    m = mf.read(tmp_path / "a")
    spans = m.files("spans")
    assert sum(s.rows for s in spans) == 240 and len(spans) < 2 * 4  # 40 commits, a handful of segments
    assert {s.level for s in spans} >= {1, 2}
    assert rows(tmp_path / "a", "SELECT count(*), count(DISTINCT trace_id) FROM requests") == [(40, 40)]


@pytest.mark.parametrize("late_s", [0.0, 0.5])
def test_a_collectors_close_interrupts_a_merge_and_starts_none(tmp_path, monkeypatch, late_s):
    """A durable writer (the collector's) stops its compactor at once: a merge under way is interrupted, none
    other starts, the manifest is as the last commit left it. Its merges run at nice 10, and a stop that waited
    for them took minutes on two busy cores (the kill -9 test's SIGTERM wait, issue 37). `late_s`: the merge's
    statement starts that long after the merge began (its thread, at nice 10, waiting for a core): an interrupt
    sent before it starts is lost, and the close had waited for the whole statement (the full suite, 2 cores)."""
    import threading
    import time

    path = tmp_path / "a"
    a = Archive(path, durable=True)
    p = tmp_path / "t.jsonl"
    p.write_text(jsonl(export(native_request()[1])))
    a.ingest(read_batches(p))
    a.commit()
    seg = a.manifest.segments[0]
    started, merges = threading.Event(), []

    def fake_merge_that_never_ends(self, con, job):  # a fake: a real DuckDB query, far longer than any merge
        merges.append(job)
        started.set()
        time.sleep(late_s)
        con.execute("SELECT sum(hash(i)) FROM range(1000000000000) t(i)").fetchall()

    monkeypatch.setattr(compaction.Compactor, "_merge", fake_merge_that_never_ends)
    monkeypatch.setattr(compaction, "plan", lambda *args, **kwargs: [[seg], [seg]])
    a.compactor.poke()
    assert started.wait(30)
    before = mf.read(path)
    closing = threading.Thread(target=a.close, daemon=True)
    closing.start()
    closing.join(60)
    assert not closing.is_alive(), "close waited for the merge"
    assert len(merges) == 1 and mf.read(path) == before
    assert rows(path, "SELECT count(*) FROM spans") == [(6,)]


def _duckdb():
    import duckdb

    return duckdb.connect()


def test_one_writer_and_a_clear_error_for_a_second(archive_path):
    with Archive(archive_path):
        with pytest.raises(
            ArchiveError,
            match=r"is being written by another process \(pid \d+\); an archive has "
            r"one writer, and readers need no lock$",
        ):
            Archive(archive_path)
        with Archive(archive_path, read_only=True) as r:  # readers need no lock
            assert r.counts()["spans"] == 0


def test_a_crash_between_segments_and_manifest_leaves_nothing_visible(tmp_path, monkeypatch):
    """Segments written but not committed are not read, and the next writer deletes them and publishes
    again what its working set holds."""
    path = tmp_path / "a"
    f = tmp_path / "t.jsonl"
    f.write_text(jsonl(export(native_request()[1])))

    def crash(*_):
        raise OSError("disk gone")

    a = Archive(path, durable=True, compact=False)
    a.ingest(read_batches(f), derive=False)  # landed in the durable working set, as the collector acks
    with monkeypatch.context() as m:
        m.setattr(mf, "write", crash)
        with pytest.raises(OSError):
            a.commit()
    _die(a)
    left = sorted(p.name for p in (path / "spans").rglob("*.parquet"))
    assert left and rows(path, "SELECT count(*) FROM spans") == [(0,)]
    with Archive(path, durable=True):
        assert not any(p.name in left for p in (path / "spans").rglob("*.parquet"))
    assert rows(path, "SELECT count(*) FROM spans") == [(6,)] and rows(path, "SELECT count(*) FROM requests") == [(1,)]


def _die(a) -> None:
    """The writer's process ends here, without a commit: nothing of it runs again."""
    if a.compactor is not None:
        a.compactor.close()
    a.hot.close()
    a.spool.close()
    a._lock.release()


def test_what_was_acknowledged_survives_a_crash_before_its_commit(tmp_path):
    """ingest(derive=False) returns (the collector acknowledges) with the batches' bytes in the spool; a
    writer that dies before publishing them leaves them to the next, which lands them once."""
    path, f = tmp_path / "a", tmp_path / "t.jsonl"
    f.write_text(jsonl(export(native_request()[1]), export(native_request(arrival=T0 + 9 * MS, tier="batch")[1])))
    a = Archive(path, durable=True, compact=False)
    rep = a.ingest(read_batches(f), derive=False)
    assert rep.batches_landed == 2 and rows(path, "SELECT count(*) FROM spans") == [(0,)]
    assert len(list(a.spool.batches())) == 2
    _die(a)
    with Archive(path, durable=True) as b:
        assert list(b.spool.batches()) == []  # published: the spool is emptied
    assert rows(path, "SELECT count(*), count(DISTINCT span_id) FROM spans") == [(12, 12)]
    assert rows(path, "SELECT count(*) FROM requests") == [(2,)]
    assert rows(path, "SELECT count(*) FROM ingest_batches") == [(2,)]


def test_a_crash_after_the_manifest_but_before_the_spool_was_emptied_lands_nothing_twice(tmp_path, monkeypatch):
    path, f = tmp_path / "a", tmp_path / "t.jsonl"
    f.write_text(jsonl(export(native_request()[1])))
    a = Archive(path, durable=True, compact=False)
    a.ingest(read_batches(f), derive=False)
    monkeypatch.setattr(a.spool, "clear", lambda upto=None: None)  # the process dies right after the manifest
    a.commit()
    _die(a)
    monkeypatch.undo()
    with Archive(path, durable=True):
        pass
    assert rows(path, "SELECT count(*) FROM spans") == [(6,)]
    assert rows(path, "SELECT count(*), sum(spans_inserted) FROM ingest_batches") == [(1, 6)]


def test_a_torn_spool_record_was_never_acknowledged_and_is_ignored(tmp_path):
    from budgetscope.archive.spool import RawBatch, Spool

    sp = Spool(tmp_path / "spool")
    sp.append([RawBatch(b"one", "otlp-json", "otlp-http", "request 1"), RawBatch(b"two", "otlp-proto", "g", "r 2")])
    sp.append([RawBatch(b"three" * 100, "otlp-json", "otlp-http", "request 3")])
    sp.close()
    (f,) = (tmp_path / "spool").iterdir()
    whole = f.read_bytes()
    assert [(b.payload, b.format, b.origin, b.position) for b in Spool(f.parent).batches()] == [
        (b"one", "otlp-json", "otlp-http", "request 1"),
        (b"two", "otlp-proto", "g", "r 2"),
        (b"three" * 100, "otlp-json", "otlp-http", "request 3"),
    ]
    f.write_bytes(whole[:-7])  # cut short
    assert [b.payload for b in Spool(f.parent).batches()] == [b"one", b"two"]
    f.write_bytes(whole[:-7] + b"x" * 7)  # the right length, the wrong bytes
    assert [b.payload for b in Spool(f.parent).batches()] == [b"one", b"two"]


def test_spool_records_survive_short_writes_and_more_buffers_than_one_writev_takes(tmp_path, monkeypatch):
    """The spool writes its records' heads and payloads as they lie (os.writev): a write the kernel cuts short
    (a fake that takes at most 7 bytes a call, or stops in a buffer's middle) goes on where it stopped, and a
    group of more buffers than one call takes (two a record) is written whole and in order."""
    from budgetscope.archive import spool as spool_module
    from budgetscope.archive.spool import RawBatch, Spool

    batches = [
        RawBatch(memoryview(bytes([i % 251]) * (i % 13)), "otlp-proto", "g", f"r {i}")
        for i in range(spool_module._IOV_MAX)
    ]
    Spool(tmp_path / "many").append(batches)
    got = list(Spool(tmp_path / "many").batches())
    assert [(bytes(b.payload), b.position) for b in got] == [(bytes(b.payload), b.position) for b in batches]
    real_writev = os.writev
    calls = []

    def fake_writev_seven_bytes_at_most(fd, buffers):
        calls.append(1)
        assert len(calls) < 5000, "the spool writes the same bytes again and again"
        return real_writev(fd, [b"".join(buffers)[:7]])

    monkeypatch.setattr(spool_module.os, "writev", fake_writev_seven_bytes_at_most)
    sp = Spool(tmp_path / "short")
    sp.append(batches[:40])
    sp.append([RawBatch(b"x" * 1000, "otlp-json", "h", "last")])
    got = list(Spool(tmp_path / "short").batches())
    assert [bytes(b.payload) for b in got] == [bytes(b.payload) for b in batches[:40]] + [b"x" * 1000]


def test_spool_views_are_the_payloads_written_and_outlive_their_file(tmp_path, monkeypatch):
    """`append(views=True)` hands back each payload as a read-only view of the file it was written to: the same
    bytes at any offset (appends that start mid-page, payloads over several pages, writes the kernel cut short:
    a fake), and still readable once the file is deleted (a commit empties the spool while batches wait)."""
    from budgetscope.archive import spool as spool_module
    from budgetscope.archive.spool import RawBatch, Spool

    sp = Spool(tmp_path / "s")
    groups = [
        [RawBatch(b"one", "otlp-json", "h", "1"), RawBatch(b"", "otlp-json", "h", "2")],
        [RawBatch(bytes(range(256)) * 100, "otlp-proto", "g", "3")],  # 25,600 bytes from offset 90-odd
        [RawBatch(memoryview(b"x" * 70_000)[5:], "otlp-json", "h", "4"), RawBatch(b"tail", "otlp-json", "h", "5")],
    ]
    real_writev = os.writev
    monkeypatch.setattr(spool_module.os, "writev", lambda fd, bufs: real_writev(fd, [b"".join(bufs)[:4097]]))
    views = [sp.append(g, views=True) for g in groups]
    for g, vs in zip(groups, views):
        assert [bytes(v) for v in vs] == [bytes(b.payload) for b in g]
        assert all(v.readonly for v in vs)
    assert sp.append([], views=True) == [] and sp.append([]) is None
    sp.clear()
    assert not list((tmp_path / "s").glob("*.spool"))
    assert [bytes(v) for vs in views for v in vs] == [bytes(b.payload) for g in groups for b in g]


def test_a_torn_manifest_is_one_line_and_nothing_is_written(tmp_path):
    path = tmp_path / "a"
    _ingest(path, _one(tmp_path))
    (path / mf.MANIFEST).write_text('{"format": "budgetscope-archive", "vers')
    for mode in ({"read_only": True}, {}):
        with pytest.raises(ArchiveError, match=r"manifest.json cannot be read \("):
            Archive(path, **mode)
    assert (path / mf.MANIFEST).read_text() == '{"format": "budgetscope-archive", "vers'


def _one(tmp_path):
    p = tmp_path / "one.jsonl"
    p.write_text(jsonl(export(native_request(client=(5, 3))[1]), export(native_request(arrival=T0 + 10 * MS)[1])))
    return p


def test_convert_keeps_rows_and_report(tmp_path):
    from budgetscope.archive.convert import convert

    # a legacy single-file archive made here: the shipped samples are folders (a .duckdb file is tied to the
    # DuckDB storage version that wrote it)
    sample = tmp_path / "legacy.duckdb"
    f = tmp_path / "t.jsonl"
    write_jsonl(f, SyntheticSpec(num_requests=200, spans_per_line=64))
    _ingest(sample, f, _one(tmp_path))
    convert(sample, tmp_path / "c")
    for table in ("spans", "ingest_batches", "gpu_samples"):
        assert rows(tmp_path / "c", f"SELECT * FROM {table} ORDER BY ALL") == rows(
            sample, f"SELECT * FROM {table} ORDER BY ALL"
        )
    assert rows(tmp_path / "c", ROWS) == rows(sample, ROWS)
    assert _report(tmp_path / "c") == _report(sample)
    with pytest.raises(ArchiveError, match="already exists; convert writes a new archive$"):
        convert(sample, tmp_path / "c")
    _ingest(tmp_path / "c", _one(tmp_path))  # a converted archive takes new batches
    assert (
        rows(tmp_path / "c", "SELECT count(*) FROM requests")[0][0]
        == rows(sample, "SELECT count(*) FROM requests")[0][0] + 2
    )


def test_polars_and_duckdb_read_the_same_requests(tmp_path, small_parts):
    pl = pytest.importorskip("polars")
    import budgetscope.archive

    f = tmp_path / "t.jsonl"
    write_jsonl(f, SyntheticSpec(num_requests=300, spans_per_line=64))
    _ingest(tmp_path / "a", f)
    with budgetscope.archive.open(tmp_path / "a") as r:
        lf = r.lazy("requests")
        assert isinstance(lf, pl.LazyFrame)
        got = lf.sort("trace_id").select("trace_id", "queue_ms", "client_ttft_ms").collect().rows()
        want = r.requests.order("trace_id").select("trace_id, queue_ms, client_ttft_ms").fetchall()
        assert got == want and len(got) == 300
        assert r.lazy("spans").select(pl.len()).collect().item() == r.spans.aggregate("count(*)").fetchall()[0][0]
        with pytest.raises(ArchiveError, match="no stored table 'engine_steps'"):
            r.lazy("engine_steps")


def test_a_scrape_is_readable_while_its_writer_is_open(archive_path):
    from budgetscope.sources.server_metrics import land

    with Archive(archive_path) as a:
        n = land(
            a,
            "vllm:num_requests_waiting 3\n",
            instance="http://h:8000/metrics",
            service_name="h:8000",
            ts_ns=T0,
            origin="scrape",
        )
        assert n == 1 and rows(archive_path, "SELECT metric, value FROM server_metrics") == [
            ("vllm:num_requests_waiting", 3.0)
        ]


def _server_then_client(tmp_path, arrival: int):
    """One request's server spans and its client span, as two files (the client's exporter sends later)."""
    _, spans = native_request(arrival=arrival, client=(5, 3))
    server, client = tmp_path / "server.jsonl", tmp_path / "client.jsonl"
    server.write_text(jsonl(export([s for s in spans if s["name"] != "llm.client.request"])))
    client.write_text(jsonl(export([s for s in spans if s["name"] == "llm.client.request"], service="loadgen")))
    return server, client


ONE_WHOLE_ROW = "SELECT count(*), bool_and(has_client_span), min(network_ms), min(queue_ms) FROM requests"


@pytest.mark.parametrize("ahead_s", [None, 5, 3600 * 24])
def test_a_late_span_of_a_trace_the_working_set_dropped_is_read_back_whatever_its_clock(tmp_path, ahead_s):
    """hold 0: every commit empties the durable working set. A late client span still joins its request: the
    dropped spans are read back from the segments and the server-only row is superseded, whatever the span's
    timestamps (in the past; or after the drop: a long decode, a producer whose clock runs ahead)."""
    import time

    arrival = T0 if ahead_s is None else time.time_ns() + ahead_s * 10**9
    server, client = _server_then_client(tmp_path, arrival)
    a = Archive(tmp_path / "a", durable=True, holding=replace(HOLDING, hold_s=0), compact=False)
    try:
        a.ingest(read_batches(server), derive=False)
        a.commit()
        assert a.con.execute("SELECT count(*) FROM spans").fetchall() == [(0,)]
        a.ingest(read_batches(client), derive=False)
        a.commit()
    finally:
        a.close()
    assert rows(tmp_path / "a", ONE_WHOLE_ROW) == [(1, True, 8.0, 10.0)]


def test_a_late_span_reads_back_where_its_dropped_trace_lies_only(tmp_path, monkeypatch):
    """The collector knows where the spans of a trace it dropped lie: a late span of it reads back the segments
    that meet that range, not every segment within an hour of the new span (at 100,000 spans/s, a busy hour's
    segments whole, at every commit: docs/benchmarks.md, "Live SLIs")."""
    from budgetscope.archive import segments

    server, client = _server_then_client(tmp_path, T0)
    other = tmp_path / "other.jsonl"  # another trace ten minutes later: the same hour, a segment of its own
    other.write_text(jsonl(export(native_request(arrival=T0 + 600_000 * MS)[1])))
    a = Archive(tmp_path / "a", durable=True, holding=replace(HOLDING, hold_s=0), compact=False)
    read: list[list] = []
    listed = segments.sql_list
    monkeypatch.setattr(segments, "sql_list", lambda root, segs: read.append(list(segs)) or listed(root, segs))
    try:
        for f in (server, other):
            a.ingest(read_batches(f), derive=False)
            a.commit()
        assert a.con.execute("SELECT count(*) FROM spans").fetchall() == [(0,)]
        read.clear()
        a.ingest(read_batches(client), derive=False)
        a.commit()
    finally:
        a.close()
    both = "SELECT count(*), count(*) FILTER (WHERE has_client_span), min(network_ms) FROM requests"
    assert rows(tmp_path / "a", both) == [(2, 1, 8.0)]
    spans_read = [s for segs in read for s in segs if s.table == "spans"]
    assert len(spans_read) == 1 and spans_read[0].min_ns <= T0 < T0 + 600_000 * MS > spans_read[0].max_ns


def test_a_restarted_collector_reads_back_a_trace_the_last_one_published(tmp_path):
    """A new writer holds none of the published traces: the late spans of one the last writer published (their
    producer's clock ahead of the collector's) are derived with its first spans, as one row."""
    import time

    for f in _server_then_client(tmp_path, time.time_ns() + 60 * 10**9):
        a = Archive(tmp_path / "a", durable=True, compact=False)
        try:
            a.ingest(read_batches(f), derive=False)
        finally:
            a.close()
    assert rows(tmp_path / "a", ONE_WHOLE_ROW) == [(1, True, 8.0, 10.0)]


def test_a_writer_that_fails_to_open_holds_no_lock(tmp_path, monkeypatch):
    """A writer whose opening commit fails (a full disk) let go of nothing it opened: the writer lock stayed
    held, so the collector's next reopen found the archive locked by itself."""
    root = tmp_path / "a"
    directory.DirectoryArchive(root).close()

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(directory.DirectoryArchive, "after_derive", full)
        with pytest.raises(OSError, match="No space"):
            Archive(root, durable=True)
    Archive(root, durable=True).close()  # the lock is free


def _files(tmp_path, n: int):
    """`n` files of 6,000 requests each (20 MB of spans, 4 MB of `requests` rows: DuckDB's own threshold is 16)."""
    files = [tmp_path / f"t{i}.jsonl" for i in range(n)]
    for i, f in enumerate(files):
        write_jsonl(f, SyntheticSpec(num_requests=6000, seed=i + 1))
    return files


TABLE_BYTES = "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() WHERE tag = 'IN_MEMORY_TABLE'"
"""The memory DuckDB's in-memory tables hold."""


def _kinds(a, table: str) -> set[str]:
    return {c for (c,) in a.con.execute(f"SELECT DISTINCT compression FROM pragma_storage_info('{table}')").fetchall()}


def test_the_working_set_keeps_its_rows_as_they_landed(tmp_path):
    """The working set does not checkpoint on its own (duckdb_archive.WORKING_SET): DuckDB compressed an in-memory
    database whenever 16 MB had changed, the rows a commit had just derived at every other commit (a fifth of the
    collector's writer time), and every scan of them decompressed them again."""
    a = Archive(tmp_path / "a", durable=True, compact=False)
    try:
        for f in _files(tmp_path, 4):
            a.ingest(read_batches(f), derive=False)
            a.commit()
        assert a.con.execute("SELECT count(*) FROM requests").fetchall() == [(24000,)]
        assert _kinds(a, "requests") | _kinds(a, "spans") <= {"Uncompressed", "Constant"}
    finally:
        a.close()


def test_the_working_set_frees_what_it_dropped(tmp_path):
    """Without checkpoints of its own, the working set frees the memory of what it drops when it drops it (a
    DELETE keeps its rows' memory until a checkpoint), and its staging tables are dropped, not emptied."""
    a = Archive(tmp_path / "a", durable=True, holding=replace(HOLDING, hold_s=0), compact=False)

    def table_bytes() -> int:
        (n,) = a.con.execute(TABLE_BYTES).fetchone()
        return n

    try:
        for f in _files(tmp_path, 2):
            a.ingest(read_batches(f), derive=False)
        held = table_bytes()
        a.commit()
        assert a.con.execute("SELECT count(*) FROM spans").fetchall() == [(0,)]
        assert table_bytes() < held / 4, (held, table_bytes())
    finally:
        a.close()
    assert rows(tmp_path / "a", "SELECT count(*) FROM requests") == [(12000,)]


def test_the_staging_tables_give_their_memory_back_when_cleared():
    """The reference path's staging tables are emptied after each chunk: in a working set, which makes no checkpoint
    of its own, rows removed by DELETE would keep their memory for the writer's life."""
    from budgetscope.archive.duckdb_archive import DuckDBArchive
    from budgetscope.ingest import staging

    con = DuckDBArchive(":memory:").con
    staging.setup(con)
    for _ in range(3):
        con.execute("INSERT INTO staged (batch_id, attributes) SELECT range, repeat('x', 1000) FROM range(50000)")
        con.execute("INSERT INTO rejected SELECT range, 'bad' FROM range(1000)")
        staging.clear(con)
    assert con.execute(TABLE_BYTES).fetchone()[0] < 5 << 20
    assert con.execute("SELECT count(*) FROM staged").fetchone()[0] == 0
    con.close()


@pytest.mark.parametrize("cores, threads", [(1, 1), (2, 1), (16, 15)])
def test_the_collectors_working_set_leaves_a_core_to_its_own_threads(tmp_path, monkeypatch, cores, threads):
    """A durable writer (the collector's) runs DuckDB on one fewer thread than its cores (`cores.all_but_one`): its
    receivers and acceptor need the other. `ingest`'s writer keeps DuckDB's default, a thread a core."""
    monkeypatch.setattr(cores_module.os, "sched_getaffinity", lambda pid: set(range(cores)))
    setting = "SELECT current_setting('threads')"
    a = Archive(tmp_path / "c", durable=True, compact=False)
    try:
        assert a.con.execute(setting).fetchone()[0] == threads
        f = tmp_path / "t.jsonl"
        write_jsonl(f, SyntheticSpec(num_requests=50))
        a.ingest(read_batches(f), derive=False)
        a.commit()
        assert a.con.execute(setting).fetchone()[0] == threads  # as the writer left it after a commit
    finally:
        a.close()
    assert rows(tmp_path / "c", "SELECT count(*) FROM requests") == [(50,)]
    import duckdb

    default = duckdb.connect().execute(setting).fetchone()[0]
    a = Archive(tmp_path / "i", compact=False)
    try:
        assert a.con.execute(setting).fetchone()[0] == default
    finally:
        a.close()


def test_all_but_one_core_where_the_platform_tells_no_affinity(monkeypatch):
    """macOS has no `os.sched_getaffinity`: the cores counted are `os.cpu_count()`'s (a collector calling it
    unconditionally would fail to open its archive there)."""
    monkeypatch.delattr(cores_module.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(cores_module.os, "cpu_count", lambda: 4)
    assert cores_module.all_but_one() == 3
    monkeypatch.setattr(cores_module.os, "cpu_count", lambda: None)
    assert cores_module.all_but_one() == 1


def _block_memory(a) -> str:
    return a.con.execute("SELECT current_setting('block_allocator_memory')").fetchone()[0]


def _ingest_block_memory(tmp_path, requests: int) -> str:
    """The block memory of `ingest`'s working set (a writer not durable), which then lands `requests` whole."""
    a = Archive(tmp_path / "i", compact=False)
    try:
        kept = _block_memory(a)
        f = tmp_path / "t.jsonl"
        write_jsonl(f, SyntheticSpec(num_requests=requests))
        a.ingest(read_batches(f))
    finally:
        a.close()
    assert rows(tmp_path / "i", "SELECT count(*) FROM requests") == [(requests,)]
    return kept


@pytest.mark.parametrize("machine, kept", [(24 << 30, "1.0 GiB"), (2 << 30, "256.0 MiB"), (None, "1.0 GiB")])
def test_ingests_working_set_keeps_freed_blocks_and_the_collectors_gives_them_back(
    tmp_path, monkeypatch, machine, kept
):
    """A writer that is not durable (`ingest`, `import`, `scrape`) lets DuckDB keep freed memory blocks
    (`directory.BULK_BLOCK_MEMORY`, at most an eighth of the machine's memory); DuckDB never gives those back, so
    the durable writer (the collector's) keeps DuckDB's default, none."""
    sysconf = directory.os.sysconf

    def fake_sysconf(name):  # a fake of the machine's memory, page by page
        if machine is None:
            raise ValueError(name)
        return {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": machine // 4096}.get(name) or sysconf(name)

    monkeypatch.setattr(directory.os, "sysconf", fake_sysconf)
    assert _ingest_block_memory(tmp_path, 50) == kept
    a = Archive(tmp_path / "c", durable=True, compact=False)
    try:
        assert _block_memory(a) == "0 bytes"
    finally:
        a.close()


def test_a_duckdb_without_the_block_setting_still_ingests(tmp_path, monkeypatch):
    """DuckDB has `block_allocator_memory` since 1.5 and budgetscope takes 1.3 and later: where the setting is
    unknown (faked here by a name no DuckDB knows), the working set keeps DuckDB's default and the ingest lands."""
    monkeypatch.setattr(directory, "BLOCK_SETTING", "bs_no_such_setting")
    assert _ingest_block_memory(tmp_path, 20) == "0 bytes"
