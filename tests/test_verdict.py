"""A tier's status: failed requests break budgets, unknown figures are UNKNOWN (never KEPT), the exit codes, and
what the report, ingest and collect say about spans no adapter claimed and about coverage."""

from __future__ import annotations

import html
import json
import time

import pytest
from click.testing import CliRunner

from budgetscope.analysis.coverage import id_free, unclaimed_spans
from budgetscope.cli import main
from budgetscope.opener import Archive
from conftest import rows
from otlp_wire import MS, T0, export, jsonl, native_request, span, span_id, trace_id
from otlp_wire import outcome_requests as _requests

BUDGETS = "[tiers.interactive]\nttft_ms = 500\ne2e_ms = 2000\n"


@pytest.fixture
def runner():
    return CliRunner()


def _unknown_roots(n: int) -> list[dict]:
    """Request roots of a server no adapter knows (a made-up `lmserve`): nothing derives a request from them."""
    docs = []
    for i in range(n):
        tid, root = trace_id(), span_id()
        docs.append(
            export(
                [
                    span(
                        tid,
                        root,
                        f"handle_request {i:08x}",
                        T0 + i * MS,
                        T0 + i * MS + 40 * MS,
                        kind=2,
                        attributes={"request.id": f"{i:08x}"},
                    )
                ],
                service="lmserve",
                scope="lmserve",
            )
        )
    return docs


def _archive(runner, tmp_path, docs: list[dict], budgets: str = BUDGETS):
    src, a, b = tmp_path / "t.jsonl", tmp_path / "a", tmp_path / "b.toml"
    src.write_text(jsonl(*docs))
    b.write_text(budgets)
    r = runner.invoke(main, ["ingest", str(src), "-a", str(a)])
    assert r.exit_code == 0, r.output
    return a, b, r


def _report(runner, a, b=None, fmt="json"):
    r = runner.invoke(main, ["report", "-a", str(a), *(["-b", str(b)] if b else []), "--format", fmt])
    return r, (json.loads(r.stdout) if fmt == "json" else None)


def test_an_all_error_tier_is_broken_and_exits_1(runner, tmp_path):
    a, b, _ = _archive(runner, tmp_path, _requests(["error"] * 20))
    r, rep = _report(runner, a, b)
    t = rep["tiers"][0]
    assert r.exit_code == 1
    assert (t["status"], t["kept"], rep["status"], rep["kept"]) == ("BROKEN", False, "BROKEN", False)
    assert (t["attainment"], t["error_rate"], t["max_error_rate"]) == (0.0, 1.0, 0.01)
    assert t["breaches"] == [
        {"kind": "error_rate", "name": "max_error_rate", "value": 1.0, "budget": 0.01, "declared": False}
    ]
    assert t["verdict"] == (
        "interactive breaks its budget: too many of its requests failed. 20 of 20 requests "
        "failed (20 errors): error rate 100.0% vs 1.0% allowed (the default for p99), a breach; "
        "failed requests miss every SLO."
    )
    assert "{" not in t["verdict"]
    text, _ = _report(runner, a, b, "table")
    assert (text.exit_code, text.stdout.splitlines()[0]) == (
        1,
        (
            "== tier interactive: BROKEN — 20 requests (0 ok), p99 over the ok requests, attainment 0.0%, error rate "
            "100.0% (max 1%), server-side figures"
        ),
    )


def test_a_half_error_tier_is_broken_though_its_ok_requests_are_fast(runner, tmp_path):
    a, b, _ = _archive(runner, tmp_path, _requests(["ok", "error"] * 10 + ["timeout", "rejected"]))
    r, rep = _report(runner, a, b)
    t = rep["tiers"][0]
    assert r.exit_code == 1 and t["status"] == "BROKEN"
    assert t["metrics"]["ttft_ms"]["p99"] < 500 and t["metrics"]["e2e_ms"]["p99"] < 2000  # the ok ones keep
    assert t["error_rate"] == pytest.approx(12 / 22) and t["attainment"] == pytest.approx(10 / 22)
    assert "12 of 22 requests failed (10 errors, 1 rejected, 1 timeout): error rate 54.5%" in t["verdict"]
    assert t["percentiles_over"] == "ok requests"


