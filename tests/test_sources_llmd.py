"""llm-d end to end (derive/llmd.py): one row per user request whose parts add up, legs that lost their trace
context counted and named, never joined by a guess (the rows themselves: tests/conformance/llm-d/)."""

from __future__ import annotations

import math
from pathlib import Path

from budgetscope.analysis.coverage import orphan_line
from budgetscope.analysis.render import render_text
from budgetscope.analysis.report import build_report
from budgetscope.opener import Archive
from conftest import rows

CASES = Path(__file__).parent / "conformance" / "llm-d"
E2E_PARTS = ("gateway_ms", "frontend_ms", "queue_ms", "prefill_ms", "kv_handoff_ms", "decode_ms", "postprocess_ms")
TTFT_PARTS = ("gateway_ms", "ttft_frontend_ms", "ttft_queue_ms", "ttft_prefill_ms", "kv_handoff_ms")


def _land(archive_path, ingest_text, case: str) -> None:
    ingest_text(archive_path, (CASES / case / "spans.jsonl").read_bytes())


def _report(archive_path) -> dict:
    with Archive(archive_path, read_only=True, create=False) as a:
        return build_report(a.con)


def test_an_llmd_row_adds_up_to_its_e2e_and_its_ttft(archive_path, ingest_text):
    """Every part of a P/D request's E2E and TTFT is a stage or unaccounted, exactly: nothing counted twice (the
    prefill leg's own postprocess lies inside the hand-off), nothing lost."""
    _land(archive_path, ingest_text, "pd-nixlv2")
    cols = ", ".join(E2E_PARTS + TTFT_PARTS + ("unaccounted_ms", "ttft_unaccounted_ms", "e2e_ms", "ttft_ms"))
    ((*vals,),) = rows(archive_path, f"SELECT {cols} FROM requests")
    got = dict(zip(cols.split(", "), vals))
    assert math.isclose(sum(got[c] for c in E2E_PARTS) + got["unaccounted_ms"], got["e2e_ms"], abs_tol=1e-6)
    assert math.isclose(sum(got[c] for c in TTFT_PARTS) + got["ttft_unaccounted_ms"], got["ttft_ms"], abs_tol=1e-6)
    assert got["unaccounted_ms"] >= 0 and got["ttft_unaccounted_ms"] >= 0


def test_the_report_names_the_legs_that_lost_their_trace_context(archive_path, ingest_text):
    """The prefill leg's llm_request started its own trace: the report counts it by service, and the sidecar leg
    left without it, in its JSON and its text; the vLLM row it makes is not joined to the llm-d request."""
    _land(archive_path, ingest_text, "orphan-leg")
    rep = _report(archive_path)
    assert rep["llmd_orphans"] == {
        "llmd_requests": 1,
        "llm_request_roots": 1,
        "by_service": [{"service_name": "vllm-prefill", "spans": 1}],
        "legs_without_llm_request": 1,
    }
    line = orphan_line(rep["llmd_orphans"])
    assert line.startswith("llm-d: 1 llm_request spans started a trace of their own (vllm-prefill (1))")
    assert "1 routing-sidecar legs have no llm_request" in line
    assert line in render_text(rep)
    assert sorted(rows(archive_path, "SELECT source FROM requests")) == [("llmd",), ("vllm",)]


def test_a_whole_llmd_trace_names_no_orphan(archive_path, ingest_text):
    """A P/D request with both legs in its trace: nothing to name, and its legs are no rows of their own."""
    _land(archive_path, ingest_text, "pd-nixlv2")
    rep = _report(archive_path)
    assert rep["llmd_orphans"] == {
        "llmd_requests": 1,
        "llm_request_roots": 0,
        "by_service": [],
        "legs_without_llm_request": 0,
    }
    assert orphan_line(rep["llmd_orphans"]) is None
    assert rows(archive_path, "SELECT count(*), min(source) FROM requests") == [(1, "llmd")]
    (tier,) = rep["tiers"]
    assert set(tier["attribution"]["ttft"]["tail_mean_ms"]) == {
        "gateway", "frontend", "queue", "prefill", "kv_handoff", "unaccounted"
    }  # fmt: skip


def test_a_report_without_llmd_has_no_orphan_key_value(archive_path, ingest_text):
    """Other formats' reports: `llmd_orphans` null, no stage of the gateway's, no sampling statement."""
    case = Path(__file__).parent / "conformance" / "vllm" / "classic"
    ingest_text(archive_path, (case / "spans.jsonl").read_bytes())
    rep = _report(archive_path)
    assert rep["llmd_orphans"] is None
    (tier,) = rep["tiers"]
    assert "gateway" not in tier["stages"] and tier["sampling"] is None
