"""Faults outside the collector's network path: `ingest` killed with SIGKILL mid-file, a reader holding the archive
open while compaction replaces its segments, and the wall clock stepping backwards inside a request.
(kill -9 of `collect`: tests/test_archive_live.py; a full disk: tests/test_fault_disk_full.py; a client leaving
mid-stream: tests/test_fault_engine.py. `make faults` runs the long versions.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from budgetscope.archive import manifest as mf
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from otlp_wire import export, jsonl, native_request

# `ingest` commits every DERIVE_EVERY_SPANS spans of a file (2M by default), checked at each part it reads
# (CHUNK_BYTES): both set lower here so that a 210,000-span file has several commits for the kill to fall between.
RUN_INGEST = """import sys
from budgetscope.archive import directory
from budgetscope.ingest import lander
from budgetscope.ingest import batches
directory.MEMORY_SPANS = lander.DERIVE_EVERY_SPANS = 30_000
batches.CHUNK_BYTES = 1 << 20
from budgetscope.cli import main
sys.argv = ["budgetscope", *sys.argv[1:]]
main()"""
CONTENT = """SELECT (SELECT count(*) FROM spans), (SELECT count(DISTINCT (trace_id, span_id)) FROM spans),
  (SELECT count(*) FROM requests), (SELECT count(DISTINCT trace_id) FROM requests),
  (SELECT round(sum(e2e_ms), 3) FROM requests), (SELECT round(sum(queue_ms), 3) FROM requests),
  (SELECT round(sum(client_ttft_ms), 3) FROM requests)"""
"""Spans, distinct spans, requests, distinct traces, and sums that change if any row is lost, doubled or altered."""


def _ingest(path, archive) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", RUN_INGEST, "ingest", str(path), "-a", str(archive)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _content(archive) -> tuple:
    with Archive(archive, read_only=True) as r:
        return r.con.execute(CONTENT).fetchone()


@pytest.mark.slow
def test_kill9_of_ingest_mid_file_then_again_lands_everything_once(tmp_path):
    """Killed twice after one of its commits (and before its last), then run to the end: the archive holds
    what one clean ingest of the file holds, row for row in count and sums."""
    f = tmp_path / "t.jsonl"
    write_jsonl(f, SyntheticSpec(num_requests=30_000, tiers=("interactive", "batch"), spans_per_line=256))
    reference = tmp_path / "reference"
    done = _ingest(f, reference)
    assert done.wait(120) == 0, done.stderr.read()
    want = _content(reference)
    assert want[0] == want[1] == 210_000 and want[2] == want[3] == 30_000

    archive = tmp_path / "killed"
    seen_seqs = []
    for commits_before_kill in (1, 3):
        proc = _ingest(f, archive)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                seq = mf.read(archive).seq
            except Exception:  # noqa: BLE001 - no manifest yet
                seq = 0
            if seq >= commits_before_kill + (seen_seqs[-1] if seen_seqs else 0):
                break
            time.sleep(0.005)
        assert proc.poll() is None, "ingest finished before it could be killed: make the file larger"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        seen_seqs.append(mf.read(archive).seq)
        partial = _content(archive)  # a reader opens what the killed writer committed, whole
        assert 0 < partial[0] < want[0] and partial[0] == partial[1] and partial[2] == partial[3]
    final = _ingest(f, archive)
    out, err = final.communicate(timeout=120)
    assert final.returncode == 0, err
    assert "already stored" in out and _content(archive) == want


def _small_commits(archive, n: int) -> None:
    """n separate `ingest` commits of requests in one cold hour (2026-01-01), compaction off: n small segments a
    table."""
    for i in range(n):
        docs = [
            export(native_request(arrival=1_767_225_600_000_000_000 + (i * 50 + k) * 10**9, client=(1, 1))[1])
            for k in range(50)
        ]
        p = archive.parent / f"part-{i}.jsonl"
        p.write_text(jsonl(*docs))
        with Archive(archive, compact=False) as a:
            a.ingest(read_batches(p))


def test_a_reader_holding_the_archive_reads_through_compaction(tmp_path):
    """A reader opened before compaction keeps reading its commit, with the same answers, while the merges
    replace its segments and after (the replaced files stay RETIRE_GRACE_S); a new reader sees the same rows in
    fewer files. A second reader queries in a loop throughout and never fails."""
    archive = tmp_path / "a"
    _small_commits(archive, 9)
    held = Archive(archive, read_only=True)
    before = held.con.execute(CONTENT).fetchone()
    files_before = len(mf.read(archive).segments)
    errors, reads, stop = [], [0], threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                with Archive(archive, read_only=True) as r:
                    assert r.con.execute(CONTENT).fetchone() == before
                reads[0] += 1
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                errors.append(repr(e))

    t = threading.Thread(target=reader)
    t.start()
    try:
        with Archive(archive) as writer:  # its compactor merges the nine commits' segments
            assert writer.compactor is not None
            merged = writer.compactor.run_once(_con())  # on this thread (its own thread may have begun)
            assert merged + writer.compactor.merges >= 1
            assert held.con.execute(CONTENT).fetchone() == before  # during: its files are retired, not gone
    finally:
        stop.set()
        t.join()
    assert not errors and reads[0] >= 1, errors[:3]
    assert held.con.execute(CONTENT).fetchone() == before  # after the writer closed
    held.close()
    assert len(mf.read(archive).segments) < files_before
    assert _content(archive) == before


def _con():
    import duckdb

    return duckdb.connect()


def test_the_wall_clock_stepping_back_inside_a_request_changes_no_duration(monkeypatch):
    """budgetscope's instrumentation takes every mark from the monotonic clock and one wall-clock anchor per
    request: a step of the wall clock (NTP, a VM resumed) between two spans neither reorders nor stretches the
    spans of a request. The wall clock here is a fake that steps back an hour between marks."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from budgetscope.instrument import Instrumentation

    real = time.time_ns
    steps = iter(range(10_000))

    def fake_wall_clock_stepping_back() -> int:
        return real() - next(steps) * 3600 * 10**9  # an hour earlier at every reading

    memory = InMemorySpanExporter()
    instr = Instrumentation(service_name="clock-test", exporter=memory)
    monkeypatch.setattr(time, "time_ns", fake_wall_clock_stepping_back)
    for i in range(2):
        req = instr.start_request(model="m", request_id=f"r{i}")
        for stage in ("queue", "prefill"):
            time.sleep(0.002)
            req.mark(stage)
        req.token()
        time.sleep(0.002)
        req.token()
        req.finish(outcome="ok", input_tokens=3)
    monkeypatch.setattr(time, "time_ns", real)
    assert instr.flush(timeout_s=10)
    instr.shutdown()
    spans = memory.get_finished_spans()
    for tid in {s.context.trace_id for s in spans}:
        mine = sorted((s for s in spans if s.context.trace_id == tid), key=lambda s: s.start_time)
        root = next(s for s in mine if s.parent is None)
        stages = [s for s in mine if s.name.startswith("stage.")]
        assert [s.name for s in stages] == ["stage.frontend", "stage.queue", "stage.prefill", "stage.decode"]
        assert all(s.end_time >= s.start_time for s in mine)
        assert stages[0].start_time == root.start_time and stages[-1].end_time <= root.end_time
        assert all(a.end_time == b.start_time for a, b in zip(stages, stages[1:]))  # they tile, in order
        assert stages[1].end_time - stages[1].start_time >= 1_500_000  # the 2 ms sleep, not an hour either way
        assert root.end_time - root.start_time < 10**9


def test_a_span_that_ends_before_it_starts_is_rejected_with_its_batch(tmp_path):
    """A producer whose clock stepped back inside one span: its batch is rejected whole (nothing of it lands,
    the sender is told why), the other batches of the file land."""
    good = native_request(client=(1, 1))[1]
    bad = native_request()[1]
    bad[1]["endTimeUnixNano"] = str(int(bad[1]["startTimeUnixNano"]) - 3_000_000_000)
    p = tmp_path / "t.jsonl"
    p.write_text(jsonl(export(good), export(bad)))
    with Archive(tmp_path / "a") as a:
        rep = a.ingest(read_batches(p))
    assert len(rep.rejected) == 1 and "ends before it starts (by 3000000000 ns)" in rep.rejected[0].error
    assert rep.spans_inserted == len(good)
    assert json.loads(json.dumps(rep.rejected[0].position)) == "line 2"