def test_a_declared_max_error_rate_is_the_limit(runner, tmp_path):
    docs = _requests(["ok"] * 8 + ["error"] * 2)
    a, b, _ = _archive(runner, tmp_path, docs, BUDGETS + "max_error_rate = 0.2\n")
    r, rep = _report(runner, a, b)
    assert (r.exit_code, rep["tiers"][0]["status"], rep["tiers"][0]["max_error_rate_declared"]) == (0, "KEPT", True)
    assert "error rate 20.0%, within 20.0% (max_error_rate)" in rep["tiers"][0]["verdict"]
    b.write_text(BUDGETS + "max_error_rate = 0.1\n")
    r, rep = _report(runner, a, b)
    assert (r.exit_code, rep["tiers"][0]["breaches"][0]["name"]) == (1, "max_error_rate")


def test_cancelled_requests_are_neither_success_nor_failure(runner, tmp_path):
    a, b, _ = _archive(runner, tmp_path, _requests(["ok"] * 9 + ["cancelled"] * 5))
    r, rep = _report(runner, a, b)
    t = rep["tiers"][0]
    assert (r.exit_code, t["status"], t["judged_requests"], t["attainment"], t["error_rate"]) == (
        0,
        "KEPT",
        9,
        1.0,
        0.0,
    )
    (tmp_path / "all").mkdir()
    a, b, _ = _archive(runner, tmp_path / "all", _requests(["cancelled"] * 3))
    r, rep = _report(runner, a, b)
    assert (r.exit_code, rep["tiers"][0]["status"]) == (3, "UNKNOWN")
    assert rep["tiers"][0]["unknown_reason"] == "all 3 requests were cancelled by their clients"


def test_attainment_zero_is_never_kept(runner, tmp_path):
    """Half the requests miss the TTFT budget, the other half the E2E budget: every p40 is within budget, yet no
    request met every SLO."""
    slow_ttft = (("frontend", 1), ("queue", 600), ("prefill", 20), ("decode", 50), ("postprocess", 1))
    slow_e2e = (("frontend", 1), ("queue", 5), ("prefill", 20), ("decode", 2500), ("postprocess", 1))
    docs = _requests(["ok"] * 5, stages=slow_ttft) + _requests(["ok"] * 5, stages=slow_e2e)
    a, b, _ = _archive(runner, tmp_path, docs, BUDGETS.replace("]\n", "]\npercentile = 40\n", 1))
    r, rep = _report(runner, a, b)
    t = rep["tiers"][0]
    assert t["metrics"]["ttft_ms"]["p40"] < 500 and t["metrics"]["e2e_ms"]["p40"] < 2000
    assert (t["attainment"], r.exit_code, t["status"]) == (0.0, 1, "BROKEN")
    assert t["breaches"] == [{"kind": "attainment", "name": "attainment", "value": 0.0, "budget": 0.4}]
    assert t["verdict"].startswith("interactive breaks its budget: no ok request met every SLO.")


def test_a_tier_whose_spans_carry_no_latency_is_unknown(runner, tmp_path):
    """vLLM journey tracing: `llm_request` without `gen_ai.latency.*`: a row is derived, its figures are NULL."""
    docs = [
        export(
            [
                span(
                    trace_id(),
                    span_id(),
                    "llm_request",
                    T0 + i * MS,
                    T0 + i * MS + 50 * MS,
                    kind=2,
                    attributes={"gen_ai.request.id": f"r{i}"},
                )
            ],
            service="vllm",
            scope="vllm.llm_engine",
        )
        for i in range(12)
    ]
    a, b, _ = _archive(runner, tmp_path, docs, "[tiers.default]\nttft_ms = 500\ne2e_ms = 2000\n")
    r, rep = _report(runner, a, b)
    t = rep["tiers"][0]
    assert (r.exit_code, t["status"], t["kept"], t["attainment"], rep["status"]) == (
        3,
        "UNKNOWN",
        False,
        None,
        "UNKNOWN",
    )
    assert t["unknown_reason"] == (
        "no ok request has a known TTFT, E2E (of 12 ok requests): the spans were read but carry no such timing"
    )
    assert "keeps its budgets" not in t["verdict"] and t["verdict"].startswith("default: its budgets cannot be judged")
    r, rep = _report(runner, a)  # without budgets too
    assert (r.exit_code, rep["tiers"][0]["status"]) == (3, "UNKNOWN")


