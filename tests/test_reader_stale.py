"""A reader that outlives its commit: once a newer commit's expiry or compaction has deleted the files it reads
(60 s after they were replaced), it knows (`stale()`), `report` and `query` say so in one line, and the dashboard
opened without --live moves to the last commit and says that it did, instead of failing on a missing file."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from budgetscope import opener
from budgetscope import query as query_module
from budgetscope.archive import manifest as mf
from budgetscope.archive.reader import STALE, last_commit
from budgetscope.cli import main
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from conftest import rows
from otlp_wire import T0, export, jsonl, native_request

NOW = time.time_ns()
ROOT = Path(__file__).resolve().parent.parent


def _fill(root, tmp_path, arrivals) -> None:
    f = tmp_path / f"t{len(list(tmp_path.iterdir()))}.jsonl"
    f.write_text(jsonl(*(export(native_request(arrival=a)[1]) for a in arrivals)))
    with Archive(root) as a:
        a.ingest(read_batches(f))


def _drop_old_hours(root, monkeypatch) -> None:
    """What a writer's expiry does to a reader's commit, past the readers' grace: its old hours leave the manifest,
    then their files are deleted (the grace set to 0 s so that the second run deletes them)."""
    monkeypatch.setattr(mf, "RETIRE_GRACE_S", 0.0)
    for _ in range(2):
        res = CliRunner().invoke(main, ["expire", "-a", str(root), "--retention", "30d", "--no-wait"])
        assert res.exit_code == 0, res.output
    assert not {p for p, _ in mf.read(root).retired}


def test_a_reader_knows_when_its_commit_is_gone(tmp_path, monkeypatch):
    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    with Archive(root, read_only=True) as reader:
        assert not reader.stale() and last_commit(root) == reader.manifest.seq
        _drop_old_hours(root, monkeypatch)
        assert reader.stale() and last_commit(root) > reader.manifest.seq
        with pytest.raises(duckdb.IOException):
            reader.con.execute("SELECT count(*) FROM requests").fetchall()
    assert rows(root, "SELECT count(*) FROM requests") == [(1,)]  # a new reader reads the last commit
    single_file = tmp_path / "single.duckdb"
    _fill(single_file, tmp_path, [NOW])
    with Archive(single_file, read_only=True) as single:
        assert not single.stale()  # a single file is never replaced under its reader
    assert last_commit(single_file) == 0 and last_commit(tmp_path / "none") == 0


def test_a_sharded_roots_last_commit_grows_with_any_shard(tmp_path):
    base = tmp_path / "fleet"
    base.mkdir()
    for sid in ("s1", "s2"):
        _fill(base / f"shard={sid}", tmp_path, [NOW])
    with Archive(base, read_only=True) as reader:
        assert last_commit(base) == reader.manifest.seq == sum(mf.read(p).seq for p in base.iterdir())
    _fill(base / "shard=s2", tmp_path, [NOW + 10**9])
    with Archive(base, read_only=True) as reader:
        assert last_commit(base) == reader.manifest.seq > 2


def test_report_that_outlives_its_commit_says_so_in_one_line(tmp_path, monkeypatch):
    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    import budgetscope.analysis.report as report_module

    real = report_module.build_report

    def slow_report(con, *args, **kwargs):  # the expiry lands while the report runs, and the grace passes
        _drop_old_hours(root, monkeypatch)
        return real(con, *args, **kwargs)

    monkeypatch.setattr(report_module, "build_report", slow_report)
    res = CliRunner().invoke(main, ["report", "-a", str(root)])
    assert res.exit_code == 2 and res.output == f"budgetscope: {root}: {STALE}\n", res.output
    monkeypatch.setattr(report_module, "build_report", real)
    again = CliRunner().invoke(main, ["report", "-a", str(root), "--format", "json"])
    assert again.exit_code == 0 and '"requests": 1,' in again.output, again.output


def test_query_that_outlives_its_commit_says_so_in_one_line(tmp_path, monkeypatch):
    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    real = opener.Archive

    def opened_then_expired(*args, **kw):  # the reader opens, then the expiry lands and its grace passes
        a = real(*args, **kw)
        if kw.get("sandbox"):  # the query's reader, not the expiry's writer
            _drop_old_hours(root, monkeypatch)
        return a

    # the sandbox as `budgetscope query` runs it in its child process (which no patch reaches)
    monkeypatch.setattr(opener, "Archive", opened_then_expired)
    with pytest.raises(query_module.QueryError) as e:
        query_module.run_query(root, "SELECT count(*) FROM requests")
    assert str(e.value) == f"{root}: {STALE}"
    monkeypatch.setattr(opener, "Archive", real)
    assert rows(root, "SELECT count(*) FROM requests") == [(1,)]


def test_dashboard_without_live_moves_to_the_last_commit_when_its_own_is_gone(tmp_path, monkeypatch):
    pytest.importorskip("streamlit", reason="streamlit is not installed (the dashboard extra has it)")
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    first = mf.read(root).seq
    monkeypatch.setenv("BUDGETSCOPE_ARCHIVE", str(root))
    monkeypatch.setenv("BUDGETSCOPE_BUDGETS", "")
    monkeypatch.delenv("BUDGETSCOPE_LIVE", raising=False)
    try:
        at = AppTest.from_file(str(ROOT / "dashboards" / "app.py"), default_timeout=60)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert {m.label: m.value for m in at.metric}["Requests"] == "2"
        _fill(root, tmp_path, [NOW + 10**9])  # a new commit alone: the page keeps to the one it read
        at.run()
        assert {m.label: m.value for m in at.metric}["Requests"] == "2"
        _drop_old_hours(root, monkeypatch)  # the commit it read is gone: a page that queries reads the last one
        at.switch_page("pages/tail_explorer.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        note = [c.value for c in at.caption if "were replaced by the writer's compaction or expiry" in c.value]
        assert note == [
            f"Reading commit {mf.read(root).seq}: the files of commit {first}, read until then, were "
            "replaced by the writer's compaction or expiry (`--live` follows every commit)"
        ], note
        at.switch_page("pages/budgets.py")
        at.run()
        assert {m.label: m.value for m in at.metric}["Requests"] == "2"  # one expired, one new
    finally:
        st.cache_resource.clear()
        st.cache_data.clear()


# -- the readers' grace: how long replaced segments stay, kept in the archive ----------------------------------
def test_parse_grace():
    from budgetscope.archive.retention import parse_grace

    assert [parse_grace(t) for t in ("90s", "10m", "2h", "1d", "0.5s")] == [90, 600, 7200, 86_400, 0.5]
    for bad in ("", "10", "0s", "5x", "-1m", "8d"):
        with pytest.raises(ValueError, match="reader grace"):
            parse_grace(bad)


def test_a_readers_grace_is_kept_in_the_archive_and_compaction_honours_it(tmp_path, monkeypatch):
    from budgetscope.archive.directory import DirectoryArchive

    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    assert mf.read(root).grace_s == mf.RETIRE_GRACE_S and "reader_grace_s" not in (root / mf.MANIFEST).read_text()
    seq = mf.read(root).seq
    DirectoryArchive(root, create=False, reader_grace_s=600).close()
    assert mf.read(root).reader_grace_s == 600 and mf.read(root).seq == seq  # a setting, not a commit
    DirectoryArchive(root, create=False).close()  # a later writer keeps it
    assert mf.read(root).grace_s == 600
    with Archive(root, read_only=True) as reader:
        _expire = ["expire", "-a", str(root), "--retention", "30d", "--no-wait"]
        monkeypatch.setattr(mf, "RETIRE_GRACE_S", 0.0)  # the default no longer counts: the archive's own does
        for _ in range(2):
            assert CliRunner().invoke(main, _expire).exit_code == 0
        assert mf.read(root).retired and not reader.stale()
        assert reader.con.execute("SELECT count(*) FROM requests").fetchall() == [(2,)]


def test_expire_waits_the_archives_own_grace(tmp_path):
    from budgetscope.archive.directory import DirectoryArchive

    root = tmp_path / "a"
    _fill(root, tmp_path, [T0, NOW])
    DirectoryArchive(root, create=False, reader_grace_s=0.3).close()
    res = CliRunner().invoke(main, ["expire", "-a", str(root), "--retention", "30d"])
    assert res.exit_code == 0 and "readers have had 0.3 s" in res.output, res.output
    assert not mf.read(root).retired and {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")} == {
        s.path for s in mf.read(root).segments
    }


@pytest.mark.parametrize("case", ["zero", "too long", "single file", "stored bad"])
def test_a_bad_readers_grace_is_one_line_and_changes_nothing(tmp_path, case):
    from budgetscope.archive.directory import DirectoryArchive
    from budgetscope.archive.errors import ArchiveError

    root = tmp_path / "a"
    _fill(root, tmp_path, [NOW])
    before = (root / mf.MANIFEST).read_bytes()
    if case == "stored bad":  # a manifest edited by hand
        (root / mf.MANIFEST).write_bytes(before.replace(b'"format"', b'"reader_grace_s":"10m","format"'))
        with pytest.raises(mf.ManifestError, match="malformed .a readers' grace of '10m' s"):
            mf.read(root)
        return
    if case == "single file":
        res = CliRunner().invoke(main, ["collect", "-a", str(tmp_path / "a.duckdb"), "--reader-grace", "10m"])
        assert res.exit_code == 2 and res.output.count("\n") == 1 and "folder archives" in res.output, res.output
        assert not (tmp_path / "a.duckdb").exists()
        with pytest.raises(ArchiveError, match="folder archives"):
            Archive(tmp_path / "b.duckdb", reader_grace_s=600)
        return
    grace = {"zero": "0s", "too long": "8d"}[case]
    res = CliRunner().invoke(main, ["collect", "-a", str(root), "--reader-grace", grace])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "reader grace" in res.output, res.output
    with pytest.raises(ArchiveError, match="readers' grace"):
        DirectoryArchive(root, create=False, reader_grace_s={"zero": 0.0, "too long": 8 * 86_400.0}[case])
    assert (root / mf.MANIFEST).read_bytes() == before


def test_collect_records_its_readers_grace(tmp_path):
    from budgetscope.collector import Collector

    root = tmp_path / "a"
    with Collector(root, grpc_port=None, http_port=0, reader_grace_s=900.0):
        pass
    assert mf.read(root).grace_s == 900


def test_live_dashboard_on_a_sharded_root_follows_any_shards_commit(tmp_path, monkeypatch):
    pytest.importorskip("streamlit", reason="streamlit is not installed (the dashboard extra has it)")
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    base = tmp_path / "fleet"
    base.mkdir()
    for sid in ("s1", "s2"):
        _fill(base / f"shard={sid}", tmp_path, [NOW])
    monkeypatch.setenv("BUDGETSCOPE_ARCHIVE", str(base))
    monkeypatch.setenv("BUDGETSCOPE_BUDGETS", "")
    monkeypatch.setenv("BUDGETSCOPE_LIVE", "1")
    try:
        at = AppTest.from_file(str(ROOT / "dashboards" / "app.py"), default_timeout=60)
        at.run()
        assert {m.label: m.value for m in at.metric}["Requests"] == "2"
        _fill(base / "shard=s2", tmp_path, [NOW + 10**9])  # one shard commits: the page reads the new whole
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert {m.label: m.value for m in at.metric}["Requests"] == "3"
        assert any(c.value.startswith(f"Live: commit {last_commit(base)},") for c in at.caption)
    finally:
        st.cache_resource.clear()
        st.cache_data.clear()
