"""docs/archive.md, the schema definition and the real DuckDB schema stay in step."""

from __future__ import annotations

from pathlib import Path

from budgetscope import schema
from budgetscope.opener import Archive

DOC = Path(__file__).parent.parent / "docs" / "archive.md"


def test_docs_contain_the_generated_schema_tables():
    assert schema.markdown() in DOC.read_text(), "regenerate with: python -m budgetscope.schema"


import pytest


@pytest.mark.parametrize("name", ["a.duckdb", "a"])
def test_real_schema_matches_the_definition(tmp_path, name):
    Archive(tmp_path / name).close()
    with Archive(tmp_path / name, read_only=True) as a:
        for t in schema.PUBLIC:
            got = a.con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = ? ORDER BY ordinal_position",
                [t.name],
            ).fetchall()
            want = [(c.name, c.type) for c in t.columns]
            assert got == want, t.name


def test_every_column_documents_its_unit():
    for t in schema.PUBLIC:
        for c in t.columns:
            if c.name.endswith("_ns"):
                assert "ns" in c.description, c.name
            if c.name.endswith("_ms"):
                assert "ms" in c.description, c.name
