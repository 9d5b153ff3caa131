"""`insert_rows`: Python tuples into a table in one statement, cast to the table's column types."""

import math

import duckdb
import pytest

from budgetscope.ingest.rows import insert_rows


def test_rows_land_with_the_table_types_nulls_and_special_floats():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a BIGINT, b VARCHAR, c DOUBLE, d JSON)")
    insert_rows(con, "t", [(1, "x", 1, '{"k": 1}'), (None, None, float("inf"), None), (2**62, "y", 0.5, "[]")], 4)
    got = con.execute("SELECT a, b, c, d, typeof(d) FROM t ORDER BY rowid").fetchall()
    assert got == [
        (1, "x", 1.0, '{"k": 1}', "JSON"),
        (None, None, math.inf, None, "JSON"),
        (2**62, "y", 0.5, "[]", "JSON"),
    ]


def test_a_row_of_the_wrong_width_is_refused_and_nothing_lands():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a BIGINT, b VARCHAR)")
    with pytest.raises(ValueError, match="rows for t have 3 values, want 2"):
        insert_rows(con, "t", [(1, "x", 3)], 2)
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(0,)]


def test_no_rows_is_a_no_op():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a BIGINT)")
    insert_rows(con, "t", [], 1)
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(0,)]