def test_a_format_no_adapter_reads_is_unknown_with_a_warning(runner, tmp_path):
    a, b, ingest = _archive(runner, tmp_path, _unknown_roots(30))
    assert ingest.stdout.splitlines()[-1] == f"{a}: 30 spans no adapter claimed: 'handle_request <id>' of lmserve (30)"
    assert ingest.stderr == (
        f"budgetscope: {a}: warning: 30 spans arrived but no request was derived: no adapter "
        "reads their format (docs/sources.md lists the formats read); 30 spans no adapter "
        "claimed: 'handle_request <id>' of lmserve (30)\n"
    )
    for budgets in (b, None):
        r, rep = _report(runner, a, budgets)
        assert (r.exit_code, rep["status"], rep["kept"]) == (3, "UNKNOWN", False)
        assert rep["unclaimed_spans"] == {
            "total": 30,
            "groups": 1,
            "top": [{"name": "handle_request <id>", "service_name": "lmserve", "spans": 30}],
        }
        assert len(r.stderr.splitlines()) == 1 and "30 spans arrived but no request was derived" in r.stderr
    text, _ = _report(runner, a, b, "table")
    assert text.exit_code == 3
    assert text.stdout.splitlines()[-3:] == [
        "UNKNOWN: tier interactive: no request matched this tier",
        "coverage: 0 requests; 0 with server spans, 0 with client spans, 0 with both",
        "30 spans no adapter claimed: 'handle_request <id>' of lmserve (30)",
    ]


def test_claimed_spans_without_their_root_are_not_called_an_unread_format(runner, tmp_path):
    # vLLM journey tracing's engine-core spans whose `llm_request` roots have not arrived: the vLLM adapter reads
    # them, so "no adapter reads their format" would be false; one span nothing reads is named beside them
    cores = [span(trace_id(), span_id(), "llm_core", T0, T0 + 40 * MS, parent=span_id()) for _ in range(4)]
    docs = [export(cores, service="vllm"), *_unknown_roots(1)]
    a, _, ingest = _archive(runner, tmp_path, docs)
    assert ingest.stderr == (
        f"budgetscope: {a}: warning: 5 spans arrived but no request was derived: 4 of them an adapter reads, "
        "but no request's root span arrived with them (partial traces: the rest may come later); 1 spans no "
        "adapter claimed: 'handle_request <id>' of lmserve (1)\n"
    )
    r, rep = _report(runner, a)
    assert (r.exit_code, rep["status"]) == (3, "UNKNOWN")
    assert "4 of them an adapter reads" in r.stderr and "no adapter reads their format" not in r.stderr


def test_unclaimed_spans_by_name_and_service(tmp_path, archive_path, ingest_text):
    _, known = native_request(client=(1, 1))
    tid = known[0]["traceId"]
    context = span(tid, span_id(), "POST /v1/completions", T0, T0 + MS, kind=2)  # inside a request's trace
    step = span(trace_id(), span_id(), "engine.step", T0, T0 + MS)  # claimed by engine_steps
    docs = [
        export([*known, context, step]),
        *_unknown_roots(3),
        export([span(trace_id(), span_id(), "GET /health/7", T0, T0 + MS, kind=2)], service="gateway"),
        export([span(trace_id(), span_id(), "GET /health/8", T0, T0 + MS, kind=2)], service="gateway"),
    ]
    ingest_text(archive_path, jsonl(*docs))
    with Archive(archive_path, read_only=True, create=False) as a:
        u = unclaimed_spans(a.con, exact=True)
        assert u["total"] == 5 and u["groups"] == 2
        assert u["top"] == [
            {"name": "handle_request <id>", "service_name": "lmserve", "spans": 3},
            {"name": "GET /health/<id>", "service_name": "gateway", "spans": 2},
        ]
        assert u["by_name"] == {
            "handle_request 00000000": 1,
            "handle_request 00000001": 1,
            "handle_request 00000002": 1,
            "GET /health/7": 1,
            "GET /health/8": 1,
        }
        assert unclaimed_spans(a.con, top=1)["top"] == u["top"][:1]
        assert unclaimed_spans(a.con, since_ns=T0 + MS)["total"] == 2  # two SGLang roots start after T0


