"""docs/design.md is the design page the other docs cite: it holds every contract, and every path it names
exists. No page cites a DESIGN.md that is not in the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"


def test_design_doc_has_every_contract():
    text = DESIGN.read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    for section in (
        "Architecture",
        "Stages",
        "Spans",
        "The archive's tables",
        "Budgets",
        "Attribution",
        "The report JSON",
        "Packaging",
        "Decisions",
    ):
        assert section in headings, section
    import budgetscope

    for stage in budgetscope.STAGES:
        assert f"| `{stage}` |" in text, stage


def test_every_path_the_design_doc_names_exists():
    text = DESIGN.read_text()
    paths = set(re.findall(r"`((?:budgetscope|docs|tests|dashboards|instrumentation|sample_traces)/[\w./\-]*)`", text))
    paths |= {m for m in re.findall(r"\(`?((?:docs|tests)/[\w./\-]+\.(?:md|py))`?", text)}
    assert len(paths) > 20
    for p in sorted(paths):
        if "*" in p or "<" in p:
            continue
        assert (ROOT / p).exists() or (
            ROOT
            / p.replace("budgetscope/otelcol/", "instrumentation/otel-collector/").replace(
                "budgetscope/dashboards/", "dashboards/"
            )
        ).exists(), p


def test_no_page_cites_a_missing_design_file():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in tracked:
        path = ROOT / name
        if path.suffix not in (".md", ".py", ".toml", ".yaml", ".txt") or not path.is_file() or path == Path(__file__):
            continue
        if re.search(r"DESIGN(\.md|'s\b|:)|\bthe DESIGN\b", path.read_text(errors="replace")):
            offenders.append(name)
    assert offenders == [], offenders
