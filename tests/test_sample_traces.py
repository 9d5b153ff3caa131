"""The recorded sample archives open, and each report names the cause its scenario injected."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from budgetscope.analysis import build_report, load_budgets
from budgetscope.archive import Archive
from budgetscope.demo.scenarios import SCENARIOS

SAMPLES = Path(__file__).parent.parent / "sample_traces"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sample_archive_report(name):
    sc = SCENARIOS[name]
    with Archive(SAMPLES / name, read_only=True) as a:
        (t,) = build_report(a.con, load_budgets(SAMPLES / "budgets.toml"))["tiers"]
    assert t["figures"] == "client" and t["requests"] >= 40
    if sc.expect is None:
        assert t["kept"]
    else:
        assert not t["kept"] and t["attribution"][sc.metric]["dominant"] == sc.expect


def test_sample_budgets_are_the_demo_budgets():
    from budgetscope.demo.offline import demo_budgets_path

    assert (SAMPLES / "budgets.toml").read_text() == demo_budgets_path().read_text()


def test_samples_are_folder_archives_and_nothing_names_a_duckdb_sample():
    """A `.duckdb` file is tied to the storage version of the DuckDB that wrote it; Parquet folders are not."""
    assert not list(SAMPLES.glob("*.duckdb")) and not list(SAMPLES.glob("*.db"))
    root = SAMPLES.parent
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    named = [
        f
        for f in files
        if f.endswith((".py", ".md", ".toml", ".yaml", "Makefile"))
        and re.search(r"sample_traces/[\w-]+\.duckdb", (root / f).read_text(errors="replace"))
    ]
    assert named == []


def test_the_duckdb_range_is_the_documented_one():
    declared = re.search(r'"duckdb(>=[\d.]+,<[\d.]+)"', (SAMPLES.parent / "pyproject.toml").read_text()).group(1)
    assert f"`duckdb{declared}`" in (SAMPLES.parent / "docs" / "archive.md").read_text()
