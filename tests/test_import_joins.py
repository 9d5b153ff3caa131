"""Imported client records (AIPerf, GuideLLM) join the server spans of the same request by request id.

The tools send no trace context, so the server's spans sit in traces of their own; each tool records an id the
server also records (AIPerf's `x_request_id`, sent as `X-Request-ID`; GuideLLM's `response_id`, the response's
`id`). One row a request, with network derived; a record whose server row is absent stays a client-only row.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from budgetscope.archive import manifest as mf
from budgetscope.cli import main
from budgetscope.stats import quantile_guidellm, quantile_linear
from conftest import rows
from otlp_wire import MS, T0, export, jsonl, native_request
from test_sources_aiperf import _record
from test_sources_guidellm import _benchmark, _request

SERVER_E2E_MS = 465.0  # native_request's stages: 2 + 10 + 50 + 400 + 3


def _server(ingest_text, archive, ids_and_arrivals):
    spans = []
    for rid, arrival in ids_and_arrivals:
        spans += native_request(arrival=arrival, extra_root={"gen_ai.response.id": rid})[1]
    ingest_text(archive, jsonl(export(spans)))


def _aiperf_record(i, arrival_ns, up_ms=2.0, down_ms=3.0):
    rec = _record(i)
    sent = arrival_ns - int(up_ms * MS)
    rec["metadata"].update(request_start_ns=sent, request_end_ns=arrival_ns + int((SERVER_E2E_MS + down_ms) * MS))
    rec["metrics"]["request_latency"]["value"] = SERVER_E2E_MS + up_ms + down_ms
    return rec


@pytest.mark.parametrize("kind", ["folder", "duckdb"])
def test_aiperf_records_join_their_server_rows_by_x_request_id(tmp_path, ingest_text, kind):
    archive = tmp_path / ("a" if kind == "folder" else "a.duckdb")
    arrivals = [T0 + i * 1_000 * MS for i in range(3)]
    _server(ingest_text, archive, [(f"req-{i}", t) for i, t in enumerate(arrivals)])
    f = tmp_path / "profile_export.jsonl"
    recs = [_aiperf_record(i, t) for i, t in enumerate(arrivals)] + [_aiperf_record(7, T0 + 9_000 * MS)]
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = CliRunner().invoke(main, ["import", "--from", "aiperf", str(f), "-a", str(archive)])
    assert r.exit_code == 0, r.output
    assert "3 records joined to their server spans by request id" in r.stdout
    got = rows(
        archive,
        """SELECT request_id, source, has_client_span, network_ms, client_e2e_ms FROM requests
        ORDER BY arrival_ns""",
    )
    # one row a request: three joined (network = 2 ms up + 3 ms down), the unmatched id a client-only row
    assert got == [(f"req-{i}", "native", True, pytest.approx(5.0), pytest.approx(470.0)) for i in range(3)] + [
        (got[3][0], "client", True, None, pytest.approx(470.0))
    ]
    # the same file again lands nothing new
    again = CliRunner().invoke(main, ["import", "--from", "aiperf", str(f), "-a", str(archive), "--format", "json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["files"][0]["spans_inserted"] == 0
    assert rows(archive, "SELECT count(*) FROM requests") == [(4,)]


def test_guidellm_requests_join_their_server_rows_by_response_id(tmp_path, archive_path, ingest_text):
    # GuideLLM's times are wall-clock seconds; the server rows arrive 2 ms after its request_start
    t = [1_800_000_000.0 + i for i in range(2)]
    _server(
        ingest_text, archive_path, [(f"cmpl-{i}", int(round((ti + 0.002) * 1e9)) + 2 * MS) for i, ti in enumerate(t)]
    )
    report = {
        "metadata": {"version": 2, "guidellm_version": "0.8.1"},
        "config": {},
        "benchmarks": [_benchmark(0, "constant", [_request(i, ti, end=0.471) for i, ti in enumerate(t)])],
    }
    f = tmp_path / "benchmarks.json"
    f.write_text(json.dumps(report))
    r = CliRunner().invoke(main, ["import", "--from", "guidellm", str(f), "-a", str(archive_path)])
    assert r.exit_code == 0, r.output
    got = rows(archive_path, "SELECT request_id, source, network_ms FROM requests ORDER BY arrival_ns")
    # request_start = t + 2 ms, server arrival 2 ms later, server end at +469 ms, client end at +471 ms
    assert got == [
        ("cmpl-0", "native", pytest.approx(4.0, abs=1e-3)),
        ("cmpl-1", "native", pytest.approx(4.0, abs=1e-3)),
    ]


def test_an_id_held_by_two_server_rows_is_not_joined(tmp_path, archive_path, ingest_text):
    _server(ingest_text, archive_path, [("dup", T0), ("dup", T0 + 1_000 * MS)])
    f = tmp_path / "profile_export.jsonl"
    rec = _aiperf_record(0, T0)
    rec["metadata"]["x_request_id"] = "dup"
    f.write_text(json.dumps(rec) + "\n")
    r = CliRunner().invoke(main, ["import", "--from", "aiperf", str(f), "-a", str(archive_path)])
    assert r.exit_code == 0 and "0 records joined" in r.stdout
    assert r.stderr == (
        f"budgetscope: warning: {f}: 1 of 1 records not joined: 1 whose x_request_id more than one server row "
        "or record has (dup): not joined\n"
    )
    assert rows(archive_path, "SELECT source, count(*) FROM requests GROUP BY 1 ORDER BY 1") == [
        ("client", 1),
        ("native", 2),
    ]


def test_a_budget_matches_one_tools_rows_by_source_and_service_name(tmp_path, archive_path, ingest_text):
    _server(ingest_text, archive_path, [("req-0", T0)])
    f = tmp_path / "profile_export.jsonl"
    f.write_text("".join(json.dumps(_aiperf_record(i, T0 + i * 1_000 * MS)) + "\n" for i in range(3)))
    assert CliRunner().invoke(main, ["import", "--from", "aiperf", str(f), "-a", str(archive_path)]).exit_code == 0
    assert rows(archive_path, "SELECT source, service_name, count(*) FROM requests GROUP BY ALL ORDER BY 1") == [
        ("client", "aiperf", 2),
        ("native", "engine", 1),
    ]
    budgets = tmp_path / "b.toml"
    budgets.write_text(
        '[tiers.aiperf]\nmatch = { tier = "default", source = "client", service_name = "aiperf" }\nttft_ms = 1000\n'
    )
    r = CliRunner().invoke(main, ["report", "-a", str(archive_path), "-b", str(budgets), "--format", "json"])
    assert r.exit_code == 0, r.output
    (tier,) = json.loads(r.stdout)["tiers"]
    assert tier["requests"] == 2


# -- the real tools' files ---------------------------------------------------------------------------------------
FIXTURES = Path(__file__).parent / "fixtures" / "tools"


def _unpacked(tmp_path) -> dict[str, Path]:
    """The recorded run (tests/fixtures/tools/README.md) as the tools and the engine wrote it."""
    out = {
        "spans": tmp_path / "spans.jsonl",
        "aiperf": tmp_path / "aiperf" / "profile_export.jsonl",
        "guidellm": tmp_path / "benchmarks.json",
    }
    out["aiperf"].parent.mkdir()
    for key, name in (
        ("spans", "engine-spans.jsonl.gz"),
        ("aiperf", "aiperf-profile_export.jsonl.gz"),
        ("guidellm", "guidellm-benchmarks.json.gz"),
    ):
        out[key].write_bytes(gzip.decompress((FIXTURES / name).read_bytes()))
    shutil.copy(FIXTURES / "aiperf-profile_export_aiperf.json", out["aiperf"].parent / "profile_export_aiperf.json")
    return out


def test_real_aiperf_and_guidellm_runs_give_one_row_a_request_and_their_own_ttft(tmp_path, archive_path):
    files = _unpacked(tmp_path)
    cli = CliRunner()
    assert cli.invoke(main, ["ingest", str(files["spans"]), "-a", str(archive_path)]).exit_code == 0
    served = rows(archive_path, "SELECT count(*) FROM requests")[0][0]
    for kind in ("aiperf", "guidellm"):
        r = cli.invoke(main, ["import", "--from", kind, str(files[kind]), "-a", str(archive_path)])
        assert r.exit_code == 0 and "40 records joined" in r.stdout, r.output
    # the report says which TTFT it uses: both tools' (their first non-empty chunk)
    tier = json.loads(cli.invoke(main, ["report", "-a", str(archive_path), "--format", "json"]).stdout)["tiers"][0]
    assert (tier["requests"], tier["figures"], tier["client_ttft_definitions"]) == (
        80,
        "client",
        {"first non-empty chunk": 80},
    )
    assert (
        "client-side figures; client TTFT to the first non-empty chunk"
        in cli.invoke(main, ["report", "-a", str(archive_path)]).stdout
    )
    assert rows(archive_path, "SELECT count(*), count(network_ms), min(network_ms) > 0 FROM requests") == [
        (served, 80, True)
    ]  # 80 requests sent by the tools: one row each, network derived
    by_tool = {}
    for tool, ttft, model, out, cached, net in rows(
        archive_path,
        """SELECT c.service_name, r.client_ttft_ms,
            r.model, r.output_tokens, r.cached_tokens, r.ttft_network_ms
            FROM requests r JOIN spans c ON c.trace_id = r.client_trace_id AND c.span_id = r.client_span_id""",
    ):
        by_tool.setdefault(tool, []).append((ttft, model, out, cached, net))
    aiperf = json.loads((FIXTURES / "aiperf-profile_export_aiperf.json").read_text())["time_to_first_token"]
    ttfts = sorted(t[0] for t in by_tool["aiperf"])
    # AIPerf's percentiles interpolate (its own arithmetic is quantile_linear's): every one it printed, to the us
    printed = {k: v for k, v in aiperf.items() if k[0] == "p" and k[1:].isdigit()}
    assert {k: quantile_linear(ttfts, int(k[1:]) / 100) for k in printed} == pytest.approx(printed, abs=1e-3)
    report = json.loads(files["guidellm"].read_text())
    gl = report["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["percentiles"]
    ttfts = sorted(t[0] for t in by_tool["guidellm"])
    # GuideLLM's are its running sum's value, never interpolated: every one it printed, to the us
    assert {k: quantile_guidellm(ttfts, int(k[1:]) / 10 ** (len(k) - 1)) for k in gl} == pytest.approx(gl, abs=1e-3)
    assert quantile_linear(ttfts, 0.99) != pytest.approx(gl["p99"], abs=1e-3)
    # the server's counts, not AIPerf's tokenizer (which counted 39-76 for 64 tokens)
    assert {t[1:4] for t in by_tool["aiperf"]} == {("tiny", 64, 0)}
    # AIPerf's records lack the first event: its TTFT network share is unknown; GuideLLM's has it
    assert {t[4] for t in by_tool["aiperf"]} == {None} and all(t[4] > 0 for t in by_tool["guidellm"])


def test_the_report_says_load_ttft_is_the_first_token_event_and_a_mix_is_mixed(tmp_path, archive_path, ingest_text):
    budgets = tmp_path / "b.toml"
    budgets.write_text("[tiers.interactive]\nttft_ms = 10000\n")

    def report(fmt):
        return CliRunner().invoke(main, ["report", "-a", str(archive_path), "-b", str(budgets), "--format", fmt]).stdout

    spans = []
    for i in range(2):  # requests as `load` sends them: a client span, the server root its child
        spans += native_request(
            arrival=T0 + i * 1_000 * MS, client=(1.0, 1.0), extra_root={"gen_ai.response.id": f"load-{i}"}
        )[1]
    ingest_text(archive_path, jsonl(export(spans)))
    assert json.loads(report("json"))["tiers"][0]["client_ttft_definitions"] == {"first token event": 2}
    _server(ingest_text, archive_path, [("req-0", T0 + 5_000 * MS)])
    f = tmp_path / "profile_export.jsonl"
    f.write_text(json.dumps(_aiperf_record(0, T0 + 5_000 * MS)) + "\n")
    assert CliRunner().invoke(main, ["import", "--from", "aiperf", str(f), "-a", str(archive_path)]).exit_code == 0
    assert json.loads(report("json"))["tiers"][0]["client_ttft_definitions"] == {
        "first non-empty chunk": 1,
        "first token event": 2,
    }
    assert "client TTFT mixed: 1 to the first non-empty chunk, 2 to the first token event" in report("table")
    # rows written before `client_first_token_definition` (here the first segment: the two `load` requests) read
    # their client span's attribute instead, beside newer rows that carry it: the same report
    assert rows(archive_path, "SELECT count(client_first_token_definition) FROM requests") == [(3,)]
    first = archive_path / mf.read(archive_path).files("requests")[0].path
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT * EXCLUDE (client_first_token_definition) FROM read_parquet('{first}')) "
        f"TO '{first}.old' (FORMAT parquet)"
    )
    first.with_name(first.name + ".old").replace(first)
    assert rows(archive_path, "SELECT count(*), count(client_first_token_definition) FROM requests") == [(3, 1)]
    assert json.loads(report("json"))["tiers"][0]["client_ttft_definitions"] == {
        "first non-empty chunk": 1,
        "first token event": 2,
    }


# -- AIPerf's raw export: the first-event time ----------------------------------------------------------------
def _raw_run(tmp_path) -> dict[str, Path]:
    """The second recorded run (tests/fixtures/tools/README.md): AIPerf with `--export-level raw`."""
    out = {
        "spans": tmp_path / "spans.jsonl",
        "aiperf": tmp_path / "aiperf" / "profile_export.jsonl",
        "raw": tmp_path / "aiperf" / "profile_export_raw.jsonl",
    }
    out["aiperf"].parent.mkdir()
    for key in out:
        name = "aiperf-raw-" + ("engine-spans.jsonl" if key == "spans" else out[key].name) + ".gz"
        out[key].write_bytes(gzip.decompress((FIXTURES / name).read_bytes()))
    return out


def test_aiperf_raw_export_beside_the_records_gives_the_ttft_network_share(tmp_path, archive_path):
    files = _raw_run(tmp_path)
    cli = CliRunner()
    assert cli.invoke(main, ["ingest", str(files["spans"]), "-a", str(archive_path)]).exit_code == 0
    r = cli.invoke(main, ["import", "--from", "aiperf", str(files["aiperf"]), "-a", str(archive_path)])
    assert r.exit_code == 0 and "40 records joined" in r.stdout, r.output
    got = {
        rid: (ttft, net)
        for rid, ttft, net in rows(archive_path, "SELECT request_id, ttft_ms, ttft_network_ms FROM requests")
    }
    assert len(got) == 40 and all(net is not None and net > 0 for _, net in got.values())
    # by hand from the raw file: first response perf_ns − start_perf_ns, minus the server's TTFT
    # 6959816039788 − 6959749108027 ns = 66.931761 ms; 6959864451233 − 6959757488941 ns = 106.962292 ms
    for rid, first_event_ms in (
        ("18e7beca-6422-48c5-ad85-83b8a56d8980", 66.931761),
        ("45ab22a0-2f3e-4a4d-9ed8-eecc0a20ff42", 106.962292),
    ):
        ttft, net = got[rid]
        assert net == pytest.approx(first_event_ms - ttft, abs=1e-6)
    # the first event comes before AIPerf's first non-empty chunk or is it, never after (to within the rounding
    # of AIPerf's TTFT in float ms)
    assert rows(
        archive_path,
        """SELECT count(*) FROM requests
        WHERE client_ttft_ms >= ttft_ms + ttft_network_ms - 1e-5""",
    ) == [(40,)]


def test_aiperf_without_its_raw_export_has_no_ttft_network_share(tmp_path, archive_path):
    files = _raw_run(tmp_path)
    files["raw"].unlink()
    cli = CliRunner()
    assert cli.invoke(main, ["ingest", str(files["spans"]), "-a", str(archive_path)]).exit_code == 0
    assert (
        cli.invoke(main, ["import", "--from", "aiperf", str(files["aiperf"]), "-a", str(archive_path)]).exit_code == 0
    )
    assert rows(archive_path, "SELECT count(*), count(ttft_network_ms), count(network_ms) FROM requests") == [
        (40, 0, 40)
    ]


def test_an_aiperf_raw_export_of_another_run_is_one_line_and_lands_nothing(tmp_path, archive_path, ingest_text):
    _server(ingest_text, archive_path, [("req-0", T0)])
    files = _raw_run(tmp_path)
    files["aiperf"].write_text(json.dumps(_aiperf_record(0, T0)) + "\n")  # records whose ids the raw file lacks
    before = rows(archive_path, "SELECT count(*) FROM spans")
    r = CliRunner().invoke(main, ["import", "--from", "aiperf", str(files["aiperf"]), "-a", str(archive_path)])
    assert r.exit_code == 2 and r.stderr == (
        f"budgetscope: {files['aiperf']}: none of the 40 records of profile_export_raw.jsonl beside it matches one "
        "of its requests by x_request_id (another run's raw export?) (nothing from it landed)\n"
    )
    assert rows(archive_path, "SELECT count(*) FROM spans") == before


def test_a_bad_aiperf_raw_export_is_one_line_and_lands_nothing(tmp_path, archive_path):
    files = _raw_run(tmp_path)
    files["raw"].write_bytes(files["raw"].read_bytes() + b"{truncated\n")
    r = CliRunner().invoke(main, ["import", "--from", "aiperf", str(files["aiperf"]), "-a", str(archive_path)])
    assert r.exit_code == 2 and r.stderr.startswith(
        f"budgetscope: {files['aiperf']}: profile_export_raw.jsonl beside it, line 41: not JSON ("
    )
    assert len(r.stderr.splitlines()) == 1 and not archive_path.exists()
    # given as the FILE itself, it is named for what it is
    r = CliRunner().invoke(main, ["import", "--from", "aiperf", str(files["raw"]), "-a", str(archive_path)])
    assert r.exit_code == 2 and r.stderr == (
        f"budgetscope: {files['raw']}: this is an AIPerf raw export (profile_export_raw.jsonl), not an AIPerf "
        "profile_export.jsonl: read it with `budgetscope import --from aiperf` of the profile_export.jsonl beside it "
        "(nothing from it landed)\n"
    )
    assert not archive_path.exists()


# -- whichever comes first, and any number of times ---------------------------------------------------------------
def _engine_spans_in_two(files) -> tuple[Path, Path]:
    """The recorded engine spans as two files, split between export batches (lines), as a collector receives them."""
    lines = files["spans"].read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    out = files["spans"].with_name("spans-1.jsonl"), files["spans"].with_name("spans-2.jsonl")
    out[0].write_bytes(b"".join(lines[:half]))
    out[1].write_bytes(b"".join(lines[half:]))
    return out


def _one_row_a_request(archive) -> None:
    """80 requests of the recorded run, one row each: the 40 of each tool joined, network derived, none twice."""
    assert rows(
        archive,
        """SELECT count(*), count(DISTINCT request_id), count(client_span_id), count(DISTINCT client_span_id),
        count(network_ms), count(*) FILTER (WHERE source = 'client') FROM requests""",
    ) == [(80, 80, 80, 80, 80, 0)]
    assert rows(
        archive,
        """SELECT c.service_name, count(*) FROM requests r
        JOIN spans c ON c.trace_id = r.client_trace_id AND c.span_id = r.client_span_id GROUP BY 1 ORDER BY 1""",
    ) == [("aiperf", 40), ("guidellm", 40)]


def _import(kind, f, archive, *more):
    r = CliRunner().invoke(main, ["import", "--from", kind, str(f), "-a", str(archive), *more])
    assert r.exit_code == 0, r.output
    return r


@pytest.mark.parametrize("kind", ["folder", "duckdb"])
def test_imports_before_the_server_spans_join_when_the_spans_land(tmp_path, kind):
    archive = tmp_path / ("a" if kind == "folder" else "a.duckdb")
    files = _unpacked(tmp_path)
    for tool in ("aiperf", "guidellm"):
        r = _import(tool, files[tool], archive)
        assert "; 0 records joined" in r.stdout and "40 of 40 records not joined: 40 found no server row" in r.stderr
    assert rows(archive, "SELECT source, count(*) FROM requests GROUP BY 1") == [("client", 80)]
    r = CliRunner().invoke(main, ["ingest", str(files["spans"]), "-a", str(archive), "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["counts"]["requests"] == 80, r.output
    _one_row_a_request(archive)
    # the same files again: nothing new, and each record still counted once
    for tool in ("aiperf", "guidellm"):
        again = json.loads(_import(tool, files[tool], archive, "--format", "json").stdout)["files"][0]
        assert (again["spans_inserted"], again["already_imported"], again["joined_to_server_rows"]) == (0, True, 40)
    _one_row_a_request(archive)


def test_imports_between_two_parts_of_the_server_spans_join_both(tmp_path, archive_path):
    files = _unpacked(tmp_path)
    first, second = _engine_spans_in_two(files)
    cli = CliRunner()
    assert cli.invoke(main, ["ingest", str(first), "-a", str(archive_path)]).exit_code == 0
    joined = {
        tool: json.loads(_import(tool, files[tool], archive_path, "--format", "json").stdout)["files"][0]
        for tool in ("aiperf", "guidellm")
    }
    some = {tool: e["joined_to_server_rows"] for tool, e in joined.items()}
    assert 0 < some["aiperf"] + some["guidellm"] < 80  # part of the server rows were there
    assert all(len(e["no_server_row"]) == 40 - e["joined_to_server_rows"] for e in joined.values())
    assert cli.invoke(main, ["ingest", str(second), "-a", str(archive_path)]).exit_code == 0
    _one_row_a_request(archive_path)
    for tool in ("aiperf", "guidellm"):  # once more, around nothing
        assert (
            json.loads(_import(tool, files[tool], archive_path, "--format", "json").stdout)["files"][0][
                "joined_to_server_rows"
            ]
            == 40
        )
    _one_row_a_request(archive_path)


def test_the_archives_rows_are_those_of_one_derivation_of_all_its_spans(tmp_path, archive_path):
    # an import before the spans, the other after: the rows each commit derived equal `budgetscope derive`'s
    files = _unpacked(tmp_path)
    _import("aiperf", files["aiperf"], archive_path)
    assert CliRunner().invoke(main, ["ingest", str(files["spans"]), "-a", str(archive_path)]).exit_code == 0
    _import("guidellm", files["guidellm"], archive_path)
    out = tmp_path / "rederived"
    r = CliRunner().invoke(main, ["derive", "-a", str(archive_path), "-o", str(out)])
    assert r.exit_code == 0, r.output
    cols = "request_id, client_trace_id, client_span_id, client_request_id, round(network_ms, 6)"
    again = (
        duckdb.connect()
        .execute(f"SELECT {cols} FROM read_parquet('{out}/**/*.parquet') ORDER BY request_id")
        .fetchall()
    )
    assert rows(archive_path, f"SELECT {cols} FROM requests ORDER BY request_id") == again
    assert len(again) == 80


def test_an_older_imports_copy_in_the_server_trace_and_a_new_import_are_one_record(tmp_path, archive_path):
    # before 2026-11-28 `import` put each joined record's span into its server row's trace: importing the same file
    # again now lands the record in its own trace too; the two copies (one span id) are one record, joined once
    from budgetscope.archive.spool import RawBatch
    from budgetscope.opener import Archive
    from budgetscope.sources import importers

    files = _unpacked(tmp_path)
    assert CliRunner().invoke(main, ["ingest", str(files["spans"]), "-a", str(archive_path)]).exit_code == 0
    doc = json.loads(importers.aiperf(files["aiperf"], files["aiperf"].read_bytes()))
    traces = dict(rows(archive_path, "SELECT request_id, trace_id FROM requests"))
    for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        rid = next(kv["value"]["stringValue"] for kv in s["attributes"] if kv["key"] == "budgetscope.client.request_id")
        s["traceId"] = traces[rid]
    with Archive(archive_path) as a:
        a.ingest([RawBatch(json.dumps(doc).encode(), "otlp-json", "old import", "aiperf file")])
    assert rows(archive_path, "SELECT count(*), count(client_span_id) FROM requests") == [(80, 40)]
    r = _import("aiperf", files["aiperf"], archive_path, "--format", "json")
    assert json.loads(r.stdout)["files"][0]["joined_to_server_rows"] == 40
    assert rows(
        archive_path,
        "SELECT count(*), count(client_span_id), count(*) FILTER (WHERE client_trace_id = trace_id) FROM requests",
    ) == [(80, 40, 40)]  # the copy in the server's trace is the one joined


def test_aiperfs_request_latency_and_the_e2e_to_done_are_both_on_its_rows(tmp_path, archive_path):
    # AIPerf's request latency ends at the last chunk with content, budgetscope's E2E at the end of the response
    files = _unpacked(tmp_path)
    assert CliRunner().invoke(main, ["ingest", str(files["spans"]), "-a", str(archive_path)]).exit_code == 0
    for tool in ("aiperf", "guidellm"):
        _import(tool, files[tool], archive_path)
    got = rows(
        archive_path,
        """SELECT client_request_id, (client_last_token_ns - client_sent_ns) / 1e6, client_e2e_ms,
        client_last_token_ns <= client_end_ns FROM requests""",
    )
    assert len(got) == 80 and all(before for *_, before in got)
    aiperf_ids = {json.loads(line)["metadata"]["x_request_id"] for line in files["aiperf"].read_text().splitlines()}
    latency = sorted(lat for rid, lat, _, _ in got if rid in aiperf_ids)
    e2e = sorted(e for rid, _, e, _ in got if rid in aiperf_ids)
    printed = json.loads((FIXTURES / "aiperf-profile_export_aiperf.json").read_text())["request_latency"]
    printed = {k: v for k, v in printed.items() if k[0] == "p" and k[1:].isdigit()}
    assert len(latency) == 40
    assert {k: quantile_linear(latency, int(k[1:]) / 100) for k in printed} == pytest.approx(printed, abs=1e-6)
    # the E2E to [DONE] is later: p50 1,157.30 against AIPerf's 1,138.35 ms, p99 2,813.90 against 2,767.42 ms
    assert (quantile_linear(e2e, 0.5), quantile_linear(e2e, 0.99)) == (
        pytest.approx(1157.3037285, abs=1e-6),
        pytest.approx(2813.89966867, abs=1e-6),
    )
    # GuideLLM's last token is its `last_token_iteration`
    report = json.loads(files["guidellm"].read_text())
    last = {
        r["response_id"]: r["info"]["timings"]["last_token_iteration"]
        for r in report["benchmarks"][0]["requests"]["successful"]
    }
    got = rows(
        archive_path,
        "SELECT client_request_id, client_last_token_ns FROM requests WHERE client_request_id IN (SELECT unnest(?))",
        [list(last)],
    )
    assert dict(got) == {rid: round(t * 1e9) for rid, t in last.items()} and len(got) == 40


# -- network: for requests both ends saw complete, and never below zero --------------------------------------------
def test_network_is_for_completed_requests_and_a_server_span_ending_after_the_client_is_flagged(
    tmp_path, archive_path, ingest_text
):
    # four requests on one clock: ok; ok but the server span ends 0.89 ms after the client got [DONE] (it closes
    # after its last byte is written); cancelled by the client (AIPerf's was_cancelled), the server saw it end;
    # the server cancelled it (the engine's outcome) while the client still counted it a success
    arrivals = [T0 + i * 1_000 * MS for i in range(4)]
    spans = []
    for i, t in enumerate(arrivals):
        extra = {"gen_ai.response.id": f"req-{i}", **({"budgetscope.outcome": "cancelled"} if i == 3 else {})}
        spans += native_request(arrival=t, extra_root=extra)[1]
    ingest_text(archive_path, jsonl(export(spans)))
    recs = [
        _aiperf_record(0, arrivals[0]),
        _aiperf_record(1, arrivals[1], up_ms=1.0, down_ms=-1.89),
        _aiperf_record(2, arrivals[2], down_ms=-60.0),
        _aiperf_record(3, arrivals[3]),
    ]
    recs[2]["metadata"]["was_cancelled"] = True
    f = tmp_path / "profile_export.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert "4 records joined" in _import("aiperf", f, archive_path).stdout
    got = rows(
        archive_path,
        """SELECT request_id, outcome, round(network_ms, 3), round(client_e2e_ms, 3), ttft_network_ms, violations
        FROM requests ORDER BY request_id""",
    )
    assert got == [
        ("req-0", "ok", 5.0, 470.0, None, []),  # AIPerf's records alone carry no first event: no TTFT network
        ("req-1", "ok", None, 464.11, None, ["client_end_before_server_end"]),  # -0.89 ms: flagged, not averaged
        ("req-2", "ok", None, 407.0, None, []),  # the client cancelled: its E2E kept, no network
        ("req-3", "cancelled", None, 470.0, None, []),  # the server's outcome: no network either
    ]
    tier = json.loads(CliRunner().invoke(main, ["report", "-a", str(archive_path), "--format", "json"]).stdout)
    assert tier["violations"]["total"] == 1
    assert tier["violations"]["top"] == [{"source": "native", "name": "client_end_before_server_end", "requests": 1}]
    table = CliRunner().invoke(main, ["report", "-a", str(archive_path)]).stdout
    assert "1 request misread" in table and "'client_end_before_server_end' (1)" in table
