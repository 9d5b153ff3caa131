"""Segments of `requests` are written sorted by tier, then arrival (segments.ORDER), however many hours a
write spans; the rows are the single file's."""

from __future__ import annotations

import duckdb
import pytest

from budgetscope.archive import manifest as mf
from budgetscope.archive import segments
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
