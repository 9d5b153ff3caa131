"""Client-only rows: a `llm.client.request` span with no server span (any OpenAI-compatible endpoint)."""

from __future__ import annotations

import json

import pytest

from budgetscope.sources.importers import KIND_CLIENT, KIND_SERVER, document, span
from conftest import rows

T0 = 1_800_000_000_000_000_000
MS = 1_000_000


def client(
    i: int,
    *,
    ttft_ms: float | None = 40,
    e2e_ms: float = 100,
    stream: bool = True,
    processing_ms: str | None = None,
    status: int = 200,
    tier: str = "chat",
) -> dict:
    attrs = {
        "budgetscope.client.scheduled_unix_nano": T0 + i * 10 * MS,
        "http.response.status_code": status,
        "gen_ai.usage.output_tokens": 9,
        "budgetscope.tier": tier,
        "budgetscope.client.stream": stream,
        "budgetscope.client.itl_ms": [5.0] * 8,
    }
    if ttft_ms is not None:
        attrs["budgetscope.client.first_token_unix_nano"] = T0 + i * 10 * MS + int(ttft_ms * MS)
    if processing_ms is not None:
        attrs["http.response.header.openai-processing-ms"] = [processing_ms]
    return span(
        f"{i + 1:032x}",
        f"{i + 1:016x}",
        "llm.client.request",
        KIND_CLIENT,
        T0 + i * 10 * MS,
        T0 + i * 10 * MS + int(e2e_ms * MS),
        attrs,
    )


def ingest(archive, ingest_text, spans, service="budgetscope-loadgen"):
    return ingest_text(archive, document(service, spans).decode() + "\n")


def test_client_span_alone_gives_a_row_with_unknown_server_stages(archive_path, ingest_text):
    ingest(archive_path, ingest_text, [client(0)])
    (r,) = rows(
        archive_path,
        """SELECT source, tier, outcome, has_client_span, server_span_id, client_ttft_ms,
        client_e2e_ms, ttft_ms, e2e_ms, network_ms, ttft_network_ms, frontend_ms, queue_ms, prefill_ms, decode_ms,
        postprocess_ms, unaccounted_ms, ttft_unaccounted_ms, arrival_ns, output_tokens, service_name FROM requests""",
    )
    assert r[:5] == ("client", "chat", "ok", True, None)
    assert r[20] == "budgetscope-loadgen"  # no server name is known: the client's says whose row it is
    assert r[5:7] == (pytest.approx(40), pytest.approx(100))
    assert r[7:16] == (None,) * 9  # server figures, network and every stage: unknown, never guessed
    assert r[16:18] == (pytest.approx(100), pytest.approx(40))  # the whole client figure is unaccounted
    assert r[18:20] == (T0, 9)


def test_non_streaming_openai_processing_ms_is_server_e2e(archive_path, ingest_text):
    ingest(
        archive_path,
        ingest_text,
        [client(0, ttft_ms=None, stream=False, processing_ms="70"), client(1, stream=True, processing_ms="3")],
    )
    got = rows(
        archive_path, "SELECT e2e_ms, network_ms, unaccounted_ms, client_e2e_ms FROM requests ORDER BY arrival_ns"
    )
    assert got[0] == (70, pytest.approx(30), 70, pytest.approx(100))
    # on a stream the header only times the handler's setup: ignored
    assert got[1] == (None, None, pytest.approx(100), pytest.approx(100))


def test_a_server_span_replaces_the_client_only_row(archive_path, ingest_text):
    ingest(archive_path, ingest_text, [client(0)])
    assert rows(archive_path, "SELECT source FROM requests") == [("client",)]
    root = span(
        f"{1:032x}",
        "00000000000000aa",
        "llm.request",
        KIND_SERVER,
        T0 + 5 * MS,
        T0 + 95 * MS,
        {"budgetscope.first_token_unix_nano": T0 + 35 * MS},
        parent_span_id=f"{1:016x}",
    )
    ingest(archive_path, ingest_text, [root], service="engine")
    assert rows(archive_path, "SELECT source, e2e_ms, network_ms FROM requests") == [
        ("native", pytest.approx(90), pytest.approx(10))
    ]


def test_outcomes_from_status_and_error(archive_path, ingest_text):
    spans = [client(0, status=503), client(1, status=500), client(2)]
    spans[2]["attributes"].append({"key": "error.type", "value": {"stringValue": "timeout"}})
    ingest(archive_path, ingest_text, spans)
    assert [o for (o,) in rows(archive_path, "SELECT outcome FROM requests ORDER BY arrival_ns")] == [
        "rejected",
        "error",
        "timeout",
    ]


def test_report_on_client_only_rows_attributes_the_tail_to_unaccounted(archive_path, ingest_text):
    from budgetscope.analysis import build_report
    from budgetscope.opener import Archive

    ingest(archive_path, ingest_text, [client(i, ttft_ms=10 + i, e2e_ms=50 + i) for i in range(40)])
    with Archive(archive_path, read_only=True, create=False) as a:
        rep = build_report(a.con)
    (tier,) = rep["tiers"]
    assert tier["figures"] == "client"
    ttft = tier["attribution"]["ttft"]
    assert ttft["metric"] == "client_ttft_ms" and ttft["dominant"] == "unaccounted"
    assert ttft["shares"]["unaccounted"] == pytest.approx(1.0)
    json.dumps(rep, allow_nan=False, default=str)