def test_id_free_keeps_words_and_drops_ids():
    assert [
        id_free(n)
        for n in (" Req 1f3a9c2e", "prefill Req 00ab12cd", "decode_loop", "stage_2", "GET /v1/chat", "facade", None)
    ] == [" Req <id>", "prefill Req <id>", "decode_loop", "stage_2", "GET /v1/chat", "facade", None]


def test_report_prints_its_coverage(runner, tmp_path):
    docs = _requests(["ok"] * 4) + _requests(["ok"] * 2, client=False)
    a, b, _ = _archive(runner, tmp_path, docs)
    r, rep = _report(runner, a, b)
    assert rep["coverage"] == {"requests": 6, "with_server_spans": 6, "with_client_spans": 4, "with_both": 4}
    assert rep["unclaimed_spans"] == {"total": 0, "groups": 0, "top": []} and rep["warnings"] == []
    text, _ = _report(runner, a, b, "table")
    assert text.stdout.splitlines()[-1] == "coverage: 6 requests; 6 with server spans, 4 with client spans, 4 with both"
    md, _ = _report(runner, a, b, "markdown")
    assert md.stdout.splitlines()[-1] == "- coverage: 6 requests; 6 with server spans, 4 with client spans, 4 with both"
    assert rows(a, "SELECT count(*) FROM requests") == [(6,)]


@pytest.mark.parametrize(
    "value, shown", [("5", "5"), ("-0.1", "-0.1"), ('"1%"', "'1%'"), ("true", "True"), ("nan", "nan")]
)
def test_a_bad_max_error_rate_names_the_file_and_the_key(runner, tmp_path, value, shown):
    a, b, _ = _archive(runner, tmp_path, _requests(["ok"] * 3))
    b.write_text(BUDGETS + f"max_error_rate = {value}\n")
    before = sorted(p.name for p in a.rglob("*"))
    r = runner.invoke(main, ["report", "-a", str(a), "-b", str(b)])
    assert (r.exit_code, r.stdout, r.stderr) == (
        2,
        "",
        (
            f"budgetscope: {b}: tiers.interactive.max_error_rate: must be a fraction from 0 to 1 (0.01 = 1 % of "
            f"requests), got {shown}\n"
        ),
    )
    assert sorted(p.name for p in a.rglob("*")) == before and rows(a, "SELECT count(*) FROM requests") == [(3,)]


def _post(port: int, docs: list[dict], token: str | None = None) -> None:
    import httpx

    for doc in docs:
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/traces",
            content=json.dumps(doc),
            timeout=30,
            headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})},
        )
        assert r.status_code == 200, r.content


def test_collect_status_endpoint_names_unclaimed_spans_and_warns(tmp_path):
    import httpx

    from budgetscope.collector import Collector

    with Collector(tmp_path / "live", grpc_port=None, http_port=0, auth_token="s3cret") as c:
        url = f"http://127.0.0.1:{c.http_port}/status"
        assert httpx.get(url, timeout=30).status_code == 401  # the same bearer token as the exports
        _post(c.http_port, _unknown_roots(4), "s3cret")
        deadline = time.monotonic() + 60
        while True:  # acknowledged from the spool: landed and derived within about a second, re-read every 5 s
            doc = httpx.get(url, headers={"Authorization": "Bearer s3cret"}, timeout=30).json()
            landed = doc["stats"]["spans"] == 4 and (doc["unclaimed_spans"] or {}).get("total") == 4
            if landed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert doc["state"] == "running" and doc["stats"]["spans"] == 4 and doc["stats"]["requests_derived"] == 0
        assert doc["unclaimed_spans"] == {
            "total": 4,
            "groups": 1,
            "top": [{"name": "handle_request <id>", "service_name": "lmserve", "spans": 4}],
        }
        assert doc["warnings"] == [
            "warning: 4 spans arrived but no request was derived: no adapter reads their "
            "format (docs/sources.md lists the formats read); 4 spans no adapter claimed: "
            "'handle_request <id>' of lmserve (4)"
        ]


