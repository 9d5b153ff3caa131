"""A full disk under `collect`: a real one (a 2 MiB tmpfs mounted for the test, filled by a filler file).

While the disk is full the senders get 503 with Retry-After (never a hang, never a 200 for what was not kept),
a reader still opens the archive and reads its last commit, and nothing acknowledged is lost: once there is
room again the spool lands. Mounting needs root (CAP_SYS_ADMIN); without it the test is skipped, unless
BUDGETSCOPE_FAULTS_STRICT=1 (`make faults`), which makes that a failure."""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx
import pytest

from budgetscope.collector import Collector
from budgetscope.opener import Archive
from otlp_wire import export, native_request

pytest.importorskip("grpc")
from test_collector import _clean_otlp_env, _wait_for  # noqa: E402,F401 - the fixture is used by name


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        message = f"cannot mount a tmpfs: {r.stderr.strip() or r.returncode} (needs root)"
        if os.environ.get("BUDGETSCOPE_FAULTS_STRICT"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(path) -> None:
    """Write zeros until the file system is full. Unbuffered: a buffered file keeps what the last write could
    not place, and closing it tries again and raises ENOSPC (about one run in three)."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(64 << 10))
        except OSError:
            pass


def _post(h: httpx.Client, port: int, spans: list[dict]) -> httpx.Response:
    return h.post(
        f"http://127.0.0.1:{port}/v1/traces",
        content=json.dumps(export(spans)),
        headers={"Content-Type": "application/json"},
    )


def _batch() -> list[dict]:
    return [s for _ in range(20) for s in native_request(arrival=time.time_ns())[1]]


def test_a_full_disk_answers_503_keeps_the_archive_readable_and_loses_nothing_acknowledged(small_disk):
    archive = small_disk / "prod"
    filler = small_disk / "filler"
    acked: list[list[dict]] = []
    codes: dict[int, int] = {}
    reasons: set[str] = set()
    with Collector(archive, grpc_port=None, http_port=0, retry_after_s=2) as c, httpx.Client(timeout=20) as h:
        for _ in range(5):
            batch = _batch()
            assert _post(h, c.http_port, batch).status_code == 200
            acked.append(batch)
        _wait_for(lambda: c.stats.batches_landed == 5, timeout_s=30)  # a commit: the archive has them to read
        _fill(filler)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and codes.get(503, 0) < 5:
            batch = _batch()
            r = _post(h, c.http_port, batch)  # a hang would raise ReadTimeout here
            codes[r.status_code] = codes.get(r.status_code, 0) + 1
            if r.status_code == 200:
                acked.append(batch)
            else:
                assert r.status_code == 503 and r.headers["retry-after"] == "2", (r.status_code, r.text)
                # a short reason: no path of this machine, no DuckDB error document (those go to the log)
                assert str(small_disk) not in r.text and "exception_type" not in r.text, r.text
                reasons.add(r.json()["message"])
        assert codes.get(503, 0) >= 5, codes
        assert any("(No space left on device)" in m for m in reasons), reasons
        with Archive(archive, read_only=True) as r:  # the last commit reads whole while the disk is full
            assert r.con.execute("SELECT count(*) FROM spans").fetchone()[0] >= 5 * 20 * 6
        filler.unlink()  # room again: the same collector reopens its archive (a failed reopen holds no lock)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            batch = _batch()
            r = _post(h, c.http_port, batch)
            if r.status_code == 200:
                acked.append(batch)
                break
            time.sleep(0.5)
        assert r.status_code == 200 and c.error is None, (r.status_code, c.error)
    s = c.stats  # every request in exactly one category
    assert s.batches == s.batches_landed + s.batches_already_stored + s.batches_rejected + s.batches_failed + (
        s.spooled_batches
    ), s
    # and a restart (a supervisor's) lands what the spool holds
    with Collector(archive, grpc_port=None, http_port=0) as c2, httpx.Client(timeout=20) as h:
        batch = _batch()
        assert _post(h, c2.http_port, batch).status_code == 200
        acked.append(batch)
    want = {(s["traceId"], s["spanId"]) for spans in acked for s in spans}
    with Archive(archive, read_only=True) as r:
        got = r.con.execute("SELECT trace_id, span_id, count(*) FROM spans GROUP BY ALL").fetchall()
        roots = {s["traceId"] for spans in acked for s in spans if s["name"] == "llm.request"}
        derived = {t for (t,) in r.con.execute("SELECT trace_id FROM requests").fetchall()}
    assert want <= {(t, s) for t, s, _ in got}, f"{len(want - {(t, s) for t, s, _ in got})} acknowledged spans lost"
    assert all(n == 1 for _, _, n in got) and roots <= derived


def test_a_spool_write_cut_short_by_a_full_disk_loses_no_later_record(tmp_path, monkeypatch):
    """ENOSPC in the middle of a record (injected at os.writev: a fake) must not hide the records acknowledged
    after it: the torn record is cut off and the next append starts a new file."""
    from budgetscope.archive import spool as spool_module
    from budgetscope.archive.spool import RawBatch

    spool = spool_module.Spool(tmp_path / "spool")
    first, second, third = (RawBatch(bytes([i]) * 5000, "otlp-json", "test", f"b{i}") for i in range(3))
    spool.append([first])
    real_writev = os.writev

    def fake_writev_disk_full_halfway(fd, buffers):
        data = b"".join(buffers)
        os.write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spool_module.os, "writev", fake_writev_disk_full_halfway)
    with pytest.raises(OSError):
        spool.append([second])  # never acknowledged
    monkeypatch.setattr(spool_module.os, "writev", real_writev)
    spool.append([third])  # acknowledged once there was room again
    assert [b.position for b in spool.batches()] == ["b0", "b2"]


def test_collect_stopped_on_a_full_disk_says_what_waits_in_the_spool_and_the_next_writer_lands_it(small_disk):
    import re
    import signal
    import sys

    from budgetscope.collector.writer import spooled

    archive = small_disk / "prod"
    run = "import sys; from budgetscope.commands.collect import collect; collect(sys.argv[1:])"
    proc = subprocess.Popen(
        [sys.executable, "-c", run, "--archive", str(archive), "--no-grpc", "--http-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acked: list[list[dict]] = []
    try:
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", proc.stdout.readline()).group(1))
        with httpx.Client(timeout=20) as h:
            time.sleep(1.5)  # the first commit
            filler = small_disk / "filler"
            _fill(filler)
            os.truncate(filler, filler.stat().st_size - (192 << 10))  # room to spool a few, not to publish them
            refusal = None
            deadline = time.monotonic() + 20
            while refusal is None and time.monotonic() < deadline:
                batch = _batch()
                r = _post(h, port, batch)
                if r.status_code == 200:
                    acked.append(batch)
                elif "wait in its spool" in r.text:
                    refusal = r
            assert refusal is not None and refusal.status_code == 503, "no 503 naming the spool"
            status = h.get(f"http://127.0.0.1:{port}/status").json()  # and GET /status says so, in a warning
            assert any("acknowledged batches" in w and "wait in" in w for w in status["warnings"]), status
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    waiting, spans = spooled(archive)
    assert waiting >= 1 and spans == 20 * 6 * waiting
    assert proc.returncode == 0, err
    assert (
        f"budgetscope collect: {waiting:,} acknowledged batches ({spans:,} spans) wait in {archive}/_writer/spool, "
        "unseen by readers until the next writer to open the archive (collect, ingest, expire) lands them"
    ) in err.splitlines()
    want = {(s["traceId"], s["spanId"]) for spans in acked for s in spans}
    with Archive(archive, read_only=True) as r:
        seen = {tuple(x) for x in r.con.execute("SELECT trace_id, span_id FROM spans").fetchall()}
    assert want - seen, "the spool held nothing unpublished: the case is not exercised"
    (small_disk / "filler").unlink()
    Archive(archive).close()  # a writer that keeps no spool of its own (`ingest`'s) lands it and empties it
    with Archive(archive, read_only=True) as r:
        seen = {tuple(x) for x in r.con.execute("SELECT trace_id, span_id FROM spans").fetchall()}
    assert want <= seen and spooled(archive) == (0, 0)


def test_requests_derived_when_the_archive_reopens_are_counted(small_disk):
    """The disk full from the first export: what is acknowledged waits in the spool, the archive reopens once
    there is room, and its first commit derives every request. The summary said "0 requests derived … no adapter
    reads their format" when every request had been derived by that commit."""
    from budgetscope.analysis.coverage import nothing_derived_warning

    archive, filler = small_disk / "prod", small_disk / "filler"
    acked: list[list[dict]] = []
    with Collector(archive, grpc_port=None, http_port=0, retry_after_s=1) as c, httpx.Client(timeout=20) as h:
        _fill(filler)
        os.truncate(filler, filler.stat().st_size - (192 << 10))  # room to spool a few, not to publish them
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and c._writer.unavailable is None:
            batch = _batch()
            if _post(h, c.http_port, batch).status_code == 200:
                acked.append(batch)
        assert acked and c._writer.unavailable is not None
        filler.unlink()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and c._writer.unavailable is not None:
            time.sleep(0.2)  # the reopen, which lands and derives what the spool holds
    stats = c.stats
    roots = {s["traceId"] for spans in acked for s in spans if s["name"] == "llm.request"}
    with Archive(archive, read_only=True) as r:
        (derived,) = r.con.execute("SELECT count(*) FROM requests").fetchone()
    assert derived == len(roots) and stats.requests_derived >= len(roots), (derived, stats)
    assert nothing_derived_warning(stats.spans, stats.requests_derived, {"total": 0}) is None
    assert stats.batches == stats.batches_landed + stats.batches_failed + stats.batches_already_stored, stats


# -- `ingest` and `expire` that cannot write: one line, exit 2, nothing half-written ---------------------------
def _trace_file(path, first: int, n: int = 150) -> None:
    from otlp_wire import jsonl

    docs = [
        export(
            [
                s
                for k in range(10)
                for s in native_request(arrival=1_700_000_000_000_000_000 + (first + i * 10 + k) * 10**9)[1]
            ]
        )
        for i in range(n)
    ]
    path.write_text(jsonl(*docs))


def _files(root) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != "lock"
    }


