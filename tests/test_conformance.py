"""Conformance: traces shaped as upstream servers emit them today → exactly the hand-computed request rows.

Each case is a folder under tests/conformance/<server>/<case>/ (format in tests/conformance/README.md): the spans
as the server's source writes them, and the rows the adapters must derive, to the microsecond.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from budgetscope.analysis.coverage import unclaimed_spans
from budgetscope.opener import Archive
from conftest import rows
from otlp_wire import MS, T0, export, jsonl, native_request, span, span_id, trace_id

ROOT = Path(__file__).parent / "conformance"
CASES = sorted(p.parent for p in ROOT.glob("*/*/expected.json"))
MS_TOLERANCE = 1e-3  # 1 µs


def _ids(case: Path) -> str:
    return f"{case.parent.name}/{case.name}"


def _same(want, got) -> bool:
    if want is None:
        return got is None or (isinstance(got, float) and math.isnan(got))
    if isinstance(want, float) and got is not None:
        return abs(want - got) <= MS_TOLERANCE
    return want == got


def _land(case: Path, archive_path: Path, ingest_text) -> None:
    """The case's input into the archive: `spans.jsonl` through ingest, or what `import.json` names through
    `budgetscope import` (a server's own file format, e.g. a Triton trace file)."""
    spec = case / "import.json"
    if not spec.exists():
        ingest_text(archive_path, (case / "spans.jsonl").read_bytes())
        return
    from click.testing import CliRunner

    from budgetscope.cli import main

    imp = json.loads(spec.read_text())
    r = CliRunner().invoke(main, ["import", str(case / imp["file"]), "--archive", str(archive_path), *imp["args"]])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_upstream_trace_derives_the_expected_rows(case: Path, archive_path, ingest_text):
    expected = json.loads((case / "expected.json").read_text())
    assert expected["upstream"]["commit"] and len(expected["upstream"]["commit"]) == 40, "cite the upstream commit"
    _land(case, archive_path, ingest_text)
    want = expected["requests"]
    keys = sorted({k for r in want for k in r})
    got = rows(archive_path, f"SELECT {', '.join(keys)} FROM requests")
    assert len(got) == len(want), f"{len(got)} request rows, expected {len(want)} (each request once)"
    # rows are matched by request id; by (request id, trace) where the case gives traces: a leg that lost its trace
    # context carries its request's id in a trace of its own
    key = ("request_id", "trace_id") if "trace_id" in keys else ("request_id",)
    by_id = {tuple(dict(zip(keys, r))[k] for k in key): dict(zip(keys, r)) for r in got}
    assert len(by_id) == len(got), "a request id appears on more than one row"
    for w in want:
        g = by_id.get(tuple(w[k] for k in key))
        assert g is not None, f"no row for request {w['request_id']} (rows: {sorted(by_id)})"
        wrong = {k: (v, g[k]) for k, v in w.items() if not _same(v, g[k])}
        assert not wrong, f"request {w['request_id']}: (expected, derived) {wrong}"
    if "unclaimed" in expected:
        assert_unclaimed(archive_path, expected["unclaimed"])


def assert_unclaimed(archive: Path, want: dict[str, int]) -> None:
    """The spans no adapter claimed, by exact span name, are `want` (`budgetscope.analysis.coverage`)."""
    with Archive(archive, read_only=True, create=False) as a:
        got = unclaimed_spans(a.con, exact=True)["by_name"]
    assert got == want, f"unclaimed spans by name: derived {got}, expected {want}"


def test_the_unclaimed_check_compares_exact_names(archive_path, ingest_text):
    """`unclaimed` in expected.json: exact names and counts; a span inside a request's trace is not unclaimed."""
    _, known = native_request()
    extra = span(known[0]["traceId"], span_id(), "POST /generate", T0, T0 + MS, kind=2)
    roots = [span(trace_id(), span_id(), name, T0, T0 + MS, kind=2) for name in (" Req 1f3a9c2e", " Req 00ab12cd")]
    ingest_text(archive_path, jsonl(export([*known, extra]), export(roots, service="sglang", scope="sglang")))
    assert_unclaimed(archive_path, {" Req 1f3a9c2e": 1, " Req 00ab12cd": 1})
    with pytest.raises(AssertionError, match="unclaimed spans by name"):
        assert_unclaimed(archive_path, {" Req <id>": 2})


def test_every_server_has_cases_and_a_readme():
    servers = {c.parent.name for c in CASES}
    for s in servers:
        assert (ROOT / s / "README.md").exists(), f"tests/conformance/{s}/README.md cites the upstream source"
