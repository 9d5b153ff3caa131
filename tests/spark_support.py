"""What the Spark tests share: whether Spark can run here, the comparison of two engines' answers, and
`budgetscope derive` on both engines. The session itself is the `spark` fixture of conftest.py (one a worker)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest


def _spark_missing() -> str | None:
    try:
        import pyspark  # noqa: F401 - imported to see whether it is installed
    except ImportError:
        return "pyspark is not installed (pip install -e '.[dev]')"
    from budgetscope.spark.session import java_problem

    problem = java_problem()
    return f"Spark needs Java: {problem}" if problem else None


SPARK_MISSING = _spark_missing()


def needs_spark(f):
    """Marked `spark`; skipped with one line where Java or pyspark is missing."""
    return pytest.mark.spark(pytest.mark.skipif(SPARK_MISSING is not None, reason=SPARK_MISSING or "")(f))


def assert_same(a, b, path="report"):
    """Equal JSON, floats within 1e-9 relative (sums and interpolations may round differently)."""
    if isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (path, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (path, a.keys(), getattr(b, "keys", lambda: b)())
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b and type(a) is type(b), (path, a, b)


DERIVED_ORDER = "ORDER BY trace_id, server_span_id"


def derived_the_same(archive: Path, tmp_path: Path, n: int):
    """`budgetscope derive` on DuckDB and on Spark: `n` rows each, the same rows. Returns (a DuckDB connection, the
    Spark rows in DERIVED_ORDER)."""
    import duckdb

    from budgetscope.spark.derive import derive_duckdb, derive_spark

    assert derive_duckdb(archive, tmp_path / "duck") == derive_spark(archive, tmp_path / "spark") == n
    con = duckdb.connect()
    want = con.execute(f"SELECT * FROM read_parquet('{tmp_path / 'duck'}/*.parquet') {DERIVED_ORDER}").fetchall()
    got = con.execute(f"SELECT * FROM read_parquet('{tmp_path / 'spark'}/*.parquet') {DERIVED_ORDER}").fetchall()
    assert_same(want, got, "derived")
    return con, got