def _cli(*args: str):
    from click.testing import CliRunner

    from budgetscope.cli import main

    return CliRunner().invoke(main, list(args))


def test_ingest_on_a_full_disk_is_one_line_exit_2_and_leaves_nothing_behind(small_disk, tmp_path):
    traces, more = tmp_path / "t.jsonl", tmp_path / "more.jsonl"
    _trace_file(traces, 0)
    _trace_file(more, 10_000)
    archive = small_disk / "prod"
    assert _cli("ingest", str(traces), "-a", str(archive)).exit_code == 0
    before = _files(archive)
    filler = small_disk / "filler"
    _fill(filler)
    os.truncate(filler, filler.stat().st_size - (48 << 10))  # room to begin writing segments, not to finish

    result = _cli("ingest", str(more), "-a", str(archive))
    assert (result.exit_code, result.output) == (
        2,
        f"budgetscope: cannot write {archive}: No space left on "
        "device; the archive keeps its last commit, nothing half-written\n",
    )
    assert _files(archive) == before  # no _tmp file, no uncommitted segment, the last commit as it was

    for fresh in (small_disk / "fresh", small_disk / "fresh.duckdb"):  # a folder archive, a single file
        result = _cli("ingest", str(more), "-a", str(fresh))
        assert (result.exit_code, result.output) == (
            2,
            f"budgetscope: cannot write {fresh}: No space left on device; nothing was created, nothing half-written\n",
        )
        assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "prod"]  # no file, no .wal


