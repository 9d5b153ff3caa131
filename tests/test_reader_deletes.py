"""The reader drops re-derived `requests` rows once, when it opens (by file and row), with the same result as
the anti-join on `trace_id` that docs/archive.md gives other engines."""

from __future__ import annotations

from budgetscope.archive import compaction, directory
from budgetscope.archive import manifest as mf
from budgetscope.archive.reader import affected_segments, requests_sql
from budgetscope.ingest import batches, lander
from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl

H = mf.HOUR_NS


def _seg(table, seq, lo, hi, level=0):
    return mf.Segment(table, f"{table}/{seq}-{lo}.parquet", 1, 1, lo, hi, seq, level)


def test_which_segments_a_delete_can_reach():
    old, new = _seg("requests", 1, 0, H - 1), _seg("requests", 5, 0, H - 1)
    merged = _seg("requests", 9, 0, H - 1, level=1)
    later_hour = _seg("requests", 1, H, 2 * H - 1)
    dels = [_seg("requests_deletes", 5, 10, 20)]
    # a delete drops older rows of its own time range only; a merged segment's rows have many `_seq`
    assert affected_segments([old, new, merged, later_hour], dels) == [old, merged]
    assert affected_segments([old, new], []) == []


def test_reader_drops_what_the_trace_anti_join_drops(tmp_path, monkeypatch):
    monkeypatch.setattr(batches, "CHUNK_BYTES", 32 << 10)
    monkeypatch.setattr(lander, "DERIVE_EVERY_SPANS", 700)
    monkeypatch.setattr(directory, "MEMORY_SPANS", 1)
    monkeypatch.setattr(compaction, "plan", lambda *a: [])  # keep every delete for the reader to apply
    f = tmp_path / "t.jsonl"
    write_jsonl(f, SyntheticSpec(num_requests=400, tiers=("interactive", "batch"), spans_per_line=64))
    with Archive(tmp_path / "a") as a:
        a.ingest(read_batches(f))
    assert mf.read(tmp_path / "a").rows("requests_deletes") > 0
    with Archive(tmp_path / "a", read_only=True) as r:
        segs = r._segments
        ref = requests_sql(r.path, segs["requests"], segs["requests_deletes"])
        want = r.con.execute(f"SELECT * FROM ({ref}) ORDER BY ALL").fetchall()
        got = r.con.execute("SELECT * FROM requests ORDER BY ALL").fetchall()
        assert got == want
        assert len(got) == 400 and len({x[0] for x in got}) == 400
        dropped = r.con.execute("SELECT count(*) FROM bs_reader.requests_dead").fetchone()[0]
        assert dropped == mf.read(tmp_path / "a").rows("requests") - 400
        # a cursor is another connection to the same database: it sees the same requests
        cur = r.con.cursor()
        assert cur.execute("SELECT count(*) FROM requests").fetchone() == (400,)
