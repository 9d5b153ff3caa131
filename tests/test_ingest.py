"""Ingest of OTLP trace exports as real producers write them, and every bad input the issue lists."""

from __future__ import annotations

import json

import pytest

from conftest import rows
from otlp_wire import MS, T0, export, jsonl, native_request, span, span_id, trace_id


def test_collector_jsonl_lands_spans_and_requests(archive_path, ingest_text):
    _, a = native_request(client=(5, 3))
    _, b = native_request(arrival=T0 + 10 * MS)
    rep = ingest_text(archive_path, jsonl(export(a), export(b)))
    assert (rep.batches, rep.batches_landed, rep.spans, rep.spans_inserted, rep.rejected) == (2, 2, 13, 13, [])
    assert rows(archive_path, "SELECT count(*) FROM spans") == [(13,)]
    assert rows(archive_path, "SELECT count(*), count(*) FILTER (WHERE has_client_span) FROM requests") == [(2, 1)]
    assert rows(archive_path, "SELECT source, count(*) FROM spans GROUP BY 1 ORDER BY 1") == [
        ("client", 1),
        ("native", 12),
    ]


def test_same_batch_twice_lands_once(archive_path, ingest_text):
    _, a = native_request()
    text = jsonl(export(a))
    ingest_text(archive_path, text)
    rep = ingest_text(archive_path, text)
    assert (rep.batches, rep.batches_already_ingested, rep.spans_inserted) == (1, 1, 0)
    assert rows(archive_path, "SELECT count(*) FROM spans") == [(6,)]
    assert rows(archive_path, "SELECT count(*) FROM ingest_batches") == [(1,)]


def test_duplicate_spans_in_other_batches_are_stored_once(archive_path, ingest_text):
    _, a = native_request()
    rep = ingest_text(archive_path, jsonl(export(a), export(a[:3], service="engine-2")))
    assert (rep.spans, rep.spans_inserted, rep.duplicate_spans) == (9, 6, 3)
    assert rows(
        archive_path, "SELECT span_count, spans_inserted, duplicate_spans FROM ingest_batches ORDER BY batch_id"
    ) == [(6, 6, 0), (3, 0, 3)]
    assert rows(archive_path, "SELECT DISTINCT service_name FROM spans") == [("engine",)]


def test_single_pretty_printed_document(archive_path, ingest_text):
    _, a = native_request()
    rep = ingest_text(archive_path, json.dumps(export(a), indent=2), "doc.json")
    assert (rep.spans, rep.rejected) == (6, [])
    assert rows(archive_path, "SELECT position FROM ingest_batches") == [("document",)]


def test_every_anyvalue_kind_and_int_forms(archive_path, ingest_text):
    tid, sid = trace_id(), span_id()
    s = span(
        tid,
        sid,
        "custom.op",
        T0,
        T0 + MS,
        attributes={
            "s": "x",
            "b": True,
            "i": 7,
            "d": 1.5,
            "arr": [1, 2.5, "z"],
            "nested": {"k": [1, {"deep": False}]},
            "raw": b"\x00\x01",
        },
    )
    s["startTimeUnixNano"] = T0  # a number, not a string
    s["attributes"].append({"key": "empty", "value": {}})
    rep = ingest_text(archive_path, jsonl(export([s])))
    assert rep.rejected == []
    ((attrs,),) = rows(archive_path, "SELECT attributes FROM spans")
    assert json.loads(attrs) == {
        "s": "x",
        "b": True,
        "i": 7,
        "d": 1.5,
        "arr": [1, 2.5, "z"],
        "nested": {"k": [1, {"deep": False}]},
        "raw": "AAE=",
        "empty": None,
    }
    assert rows(archive_path, "SELECT start_ns, end_ns, kind FROM spans") == [(T0, T0 + MS, "INTERNAL")]