@pytest.fixture
def read_only(tmp_path):
    """A folder bind-mounted read-only over itself (needs root, as `small_disk`): (the folder, an archive in it)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    traces = tmp_path / "t.jsonl"
    _trace_file(traces, 0, n=5)
    assert _cli("ingest", str(traces), "-a", str(folder / "prod")).exit_code == 0
    r = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if r.returncode != 0:
        if os.environ.get("BUDGETSCOPE_FAULTS_STRICT"):
            pytest.fail(f"cannot bind-mount: {r.stderr.strip()}")
        pytest.skip(f"cannot bind-mount: {r.stderr.strip() or r.returncode} (needs root)")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True, capture_output=True)
        yield folder / "prod", traces
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_ingest_and_expire_on_a_read_only_archive_are_one_line_exit_2(read_only):
    archive, traces = read_only
    before = _files(archive)
    line = (
        f"budgetscope: cannot write {archive}: Read-only file system; the archive keeps its last commit, "
        "nothing half-written\n"
    )
    for args in (("ingest", str(traces), "-a", str(archive)), ("expire", "-a", str(archive), "--retention", "1h")):
        result = _cli(*args)
        assert (result.exit_code, result.output) == (2, line), args
    assert _files(archive) == before
    # issue 37: a new archive there said it "keeps its last commit"; there was none, and nothing was created
    for fresh in (archive.parent / "fresh", archive.parent / "fresh.duckdb"):
        result = _cli("ingest", str(traces), "-a", str(fresh))
        assert (result.exit_code, result.output) == (
            2,
            f"budgetscope: cannot write {fresh}: Read-only file system; nothing was created, nothing half-written\n",
        )
        assert not fresh.exists()


def test_expire_on_a_full_disk_is_one_line_exit_2_and_leaves_nothing_behind(small_disk, tmp_path):
    """Issue 37: `expire` on a full disk said "nothing to expire" and exit 0 (its compactor thread's failure only
    logged), while --dry-run listed the segments due, and left a 0-byte `.manifest.json.<pid>.tmp` each run."""
    traces = tmp_path / "t.jsonl"
    _trace_file(traces, 0, n=20)
    archive = small_disk / "prod"
    assert _cli("ingest", str(traces), "-a", str(archive)).exit_code == 0
    due = _cli("expire", "-a", str(archive), "--retention", "1h", "--dry-run", "--format", "json")
    assert due.exit_code == 0 and json.loads(due.output)["archives"][str(archive)]["segments"] > 0
    before = _files(archive)
    _fill(small_disk / "filler")
    for _ in range(2):
        result = _cli("expire", "-a", str(archive), "--retention", "1h")
        assert (result.exit_code, result.output) == (
            2,
            f"budgetscope: cannot write {archive}: No space left on device; the archive keeps its last commit, "
            "nothing half-written\n",
        )
        assert _files(archive) == before  # no .manifest.json.<pid>.tmp, the last commit as it was
    (small_disk / "filler").unlink()
    done = _cli("expire", "-a", str(archive), "--retention", "1h", "--no-wait", "--format", "json")
    assert done.exit_code == 0 and json.loads(done.output) == {**json.loads(due.output), "dry_run": False}
