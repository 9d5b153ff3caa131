"""Unknown stays unknown in every figure (issue 33, item 4): attainment judges each budgeted figure where it is
known and says over how many; a budget no request has the figure of is unknown, never a miss; the attribution shows
null for a stage nobody knows, never 0; the client TTFT's parts add up to it, the wait for content included."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from conftest import rows
from otlp_wire import MS, T0, export, jsonl, native_request
from server_traces import as_exported, draw, triton
from server_traces import jsonl as trace_jsonl

N = 120


def _report(tmp_path, archive, budgets: str, fmt: str = "json"):
    b = tmp_path / "b.toml"
    b.write_text(budgets)
    r = CliRunner().invoke(main, ["report", "-a", str(archive), "-b", str(b), "--format", fmt])
    assert r.exit_code in (0, 1, 3), r.output
    return r.exit_code, (json.loads(r.stdout) if fmt == "json" else r.stdout)


@pytest.fixture
def triton_archive(tmp_path):
    """A non-streaming Triton model: one response carrying every token, so no request has a first token."""
    mix = draw("unknown-ttft", "queue", N)
    src = tmp_path / "t.jsonl"
    src.write_text(trace_jsonl(as_exported([d for r in mix.requests for d in triton(r, False)], batch=64)))
    assert CliRunner().invoke(main, ["ingest", str(src), "-a", str(tmp_path / "a")]).exit_code == 0
    return tmp_path / "a"


def test_a_broken_stage_beside_an_unknown_ttft_is_broken_but_its_attainment_unknown(tmp_path, triton_archive):
    """The issue's tier: a stage budget broken, TTFT unknown for every request. BROKEN on the stage's evidence;
    attainment is null over 0 judged requests (no request can be judged on TTFT), never 0.0 %."""
    budgets = "[tiers.default]\nttft_ms = 10000\n[tiers.default.stages]\npostprocess = 0.001\n"
    code, rep = _report(tmp_path, triton_archive, budgets)
    (t,) = rep["tiers"]
    assert (code, t["status"], [b["kind"] for b in t["breaches"]]) == (1, "BROKEN", ["stage"])
    assert (t["attainment"], t["attainment_over"]) == (None, 0)
    assert t["attainment_by_figure"] == {"ttft_ms": {"met": 0, "judged": 0, "attainment": None}}
    assert "met every SLO" not in t["verdict"]


def test_attainment_is_over_the_known_figures(tmp_path, triton_archive):
    """A TTFT and a tight E2E budget: the E2E figure breaks it on evidence; attainment counts E2E where it is known
    (every request) and leaves the unknown TTFT out, saying how many it is over."""
    e2e = sorted(r[0] for r in rows(triton_archive, "SELECT e2e_ms FROM requests"))
    tight = (e2e[N // 2 - 1] + e2e[N // 2]) / 2  # half the requests within
    code, rep = _report(tmp_path, triton_archive, f"[tiers.default]\nttft_ms = 10000\ne2e_ms = {tight}\n")
    (t,) = rep["tiers"]
    assert (code, t["status"]) == (1, "BROKEN")
    assert (t["attainment"], t["attainment_over"]) == (0.5, N)
    assert t["attainment_by_figure"]["ttft_ms"] == {"met": 0, "judged": 0, "attainment": None}
    assert t["attainment_by_figure"]["e2e_ms"] == {"met": N // 2, "judged": N, "attainment": 0.5}


def test_a_stage_nobody_knows_has_a_null_share_never_zero(tmp_path, triton_archive):
    """Triton sees no prefill: its E2E attribution shows null for prefill (and decode, for a non-streaming model),
    in the JSON and as `null` in the text table; the known parts still add up (their time is unaccounted)."""
    _, rep = _report(tmp_path, triton_archive, "[tiers.default]\ne2e_ms = 100000\n")
    a = rep["tiers"][0]["attribution"]["e2e"]
    assert a["shares"]["prefill"] is None and a["shares"]["decode"] is None
    assert a["tail_mean_ms"]["prefill"] is None and a["unknown_share"] == 0.0
    assert sum(v for v in a["shares"].values() if v is not None) == pytest.approx(1.0)
    _, text = _report(tmp_path, triton_archive, "[tiers.default]\ne2e_ms = 100000\n", "table")
    attribution = text.split("-- tail attribution")[1]
    (prefill,) = [line for line in attribution.splitlines() if line.startswith("prefill ")]
    assert prefill.split()[-1] == "null"


def _content_requests(first_event: bool) -> str:
    """Native requests under a client that counts its first non-empty chunk (AIPerf, GuideLLM), 20 ms after its
    first stream event; `first_event`: whether the export keeps that first event (GuideLLM) or not (AIPerf's
    records alone). The tail's requests queue longer and wait longer for content."""
    docs = []
    for i in range(40):
        slow = i % 10 == 0
        _, spans = native_request(
            arrival=T0 + i * 1000 * MS,
            stages=(
                ("frontend", 2),
                ("queue", 300 if slow else 10),
                ("prefill", 50),
                ("decode", 100),
                ("postprocess", 3),
            ),
            client=(1, 2),
        )
        c = next(s for s in spans if s["name"] == "llm.client.request")
        a = {x["key"]: x for x in c["attributes"]}
        first = int(a["budgetscope.client.first_token_unix_nano"]["value"]["intValue"])
        gap = (60 if slow else 20) * MS
        a["budgetscope.client.first_token_unix_nano"]["value"] = {"intValue": str(first + gap)}
        extra = {"budgetscope.client.first_token_definition": {"stringValue": "first_nonempty_chunk"}}
        if first_event:
            extra["budgetscope.client.first_event_unix_nano"] = {"intValue": str(first)}
        c["attributes"] += [{"key": k, "value": v} for k, v in extra.items()]
        docs.append(export(spans))
    return jsonl(*docs)


