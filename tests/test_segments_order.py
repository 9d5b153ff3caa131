"""Segments of `requests` are written sorted by tier, then arrival (segments.ORDER), however many hours a
write spans; the rows are the single file's."""

from __future__ import annotations

import duckdb
import pytest

from budgetscope.archive import manifest as mf
from budgetscope.archive import segments
from budgetscope.archive.errors import ArchiveError
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl


@pytest.mark.parametrize("rate", [50.0, 0.01])  # one hour (one COPY an hour), and ~8 hours (staged first)
def test_requests_segments_are_sorted_by_tier_then_arrival(tmp_path, rate):
    f = tmp_path / "t.jsonl"
    write_jsonl(f, SyntheticSpec(num_requests=300, tiers=("interactive", "batch"), rate_per_s=rate, spans_per_line=64))
    for name in ("a", "a.duckdb"):
        with Archive(tmp_path / name) as a:
            a.ingest(read_batches(f))
    m = mf.read(tmp_path / "a")
    segs = m.files("requests")
    assert (len({s.hour for s in segs}) >= segments.PARTITIONED_FROM) == (rate < 1)
    con = duckdb.connect()
    for s in segs:
        got = con.execute(
            f"SELECT tier, arrival_ns FROM read_parquet('{tmp_path / 'a' / s.path}') ORDER BY file_row_number"
        ).fetchall()
        assert got == sorted(got)
    with Archive(tmp_path / "a", read_only=True) as r, Archive(tmp_path / "a.duckdb", read_only=True) as d:
        q = "SELECT trace_id, tier, arrival_ns, e2e_ms FROM requests ORDER BY ALL"
        assert r.con.execute(q).fetchall() == d.con.execute(q).fetchall()


@pytest.mark.parametrize("hours", [2, segments.PARTITIONED_FROM + 1])  # one COPY an hour; staged first
def test_hours_written_side_by_side_are_the_files_written_one_by_one(tmp_path, hours):
    """`write(workers=3)` runs each hour's COPY on a cursor, three at a time: every hour's file holds the rows, in
    the order, that one written on the connection itself holds."""
    con = duckdb.connect()
    con.execute(
        f"CREATE TABLE r AS SELECT 'i' || (i % 3) AS tier, (i * 7919 % 5000) * ({mf.HOUR_NS * hours} // 5000) "
        "AS arrival_ns, i AS n FROM range(5000) t(i)"
    )
    files = {}
    for workers in (1, 3):
        root = tmp_path / f"w{workers}"
        written = segments.write(con, root, "requests", "SELECT * FROM r", 1, workers=workers)
        assert len(written) == hours
        files[workers] = {
            seg.hour: con.execute(f"SELECT * FROM read_parquet('{f}') ORDER BY file_row_number").fetchall()
            for f, seg in written
        }
        for rows in files[workers].values():
            assert [r[:2] for r in rows] == sorted(r[:2] for r in rows)
    assert files[1] == files[3]
    assert sum(map(len, files[3].values())) == 5000
    assert not [t for (t,) in con.execute("SHOW TABLES").fetchall() if t.startswith("bs_write_")]


def test_hours_side_by_side_refuse_rows_their_cursors_cannot_see(tmp_path):
    """Cursors see only committed rows: a write from inside the connection's transaction, whose rows they miss,
    fails with one line instead of leaving files shorter than the segments that would name them."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE r AS SELECT 'i' AS tier, i * {mf.HOUR_NS // 2} AS arrival_ns FROM range(4) t(i)")
    con.execute("BEGIN")
    con.execute(f"INSERT INTO r VALUES ('i', {mf.HOUR_NS + 1})")
    with pytest.raises(ArchiveError, match=r"^requests: the file of hour 1 holds 2 rows of 3; nothing was published$"):
        segments.write(con, tmp_path, "requests", "SELECT * FROM r", 1, workers=2)
    assert len(segments.write(con, tmp_path, "requests", "SELECT * FROM r", 1, workers=1)) == 2


@pytest.mark.parametrize("table", ["requests", "spans"])
def test_each_hours_file_holds_the_rows_at_both_edges_of_its_hour(tmp_path, table):
    """An hour's COPY also bounds the time column by the hour's least and greatest value (which DuckDB takes
    into the scan): the first and the last nanosecond of every hour land in that hour's file, once."""
    col = mf.TIME_COLUMN[table]
    h = mf.HOUR_NS
    edges = [k * h + d for k in range(1, 4) for d in (0, 1, h - 1)]
    con = duckdb.connect()
    con.execute(f"CREATE TABLE r AS SELECT 'i' AS tier, unnest({edges}) AS {col}")
    written = segments.write(con, tmp_path, table, "SELECT * FROM r", 1, workers=2)
    got = {
        seg.hour: sorted(x for (x,) in con.execute(f"SELECT {col} FROM read_parquet('{f}')").fetchall())
        for f, seg in written
    }
    assert got == {k: [k * h, k * h + 1, k * h + h - 1] for k in range(1, 4)}


def test_a_row_without_its_time_is_refused_with_one_line_and_nothing_written(tmp_path):
    """A row whose time column is NULL belongs to no hour's file: the write fails with one line, before any file."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE r AS SELECT 'i' AS tier, unnest([{mf.HOUR_NS}, NULL, NULL]) AS arrival_ns")
    with pytest.raises(ArchiveError, match=r"^requests: 2 rows have no arrival_ns; nothing was published$"):
        segments.write(con, tmp_path, "requests", "SELECT * FROM r", 1, workers=2)
    assert not list(tmp_path.rglob("*.parquet"))