def test_fast_path_and_reference_decoder_agree(archive_path, tmp_path, ingest_text):
    """The DuckDB fast path and the Python reference decoder store identical rows for the same spans."""
    from budgetscope.ingest import otlp_json
    from budgetscope.opener import Archive

    _, a = native_request(client=(4, 2), itl=[10.0, 12.5, 9.75], tenant="t1")
    a[0]["kind"] = "SPAN_KIND_SERVER"
    a[0]["attributes"] += [
        {"key": "flag", "value": {"boolValue": False}},
        {"key": "nan", "value": {"doubleValue": "NaN"}},
    ]
    doc = export(a)
    ingest_text(archive_path, jsonl(doc))
    ref_path = tmp_path / "ref.duckdb"
    with Archive(ref_path) as arch:
        tbl = otlp_json.decode(doc).to_arrow(1)
        arch.con.register("t", tbl)
        from budgetscope.ingest import staging

        arch.con.execute(f"INSERT INTO staged {staging.normalise('t')}")
        got = arch.con.execute("SELECT * EXCLUDE (batch_id, err) FROM staged ORDER BY span_id").fetchall()
    fast = rows(
        archive_path,
        "SELECT trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, service_name, "
        "scope_name, status_code, attributes, resource, source FROM spans ORDER BY span_id",
    )
    assert [tuple(r[:10]) + (json.loads(r[10]), json.loads(r[11]), r[12]) for r in fast] == [
        tuple(r[:10]) + (json.loads(r[10]), json.loads(r[11]), r[12]) for r in got
    ]


KINDS = [  # (the raw JSON of `kind`, what is stored): the OTLP enum's name, or UNSPECIFIED for anything else
    ("1e400", "UNSPECIFIED"),
    ("-1", "UNSPECIFIED"),
    (str(2**40), "UNSPECIFIED"),
    ("9", "UNSPECIFIED"),
    ("2.0", "UNSPECIFIED"),
    ("true", "UNSPECIFIED"),
    ('"foo"', "UNSPECIFIED"),
    ('"SPAN_KIND_SPAN_KIND_SERVER"', "UNSPECIFIED"),
    ("2", "SERVER"),
    ('"2"', "SERVER"),
    ('"server"', "SERVER"),
    ('"SPAN_KIND_CLIENT"', "CLIENT"),
    ("5", "CONSUMER"),
]
STATUSES = [('{"code": -1}', "UNSET"), ('{"code": 7}', "UNSET"), ('{"code": 2}', "ERROR"), ('{"code": "ok"}', "OK")]


def test_span_kinds_and_status_codes_outside_the_enum_are_stored_as_unspecified(archive_path, ingest_text):
    """`1e400`, `-1`, 2^40 were stored as-is; every path (C decoders, DuckDB, reference) now stores the OTLP enum
    value's name, or UNSPECIFIED (UNSET for a status) for what is none."""
    lines, want = [], {}
    for raw, name in KINDS:
        s = span(trace_id(), span_id(), "op", T0, T0 + MS)
        lines.append(json.dumps(export([s])).replace('"kind": 1', f'"kind": {raw}'))
        want[s["spanId"]] = name
    statuses = {}
    for raw, name in STATUSES:
        s = span(trace_id(), span_id(), "op", T0, T0 + MS)
        lines.append(json.dumps(export([s])).replace('"kind": 1', f'"kind": 1, "status": {raw}'))
        statuses[s["spanId"]] = name
    rep = ingest_text(archive_path, "\n".join(lines) + "\n")
    assert rep.rejected == [] and rep.spans_inserted == len(lines)
    got = dict(rows(archive_path, "SELECT span_id, kind FROM spans"))
    assert {k: got[k] for k in want} == want
    got = dict(rows(archive_path, "SELECT span_id, status_code FROM spans"))
    assert {k: got[k] for k in statuses} == statuses


def test_base64_and_uppercase_ids_are_normalised(archive_path, ingest_text):
    import base64

    tid, sid = trace_id(), span_id()
    s = span(base64.b64encode(bytes.fromhex(tid)).decode(), sid.upper(), "x", T0, T0 + 1)
    ingest_text(archive_path, jsonl(export([s])))
    assert rows(archive_path, "SELECT trace_id, span_id FROM spans") == [(tid, sid)]