def _server(i: int, *, client_span: bool = True) -> dict:
    """The engine's root span of request `i` (`client(i)`'s trace), its child where `client_span`."""
    return span(
        f"{i + 1:032x}",
        f"{0xAA00 + i:016x}",
        "llm.request",
        KIND_SERVER,
        T0 + i * 10 * MS + 5 * MS,
        T0 + i * 10 * MS + 95 * MS,
        {"budgetscope.first_token_unix_nano": T0 + i * 10 * MS + 35 * MS},
        parent_span_id=f"{i + 1:016x}" if client_span else None,
    )


def _half_landed(archive_path, ingest_text) -> None:
    """Ten requests with client spans (0–9), the server's spans of 0–2 and 8 (the rest have not landed), and
    request 10's server span without its client's."""
    ingest(archive_path, ingest_text, [client(i) for i in range(10)])
    ingest(archive_path, ingest_text, [_server(i) for i in (0, 1, 2, 8)] + [_server(10, client_span=False)], "engine")


@pytest.mark.parametrize("age_s, expected", [(2.0, (5, 4, 1)), (10.0, None), (3600.0, None)])
def test_a_report_on_an_archive_being_written_warns_of_one_sided_requests_at_its_edge(
    archive_path, ingest_text, age_s, expected
):
    from budgetscope.analysis import build_report
    from budgetscope.opener import Archive

    _half_landed(archive_path, ingest_text)
    # the last commit 10 s after T0 + 150 ms: requests that ended at or after T0 + 150 ms are at its edge (5–10)
    commit = T0 + 10_150 * MS
    with Archive(archive_path, read_only=True, create=False) as a:
        rep = build_report(a.con, last_commit_ns=commit, now_ns=commit + int(age_s * 1e9))
        whole = build_report(a.con)  # without the commit's time: nothing said
    assert rep["coverage"] == {"requests": 11, "with_server_spans": 5, "with_client_spans": 10, "with_both": 4}
    if expected is None:  # an archive last written 10 s ago or more: every request's spans have had time to land
        assert rep["in_flight"] is None and rep["warnings"] == []
    else:
        f = rep["in_flight"]
        assert (f["requests"], f["client_only"], f["without_client_span"]) == expected  # 5, 6, 7, 9 and 10
        assert f["last_commit_age_s"] == age_s
        (w,) = rep["warnings"]
        assert w.startswith("warning: the archive is being written (last commit 2 s ago): 5 requests of the window")
        assert "(4 client-only, 1 without a client span)" in w and "run the report again in 10 s" in w
    assert whole["in_flight"] is None and whole["warnings"] == []
    # the figures are the archive's either way: the warning changes nothing else
    assert {k: v for k, v in rep.items() if k not in ("in_flight", "warnings")} == {
        k: v for k, v in whole.items() if k not in ("in_flight", "warnings")
    }


def test_client_only_rows_without_any_server_are_not_in_flight(archive_path, ingest_text):
    """An endpoint with no server spans at all (OpenAI's API): its client-only rows are all there will be."""
    from budgetscope.analysis import build_report
    from budgetscope.opener import Archive

    ingest(archive_path, ingest_text, [client(i) for i in range(10)])
    with Archive(archive_path, read_only=True, create=False) as a:
        rep = build_report(a.con, last_commit_ns=T0 + 10 * 10**9, now_ns=T0 + 11 * 10**9)
    assert rep["in_flight"] is None and rep["warnings"] == []


def test_report_command_on_a_fresh_archive_warns_on_stderr(archive_path, ingest_text):
    """The command passes the manifest's commit time: the archive was just written and its requests end after
    it (T0 is in 2027), so all six one-sided ones are at its edge."""
    from click.testing import CliRunner

    from budgetscope.cli import main

    _half_landed(archive_path, ingest_text)
    out = CliRunner().invoke(main, ["report", "--archive", str(archive_path), "--format", "json"])
    assert out.exit_code in (0, 1, 3), out.output
    rep = json.loads(out.stdout)
    assert (rep["in_flight"]["client_only"], rep["in_flight"]["without_client_span"]) == (6, 1)
    assert "budgetscope: warning: the archive is being written (last commit " in out.stderr
    # the markdown report, a document (a CI comment, a ticket), carries it too; the table leaves it to stderr
    md = CliRunner().invoke(main, ["report", "--archive", str(archive_path), "--format", "markdown"])
    table = CliRunner().invoke(main, ["report", "--archive", str(archive_path)])
    assert "\n- warning: the archive is being written (last commit " in md.stdout and "being written" in md.stderr
    assert "being written" not in table.stdout and "being written" in table.stderr


def test_the_in_flight_warning_counts_one_request_as_one():
    from budgetscope.analysis.coverage import in_flight_warning

    f = {"requests": 1, "client_only": 1, "without_client_span": 0, "last_commit_age_s": 0.9, "settle_s": 10.0}
    assert in_flight_warning(f).startswith(
        "warning: the archive is being written (last commit 0.9 s ago): 1 request of the window with one side's spans "
        "only ended, or came, within 10 s of it (1 client-only); "
    )
    assert in_flight_warning(None) is None
