"""A commit writes the rows that landed since the last one while it derives (archive/segments.py `WriteBehind`):
whatever fails, or lands meanwhile, nothing is lost, published twice, or left behind under `_tmp`."""

from __future__ import annotations

import threading

import pytest

from budgetscope.archive import manifest as mf
from budgetscope.archive import segments
from budgetscope.ingest import lander
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from conftest import rows


def _file(tmp_path, name: str, seed: int):
    f = tmp_path / name
    write_jsonl(f, SyntheticSpec(num_requests=300, seed=seed))
    return f


def _left_in_tmp(root) -> list:
    return sorted((root / mf.TMP_DIR).rglob("*.parquet")) if (root / mf.TMP_DIR).is_dir() else []


def _spans_in(f) -> int:
    return f.read_bytes().count(b'"spanId"')


def test_rows_landed_after_the_write_began_are_written_with_the_rest(tmp_path):
    """The write begins once the commit has read back what it needs; should rows land before it publishes, it is
    written again, whole (publishing only what it had would mark the rest published and lose it)."""
    one, two = _file(tmp_path, "1.jsonl", 1), _file(tmp_path, "2.jsonl", 2)
    a = Archive(tmp_path / "a", durable=True, compact=False)
    try:
        a.ingest(read_batches(one), derive=False)
        a.before_derive()  # the write of `one`'s rows begins
        a.ingest(read_batches(two), derive=False)
        a.after_derive()
        a.commit()
    finally:
        a.close()
    assert rows(tmp_path / "a", "SELECT count(*) FROM spans") == [(_spans_in(one) + _spans_in(two),)]
    assert rows(tmp_path / "a", "SELECT count(*) FROM requests") == [(600,)]
    assert _left_in_tmp(tmp_path / "a") == []


def _commit_after_a_failure(tmp_path, monkeypatch, owner, name: str, broken, error, match: str) -> None:
    """Land a file, commit it with `owner.name` replaced by `broken` (the commit fails with `error`), check that
    nothing was published nor left under `_tmp`, then commit it again with the real one: every row, once."""
    f = _file(tmp_path, "1.jsonl", 1)
    real = getattr(owner, name)
    a = Archive(tmp_path / "a", durable=True, compact=False)
    try:
        a.ingest(read_batches(f), derive=False)
        monkeypatch.setattr(owner, name, broken)
        with pytest.raises(error, match=match):
            a.commit()
        assert mf.read(tmp_path / "a").files("spans") == []
        assert _left_in_tmp(tmp_path / "a") == []
        monkeypatch.setattr(owner, name, real)
        a.commit()
        assert _left_in_tmp(tmp_path / "a") == []
    finally:
        a.close()
    assert rows(tmp_path / "a", "SELECT count(*) FROM spans") == [(_spans_in(f),)]
    assert rows(tmp_path / "a", "SELECT count(*) FROM requests") == [(300,)]
    assert sum(s.rows for s in mf.read(tmp_path / "a").files("spans")) == _spans_in(f)  # published once


def test_a_write_that_fails_fails_its_commit_and_loses_nothing(tmp_path, monkeypatch):
    """The spans it had written before the batches' write failed are deleted with it."""
    real = segments.write

    def full_disk(con, root, table, *args, **kw):
        if threading.current_thread().name == "budgetscope-write-behind" and table == "ingest_batches":
            raise OSError(28, "No space left on device")
        return real(con, root, table, *args, **kw)

    _commit_after_a_failure(tmp_path, monkeypatch, segments, "write", full_disk, OSError, "No space left")


def test_a_derivation_that_fails_leaves_no_file_of_the_write_begun_for_it(tmp_path, monkeypatch):
    """The write begun for the failed commit is discarded by the next, which makes it again."""

    def fails(*a, **kw):
        raise RuntimeError("the derivation failed")

    _commit_after_a_failure(tmp_path, monkeypatch, lander, "derive_pending", fails, RuntimeError, "derivation failed")