def test_protobuf_bare_and_collector_framed(archive_path, ingest_text):
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    def pb(doc) -> bytes:
        msg = json_format.ParseDict(doc, ExportTraceServiceRequest())
        return msg.SerializeToString()

    # protobuf's JSON parser wants base64 ids: re-encode the hex ids of our OTLP/JSON document.
    import base64

    def b64ids(doc):
        for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
            for k in ("traceId", "spanId", "parentSpanId"):
                if k in s:
                    s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
        return doc

    _, a = native_request(itl=[1.0, 2.0])
    _, b = native_request()
    rep = ingest_text(archive_path, pb(b64ids(export(a))), "one.pb")
    assert (rep.spans, rep.rejected) == (6, [])
    framed = b"".join(
        len(m).to_bytes(4, "big") + m for m in (pb(b64ids(export(b))), pb(b64ids(export(native_request()[1]))))
    )
    rep = ingest_text(archive_path, framed, "framed.binpb")
    assert (rep.batches, rep.spans, rep.rejected) == (2, 12, [])
    assert rows(archive_path, "SELECT count(*) FROM requests") == [(3,)]
    itl = rows(archive_path, "SELECT itl_ms FROM requests WHERE itl_ms IS NOT NULL")
    assert itl == [([1.0, 2.0],)]


# -- bad input: the message, and nothing half-written --------------------------------------------------------------


def _bad(archive_path, ingest_text, bad_line: str, expected: str, prefix_only: bool = False):
    _, good = native_request()
    rep = ingest_text(archive_path, jsonl(export(good)) + bad_line + "\n")
    assert len(rep.rejected) == 1
    assert rep.rejected[0].position == "line 2"
    if prefix_only:
        assert rep.rejected[0].error.startswith(expected)
    else:
        assert rep.rejected[0].error == expected
    assert rows(archive_path, "SELECT count(*) FROM spans") == [(6,)]  # the good batch landed, nothing of the bad one
    assert rows(archive_path, "SELECT count(*) FROM ingest_batches") == [(1,)]
    return rep


def test_truncated_line(archive_path, ingest_text):
    _, s = native_request()
    line = json.dumps(export(s))[:-40]
    rep = ingest_text(archive_path, line + "\n")
    assert rep.rejected[0].error.startswith("not JSON (")
    assert rows(archive_path, "SELECT count(*) FROM spans") == [(0,)]


def test_non_json_line(archive_path, ingest_text):
    # the detail after "not JSON (" is the JSON parser's own wording
    _bad(archive_path, ingest_text, "hello world", "not JSON (unexpected character", prefix_only=True)


def test_json_that_is_not_otlp(archive_path, ingest_text):
    _bad(
        archive_path,
        ingest_text,
        '{"foo": 1}',
        "not an OTLP trace export: no 'resourceSpans' list (found keys ['foo'])",
    )


def test_span_missing_trace_id_rejects_its_whole_batch(archive_path, ingest_text):
    tid, root = trace_id(), span_id()
    ok = span(tid, root, "llm.request", T0, T0 + MS)
    broken = span(tid, span_id(), "stage.queue", T0, T0 + MS, parent=root)
    del broken["traceId"]
    _bad(archive_path, ingest_text, json.dumps(export([ok, broken])), 'span "stage.queue" has no traceId')


def test_span_missing_end_time(archive_path, ingest_text):
    s = span(trace_id(), "00000000000000aa", "stage.queue", T0, T0 + MS)
    del s["endTimeUnixNano"]
    _bad(
        archive_path,
        ingest_text,
        json.dumps(export([s])),
        'span 00000000000000aa ("stage.queue") has no endTimeUnixNano',
    )


def test_invalid_span_id(archive_path, ingest_text):
    s = span(trace_id(), "xyz", "stage.queue", T0, T0 + MS)
    _bad(
        archive_path,
        ingest_text,
        json.dumps(export([s])),
        'span "stage.queue" has an invalid spanId "xyz" (want 16 hex digits)',
    )


def test_end_before_start(archive_path, ingest_text):
    s = span(trace_id(), "00000000000000ab", "stage.prefill", T0 + 5, T0)
    _bad(
        archive_path,
        ingest_text,
        json.dumps(export([s])),
        'span 00000000000000ab ("stage.prefill") ends before it starts (by 5 ns)',
    )


def test_wrongly_typed_field_goes_to_reference_decoder(archive_path, ingest_text):
    s = span(trace_id(), span_id(), "x", T0, T0 + 1)
    doc = export([s])
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"] = {"oops": s}  # an object where a list belongs
    rep = _bad(
        archive_path, ingest_text, json.dumps(doc), "not an OTLP trace export: spans is a JSON object, not an array"
    )
    assert rep.rejected[0].origin.endswith(".jsonl")


