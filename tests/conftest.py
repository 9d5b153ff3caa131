"""Shared fixtures. Anything named fake_* is a test double and never leaves tests/."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # for tests/otlp_wire.py


@pytest.fixture
def archive_path(tmp_path) -> Path:
    return tmp_path / "archive"


@pytest.fixture
def ingest_text(tmp_path):
    """Write `text` (or bytes) to a file and ingest it into `archive`; returns the IngestReport."""
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    counter = iter(range(10_000))

    def run(archive: Path, text: str | bytes, name: str | None = None):
        p = tmp_path / (name or f"traces-{next(counter)}.jsonl")
        p.write_bytes(text.encode() if isinstance(text, str) else text)
        with Archive(archive) as a:
            return a.ingest(read_batches(p))

    return run


def rows(archive: Path, sql: str, params=None) -> list[tuple]:
    from budgetscope.opener import Archive

    with Archive(archive, read_only=True, create=False) as a:
        return a.con.execute(sql, params or []).fetchall()


def synthetic_archive(root: Path, num_requests: int) -> Path:
    """A folder archive, `root`/archive, of `num_requests` synthetic requests landed through the real ingest."""
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive
    from budgetscope.synthetic import SyntheticSpec, write_jsonl

    write_jsonl(root / "t.jsonl", SyntheticSpec(num_requests=num_requests))
    with Archive(root / "archive") as a:
        a.ingest(read_batches(root / "t.jsonl"))
    return root / "archive"


@pytest.fixture(scope="session")
def spark():
    """One local[2] Spark session a test worker, started on first use (~10 s) and kept warm for every Spark test
    it runs (tests/spark_support.py: whether Spark can run here)."""
    from budgetscope.spark.session import session, stop

    s = session("local[2]")
    yield s
    stop(s)