def test_collect_says_at_exit_which_spans_no_adapter_claimed(tmp_path):
    import re
    import signal
    import subprocess
    import sys

    run = "import sys; from budgetscope.commands.collect import collect; collect(sys.argv[1:])"
    proc = subprocess.Popen(
        [sys.executable, "-c", run, "--archive", str(tmp_path / "live"), "--grpc-port", "0", "--http-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", proc.stdout.readline()).group(1))
        _post(port, _unknown_roots(3) + _requests(["ok"]))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert (
        out.splitlines()[-1] == "budgetscope collect: 3 spans no adapter claimed: 'handle_request <id>' of lmserve (3)"
    )
    assert "no request was derived" not in err  # one request was


@pytest.mark.parametrize(
    "outcomes, status, css, words",
    [
        (["error"] * 12, "BROKEN", "headline broke", "a budget broke"),
        (["ok"] * 12, "KEPT", "headline kept", "every tier kept its budgets"),
    ],
)
def test_the_postmortem_colours_each_tier_by_its_status(runner, tmp_path, outcomes, status, css, words):
    pytest.importorskip("plotly")
    from budgetscope.analysis.budgets import parse_budgets
    from budgetscope.analysis.postmortem import build_postmortem, render_html

    a, _, _ = _archive(runner, tmp_path, _requests(outcomes))
    with Archive(a, read_only=True, create=False) as r:
        pm = build_postmortem(r.con, parse_budgets(BUDGETS), T0 - MS, T0 + 60_000 * MS)
    page = render_html(pm)
    assert pm["report"]["status"] == status and f"class='{css}'" in page and words in page


def test_the_postmortem_says_what_the_report_could_not_read(runner, tmp_path, monkeypatch):
    """Requests without a client span, spans nothing claimed, and an archive just written: the postmortem file says
    each as the report does, of its window (the warning on stderr too); before, it said none of them."""
    pytest.importorskip("plotly")
    docs = _requests(["ok"] * 4) + _requests(["ok"] * 2, client=False) + _unknown_roots(3)
    a, b, _ = _archive(runner, tmp_path, docs)
    out = tmp_path / "incident.html"
    window = ["--from", str(T0 - MS), "--to", str(T0 + 60_000 * MS)]
    r = runner.invoke(main, ["postmortem", "-a", str(a), "-b", str(b), *window, "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = html.unescape(out.read_text())
    text, _ = _report(runner, a, b, "table")
    *_, cov, unclaimed = text.stdout.splitlines()
    assert unclaimed == "3 spans no adapter claimed: 'handle_request <id>' of lmserve (3)"
    assert f"<div class='note'>{unclaimed}</div>" in page and f"<p class='meta'>{cov}</p>" in page
    assert "<div class='note'>2 of 6 requests have no client span: " in page
    assert r.stderr == "" and "being written" not in page  # the requests of 2026-01-01 ended long before
    import budgetscope.analysis.coverage as coverage

    monkeypatch.setattr(coverage, "SETTLE_S", 10**9)  # they count as just ended: the two without a client span
    r = runner.invoke(main, ["postmortem", "-a", str(a), "-b", str(b), *window, "-o", str(out)])
    page = html.unescape(out.read_text())
    (warning,) = r.stderr.splitlines()
    assert warning.startswith("budgetscope: warning: the archive is being written (last commit ")
    assert "2 requests of the window with one side's spans only ended, or came, within 1e+09 s of it" in warning
    assert f"<div class='note'>{warning.removeprefix('budgetscope: ')}</div>" in page
