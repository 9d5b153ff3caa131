"""Retention: hour partitions older than the retention go in one commit, readers of the older manifest finish,
the files follow after the grace, and bad input changes nothing."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from budgetscope.archive import directory, retention
from budgetscope.archive import manifest as mf
from budgetscope.cli import main
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from conftest import rows
from otlp_wire import T0, export, jsonl, native_request

NOW = time.time_ns()


def _fill(root, tmp_path, arrivals) -> None:
    f = tmp_path / f"t{len(list(tmp_path.iterdir()))}.jsonl"
    f.write_text(jsonl(*(export(native_request(arrival=a)[1]) for a in arrivals)))
    with Archive(root) as a:
        a.ingest(read_batches(f))


def _expire(*args):
    return CliRunner().invoke(main, ["expire", *args])


def _files(root) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")}


def test_parse_retention():
    assert retention.parse_retention("30d") == 30 * 86_400 * 10**9
    assert retention.parse_retention("36h") == 36 * 3_600 * 10**9
    for bad in ("", "30", "5x", "0.5h", "-1d"):
        with pytest.raises(ValueError, match="retention"):
            retention.parse_retention(bad)


def test_expire_drops_old_hours_in_one_commit_and_readers_finish(tmp_path, monkeypatch):
    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, T0 + 10**9, NOW - 10**9])
    before = mf.read(root)
    dry = _expire("-a", str(root), "--retention", "30d", "--dry-run")
    assert dry.exit_code == 0 and "would expire" in dry.output, dry.output
    assert mf.read(root) == before  # a dry run changes nothing
    with Archive(root, read_only=True) as reader:  # opened before: reads its manifest's segments to the end
        res = _expire("-a", str(root), "--retention", "30d", "--no-wait", "--format", "json")
        assert res.exit_code == 0, res.output
        doc = json.loads(res.output)["archives"][str(root)]
        assert doc["rows"]["requests"] == 2 and doc["rows"]["spans"] == 12 and doc["segments"] > 0
        assert reader.con.execute("SELECT count(*) FROM requests").fetchall() == [(3,)]
    assert rows(root, "SELECT count(*), min(arrival_ns) >= ? FROM requests", [NOW - 3600 * 10**9]) == [(1, True)]
    assert rows(root, "SELECT count(*) FROM spans") == [(6,)]
    m = mf.read(root)
    assert m.seq > before.seq and all((s.hour + 1) * mf.HOUR_NS > NOW - 30 * 86_400 * 10**9 for s in m.segments)
    retired = {p for p, _ in m.retired}
    assert retired and retired <= _files(root)  # still on disk for the readers' grace
    monkeypatch.setattr(mf, "RETIRE_GRACE_S", 0.0)
    again = _expire("-a", str(root), "--retention", "30d", "--no-wait")
    assert again.exit_code == 0 and "nothing to expire" in again.output, again.output
    assert not retired & _files(root)  # past the grace: deleted
    assert rows(root, "SELECT count(*) FROM requests") == [(1,)]


def test_expire_waits_the_grace_then_deletes(tmp_path, monkeypatch):
    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    monkeypatch.setattr(mf, "RETIRE_GRACE_S", 0.2)
    res = _expire("-a", str(root), "--retention", "1d")
    assert res.exit_code == 0 and "expired" in res.output, res.output
    assert not {p for p, _ in mf.read(root).retired} and rows(root, "SELECT count(*) FROM requests") == [(1,)]
    assert _files(root) == {s.path for s in mf.read(root).segments}


def test_a_collectors_writer_expires_as_it_goes(tmp_path):
    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    w = Archive(root, create=False, durable=True, retention_ns=retention.parse_retention("7d"))
    try:
        f = tmp_path / "late.jsonl"
        f.write_text(jsonl(export(native_request(arrival=T0 + 5 * 10**9)[1]), export(native_request(arrival=NOW)[1])))
        w.ingest(read_batches(f), derive=False)
        w.commit()
        w.compactor.run_once(__import__("duckdb").connect())  # as its thread does after each commit
    finally:
        w.close()
    assert rows(root, "SELECT count(*), min(arrival_ns) > ? FROM requests", [T0 + 3600 * 10**9]) == [(2, True)]


def test_a_sharded_root_expires_every_shard_or_none(tmp_path):
    base = tmp_path / "fleet"
    base.mkdir()
    for sid in ("s1", "s2"):
        _fill(base / f"shard={sid}", tmp_path, [T0, NOW])
    held = directory.WriterLock(base / "shard=s2")
    try:
        manifests = {p: mf.read(p) for p in base.iterdir()}
        res = _expire("-a", str(base), "--retention", "30d", "--no-wait")
        assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
        assert "being written by another process" in res.output and "collect --retention" in res.output
        assert {p: mf.read(p) for p in base.iterdir()} == manifests  # neither shard changed
    finally:
        held.release()
    res = _expire("-a", str(base), "--retention", "30d", "--no-wait")
    assert res.exit_code == 0 and res.output.count("expired") == 2, res.output
    assert rows(base, "SELECT count(*) FROM requests") == [(2,)]


@pytest.mark.parametrize("case", ["bad age", "single file", "missing"])
def test_bad_input_is_one_line_and_changes_nothing(tmp_path, case):
    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    before = mf.read(root)
    target, age = {
        "bad age": (root, "5x"),
        "single file": (tmp_path / "x.duckdb", "30d"),
        "missing": (tmp_path / "nope", "30d"),
    }[case]
    if case == "single file":
        with Archive(target):
            pass
    res = _expire("-a", str(target), "--retention", age)
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "Traceback" not in res.output, res.output
    assert {"bad age": "retention '5x'", "single file": "folder archives", "missing": "no archive"}[case] in res.output
    assert mf.read(root) == before


def test_collect_with_retention_expires_what_it_finds(tmp_path):
    from budgetscope.collector import Collector

    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    with Collector(root, grpc_port=None, http_port=0, retention_ns=retention.parse_retention("30d")):
        deadline = time.monotonic() + 20
        while mf.read(root).rows("requests") != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rows(root, "SELECT count(*), min(arrival_ns) > ? FROM requests", [T0 + 3600 * 10**9]) == [(1, True)]


def test_collect_refuses_a_bad_retention(tmp_path):
    res = CliRunner().invoke(main, ["collect", "-a", str(tmp_path / "a"), "--retention", "2 weeks"])
    assert res.exit_code == 2 and "retention '2 weeks'" in res.output and not (tmp_path / "a").exists(), res.output