def test_orphan_stage_spans_wait_for_their_root(archive_path, ingest_text):
    tid, spans = native_request()
    root, stages = spans[0], spans[1:]
    rep = ingest_text(archive_path, jsonl(export(stages)))
    assert (rep.spans_inserted, rep.orphan_stage_spans, rep.requests_derived) == (5, 5, 0)
    assert rows(archive_path, "SELECT count(*) FROM requests") == [(0,)]
    rep = ingest_text(archive_path, jsonl(export([root])))
    assert (rep.orphan_stage_spans, rep.requests_derived) == (0, 1)
    assert rows(archive_path, "SELECT queue_ms, prefill_ms FROM requests") == [(10.0, 50.0)]


def test_archive_path_that_is_a_folder_of_other_files(tmp_path):
    from budgetscope.archive.errors import ArchiveError
    from budgetscope.opener import Archive

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ArchiveError, match=r"is a folder with other files in it, not a budgetscope archive$"):
        Archive(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_missing_archive_is_not_created_for_reading(tmp_path):
    from budgetscope.archive.errors import ArchiveError
    from budgetscope.opener import Archive

    with pytest.raises(ArchiveError, match="no archive at"):
        Archive(tmp_path / "nope.duckdb", read_only=True, create=False)
    assert not (tmp_path / "nope.duckdb").exists()


def test_a_file_that_is_not_an_archive(tmp_path):
    from budgetscope.archive.errors import ArchiveError
    from budgetscope.opener import Archive

    p = tmp_path / "x.duckdb"
    p.write_text("hello")
    with pytest.raises(ArchiveError, match="is not a DuckDB archive"):
        Archive(p)
    assert p.read_text() == "hello"


def test_large_file_streams_in_chunks(archive_path, ingest_text, monkeypatch):
    """Chunks commit as they fill; memory is bounded by the chunk, not the file."""
    import budgetscope.ingest.batches as batches

    monkeypatch.setattr(batches, "CHUNK_BYTES", 4096)
    docs = [export(native_request(arrival=T0 + i * MS)[1]) for i in range(40)]
    seen = []
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    p = archive_path.parent / "big.jsonl"
    p.write_text(jsonl(*docs))
    with Archive(archive_path) as a:
        rep = a.ingest(read_batches(p), progress=lambda r: seen.append(r.spans))
    assert rep.spans == 240 and len(seen) > 3 and seen == sorted(seen)
    assert rows(archive_path, "SELECT count(*) FROM requests") == [(40,)]


def test_the_reader_holds_one_chunk_beside_the_one_landing():
    """`prefetch` reads the next chunk while one lands, and no further: a third would be 128 MiB more."""
    import threading
    import time

    from budgetscope.ingest.batches import prefetch

    read = []
    lock = threading.Lock()

    def chunks():
        for i in range(5):
            with lock:
                read.append(i)
            yield i

    got = []
    for chunk in prefetch(chunks()):
        time.sleep(0.05)  # landing: the reader has had time to read ahead
        with lock:
            got.append((chunk, len(read)))
    assert got == [(0, 2), (1, 3), (2, 4), (3, 5), (4, 5)]


def test_the_reader_stops_when_landing_stops():
    """A landing that fails ends the reader's thread too, whatever it was waiting for."""
    import threading

    from budgetscope.ingest.batches import prefetch

    def chunks():
        yield from range(100)

    before = threading.active_count()
    with pytest.raises(RuntimeError, match="landing failed"):
        for _ in prefetch(chunks()):
            raise RuntimeError("landing failed")
    assert threading.active_count() == before


def test_a_copy_of_a_rejected_batch_is_reported_rejected_not_ingested(archive_path, ingest_text):
    rep = ingest_text(archive_path, '{"foo": 1}\n{"foo": 1}\n')
    assert rep.batches_already_ingested == 0
    assert [(r.position, r.error) for r in rep.rejected] == [
        ("line 1", "not an OTLP trace export: no 'resourceSpans' list (found keys ['foo'])"),
        ("line 2", "same bytes as line 1, which was rejected"),
    ]
    rep = ingest_text(archive_path, '{"foo": 1}\n')  # sent again later: judged again, not skipped
    assert rep.rejected[0].error.startswith("not an OTLP trace export")


def test_protobuf_of_unknown_fields_only_is_rejected(archive_path, ingest_text):
    rep = ingest_text(archive_path, b"\x98\x06\x01", "junk.pb")  # field 99, varint 1: valid protobuf, not OTLP
    assert [r.error for r in rep.rejected] == [
        "not an OTLP protobuf trace export (no resource spans in a non-empty message)"
    ]


def test_ingest_without_derive_leaves_requests_pending(archive_path, tmp_path):
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    p = tmp_path / "t.jsonl"
    p.write_text(jsonl(export(native_request()[1])))
    with Archive(archive_path) as a:
        rep = a.ingest(read_batches(p), derive=False)
        assert (rep.spans_inserted, rep.requests_derived, a.pending_traces()) == (6, 0, 1)
    with Archive(archive_path) as a:  # the next writer finishes what was left
        assert a.pending_traces() == 0 and a.counts()["requests"] == 1


def test_unreadable_int_attribute_rejects_its_batch_only(archive_path, ingest_text):
    """An intValue that is not an integer once failed the whole chunk's SQL statement with a traceback."""
    s = span(trace_id(), span_id(), "op", T0, T0 + MS)
    s["attributes"] = [{"key": "m", "value": {"intValue": "12a"}}]
    rep = ingest_text(archive_path, jsonl(export(native_request()[1]), export([s])))
    assert [(r.position, r.error) for r in rep.rejected] == [
        ("line 2", "malformed OTLP JSON (ValueError: invalid literal for int() with base 10: '12a')")
    ]
    assert rows(archive_path, "SELECT count(*) FROM spans") == [(6,)]


@pytest.mark.parametrize("c_blocks", [True, False])
@pytest.mark.parametrize("block", [7, 64, 1 << 20])
def test_lines_read_in_blocks_are_the_lines_of_the_file(tmp_path, monkeypatch, block, c_blocks):
    """Lines cut by a block's end, longer than a block, blank, CRLF-ended, or last without a newline: each
    batch's bytes are the line as iterating the file gives it (newline kept, so content hashes do not change).
    Blocks are the C module's buffers, or bytearrays where it was not built."""
    from budgetscope.ingest import files, otlp_fast

    monkeypatch.setattr(files, "READ_BLOCK", block)
    monkeypatch.setattr(otlp_fast, "AVAILABLE", c_blocks and otlp_fast.AVAILABLE)
    docs = [json.dumps(export(native_request()[1]), separators=(",", ":")).encode() for _ in range(3)]
    text = docs[0] + b"\n\n   \n" + docs[1] + b"\r\n" + b"\t\n" + docs[2]
    p = tmp_path / "t.jsonl"
    p.write_bytes(text)
    got = [(rb.position, bytes(rb.payload)) for rb in files.read_batches(p)]
    with open(p, "rb") as f:
        want = [(f"line {n}", line) for n, line in enumerate(f, start=1) if line.strip()]
    assert got == want
    assert [pos for pos, _ in got] == ["line 1", "line 4", "line 6"]


def test_derivations_along_a_large_call_give_the_rows_and_counts_of_one(tmp_path, ingest_text, monkeypatch):
    """A call that derives every few spans (here after every batch) ends with the same `requests` rows, and
    reports the same derived rows and orphans, as one derivation at the end; traces that straddle batches
    are derived again when the rest of their spans arrive."""
    from budgetscope.ingest import batches
    from budgetscope.ingest import lander as arch

    _, a = native_request(client=(2, 1))
    _, b = native_request(arrival=T0 + 10 * MS)
    _, c = native_request(arrival=T0 + 20 * MS)
    _, d = native_request(arrival=T0 + 30 * MS, tier="batch")
    text = jsonl(export(a[:1]), export(a[1:]), export(b), export(c[1:]), export(d[1:4]), export(d[4:] + d[:1]))
    results = []
    for every, every_bytes in ((10**9, 1 << 40), (1, 1 << 40), (10**9, 1)):  # one part; by spans; by bytes
        monkeypatch.setattr(arch, "DERIVE_EVERY_SPANS", every)
        monkeypatch.setattr(arch, "DERIVE_EVERY_BYTES", every_bytes)
        monkeypatch.setattr(batches, "CHUNK_BYTES", 1)
        path = tmp_path / f"every-{every}-{every_bytes}.duckdb"
        rep = ingest_text(path, text)
        results.append(
            (
                (rep.requests_derived, rep.orphan_stage_spans, rep.spans_inserted),
                rows(path, "SELECT * FROM requests ORDER BY trace_id"),
                rows(path, "SELECT * FROM pending_traces"),
            )
        )
    assert results[0] == results[1] == results[2]
    assert results[0][0] == (3, 5, 24) and results[0][2] == []


# -- compressed trace files ---------------------------------------------------------------------------------------
def _two_requests() -> str:
    return jsonl(export(native_request(client=(5, 3))[1]), export(native_request(arrival=T0 + 10 * MS)[1]))


@pytest.mark.parametrize("name", ["traces.jsonl.gz", "traces.gz", "traces.data"])
def test_gzip_files_land_as_their_plain_bytes_do(tmp_path, name):
    """Compression is told by the first bytes (any name); the rows are those of the plain file."""
    import gzip

    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    plain, packed = tmp_path / "plain.jsonl", tmp_path / name
    plain.write_text(_two_requests())
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for path, archive in ((plain, tmp_path / "a"), (packed, tmp_path / "b")):
        with Archive(archive) as a:
            a.ingest(read_batches(path))
    q = "SELECT trace_id, queue_ms, network_ms FROM requests ORDER BY 1"
    assert rows(tmp_path / "b", q) == rows(tmp_path / "a", q) and len(rows(tmp_path / "b", q)) == 2


def test_gzip_protobuf_by_its_inner_suffix(tmp_path):
    import gzip

    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive
    from otlp_wire import to_proto

    p = tmp_path / "traces.pb.gz"
    p.write_bytes(gzip.compress(to_proto(export(native_request()[1]))))
    with Archive(tmp_path / "a") as a:
        a.ingest(read_batches(p))
    assert rows(tmp_path / "a", "SELECT count(*) FROM requests") == [(1,)]


def test_zstd_file_lands(tmp_path):
    zstandard = pytest.importorskip("zstandard", reason="the zstd extra is not installed")
    from click.testing import CliRunner

    from budgetscope.cli import main

    p = tmp_path / "traces.jsonl.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(_two_requests().encode()))
    r = CliRunner().invoke(main, ["ingest", str(p), "--archive", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    assert rows(tmp_path / "a", "SELECT count(*) FROM requests") == [(2,)]


def _cli(*args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "budgetscope.cli", *args], capture_output=True, text=True, timeout=120)


def test_a_cut_off_gzip_file_is_one_line_and_writes_nothing(tmp_path):
    import gzip

    p = tmp_path / "traces.jsonl.gz"
    p.write_bytes(gzip.compress(_two_requests().encode())[:-30])
    r = _cli("ingest", str(p), "--archive", str(tmp_path / "a"))
    assert (
        r.returncode == 2
        and r.stderr
        == f"budgetscope: {p}: not a whole gzip stream (Compressed file ended "
        "before the end-of-stream marker was reached)\n"
    ), r.stderr
    assert not (tmp_path / "a").exists()


def test_zstd_without_zstandard_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    """Before Python 3.14 zstd needs the `zstandard` package: its absence is one line naming the extra."""
    import sys

    from click.testing import CliRunner

    from budgetscope.cli import main

    if sys.version_info >= (3, 14):
        pytest.skip("Python 3.14+ reads zstd with the standard library")
    monkeypatch.setitem(sys.modules, "zstandard", None)
    p = tmp_path / "traces.jsonl.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 16)  # a zstd frame header: the magic bytes decide
    r = CliRunner().invoke(main, ["ingest", str(p), "--archive", str(tmp_path / "a")])
    assert r.exit_code == 2
    assert r.output == (
        f"budgetscope: {p} is zstd-compressed; reading it needs zstandard: pip install 'budgetscope[zstd]'\n"
    )
    assert not (tmp_path / "a").exists()