def test_the_client_ttft_parts_add_up_to_it_exactly(archive_path, ingest_text, tmp_path):
    """With the first event known: client TTFT = TTFT network + the server's TTFT stages + TTFT unaccounted + the
    wait for content, to the last bit a float keeps; the TTFT attribution names the wait as a part of its own."""
    ingest_text(archive_path, _content_requests(True))
    got = rows(
        archive_path,
        """SELECT client_ttft_ms, ttft_network_ms + ttft_frontend_ms + ttft_queue_ms + ttft_prefill_ms
             + ttft_unaccounted_ms + ttft_content_gap_ms, ttft_content_gap_ms FROM requests""",
    )
    assert len(got) == 40 and all(whole == pytest.approx(parts, abs=1e-9) for whole, parts, _ in got)
    assert sorted({round(g, 6) for *_, g in got}) == [20.0, 60.0]
    _, rep = _report(tmp_path, archive_path, "[tiers.interactive]\nttft_ms = 100000\n")
    a = rep["tiers"][0]["attribution"]["ttft"]
    assert a["metric"] == "client_ttft_ms" and a["unknown_share"] == 0.0
    assert a["shares"]["content_gap"] == pytest.approx(40 / (290 + 40)) and a["dominant"] == "queue"


def test_without_the_first_event_network_and_the_wait_are_null_and_said(archive_path, ingest_text, tmp_path):
    """AIPerf's records alone: the first event is unknown, so TTFT network and the wait for content are NULL on
    every row: their shares are null (never 0.0), the known shares are of the client TTFT's whole excess, and what
    they leave is `unknown_share`, said in the verdict."""
    ingest_text(archive_path, _content_requests(False))
    assert rows(archive_path, "SELECT count(ttft_network_ms), count(ttft_content_gap_ms) FROM requests") == [(0, 0)]
    _, rep = _report(tmp_path, archive_path, "[tiers.interactive]\nttft_ms = 100000\n")
    a = rep["tiers"][0]["attribution"]["ttft"]
    assert a["shares"]["network"] is None and a["shares"]["content_gap"] is None
    assert a["shares"]["queue"] == pytest.approx(290 / 330) and a["unknown_share"] == pytest.approx(40 / 330)
    assert "lies in parts unknown for some requests" in rep["tiers"][0]["verdict"]
