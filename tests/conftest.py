"""Shared fixtures. Anything named fake_* is a test double and never leaves tests/."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # for tests/otlp_wire.py

SPARK_FILES = ("tests/test_spark.py", "tests/test_spark_derive.py", "tests/test_invariants.py")
"""The files whose tests use the `spark` fixture (tests/test_spark.py checks the list). Under `--dist loadfile` they
are one unit of work, so one xdist worker starts one JVM for all of them and its code is warm for the later ones:
a second worker's JVM cost its start (~14 s) and a cold first report (~20 s more) (docs/design.md, "Tests")."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with SPARK_FILES as one file; any other mode is xdist's own."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class OneSparkWorker(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return "spark" if file in SPARK_FILES else file

    return OneSparkWorker(config, log)


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


def fresh_python(code: str) -> str:
    """What `code` prints in a fresh interpreter (the import checks: what a command's start loads)."""
    import subprocess

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


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
