"""The load generator end to end against a stub SSE server on 127.0.0.1: records, headers, client spans,
errors, schedule lag under a concurrency cap, and the `load` command."""

import math
import socket

import orjson
import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from budgetscope.commands.load import load
from budgetscope.instrument import ClientTracer
from budgetscope.instrument import client as C
from budgetscope.instrument.traceparent import parse_traceparent
from budgetscope.loadgen import (
    Arrivals,
    Distribution,
    LoadgenError,
    Mix,
    Plan,
    PlannedRequest,
    Target,
    Workload,
    build_plan,
    run_load,
)
from budgetscope.loadgen.stub_server import StubServer
from budgetscope.stats import quantile_linear as quantile


@pytest.fixture
def server():
    srv = StubServer(tokens=5, record=True).start_in_thread()
    yield srv
    srv.stop_thread()


def plan_of(n, rate=200.0, tiers=None, tenants=None, output=5):
    workload = Workload(Distribution.parse("16"), Distribution.parse(str(output)), Mix.parse(tiers), Mix.parse(tenants))
    return build_plan(Arrivals.parse("constant", rate), workload, seed=3, num_requests=n)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_end_to_end_records(server):
    result = run_load(plan_of(40, tiers="interactive=1,batch=1", tenants="acme"), Target(server.url, model="stub"))
    assert len(result.records) == 40
    for rec in result.records:
        assert rec.is_ok and rec.is_done and rec.outcome == "ok"
        assert rec.output_tokens == 5 and len(rec.token_ns) == 5 and rec.input_tokens == 1
        assert rec.scheduled_ns <= rec.sent_ns <= rec.first_token_ns <= rec.token_ns[-1] <= rec.end_ns
        assert rec.ttft_ms >= 0 and rec.ttft_scheduled_ms >= rec.ttft_ms and len(rec.itl_ms) == 4
    summary = result.summary()
    assert summary["outcomes"] == {"ok": 40} and summary["status_codes"] == {"200": 40}
    assert summary["planned_rate_rps"] == 200
    assert summary["figures"]["itl_ms"]["count"] == 160
    assert summary["figures"]["client_ttft_ms"]["anchor"] == "sent"
    assert summary["figures"]["client_ttft_scheduled_ms"]["anchor"] == "scheduled"
    assert 100 < summary["achieved_send_rate_rps"] < 300


def test_requests_carry_traceparent_tier_tenant_and_stream_options(server):
    result = run_load(plan_of(6, tiers="interactive", tenants="acme"), Target(server.url, model="stub"))
    assert len(server.received) == 6
    by_span = {rec.span_id: rec for rec in result.records}
    for path, headers, body in server.received:
        assert path == "/v1/completions"
        parent = parse_traceparent(headers["traceparent"])
        assert headers["traceparent"].startswith("00-") and headers["traceparent"].endswith("-01")
        rec = by_span[parent.span_id]
        assert parent.trace_id == rec.trace_id
        assert headers["x-budgetscope-tier"] == "interactive" and headers["x-budgetscope-tenant"] == "acme"
        assert body["budgetscope_tier"] == "interactive" and body["budgetscope_tenant"] == "acme"
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert body["max_tokens"] == 5 and body["ignore_eos"] is True and body["model"] == "stub"
        assert len(body["prompt"].split()) == 16
    assert len({rec.trace_id for rec in result.records}) == 6


def test_body_hints_can_be_left_out(server):
    run_load(plan_of(2), Target(server.url, body_hints=False))
    for _, headers, body in server.received:
        assert "ignore_eos" not in body and "budgetscope_tier" not in body and "model" not in body


def test_chat_api(server):
    result = run_load(plan_of(3), Target(server.url + "/v1/chat/completions"))
    assert all(rec.is_ok and len(rec.token_ns) == 5 for rec in result.records)
    path, _, body = server.received[0]
    assert path == "/v1/chat/completions" and body["messages"][0]["role"] == "user"


def test_client_spans(server):
    exporter = InMemorySpanExporter()
    tracer = ClientTracer(service_name="lg-test", exporter=exporter)
    result = run_load(plan_of(5, tiers="batch"), Target(server.url, model="stub"), tracer=tracer)
    assert tracer.flush()
    spans = {span.context.span_id: span for span in exporter.get_finished_spans()}
    assert len(spans) == 5
    sent_parents = {parse_traceparent(h["traceparent"]).span_id for _, h, _ in server.received}
    assert set(spans) == sent_parents
    u = result.unix0
    for rec in result.records:
        span = spans[rec.span_id]
        assert span.name == "text_completion stub"  # {gen_ai.operation.name} {gen_ai.request.model}
        assert span.kind is SpanKind.CLIENT and span.parent is None
        assert span.context.trace_id == rec.trace_id
        assert span.instrumentation_scope.name == "budgetscope"
        assert span.resource.attributes["service.name"] == "lg-test"
        assert (span.start_time, span.end_time) == (u + rec.sent_ns, u + rec.end_ns)
        attrs = dict(span.attributes)
        assert attrs[C.CLIENT_SCHEDULED_UNIX_NANO] == u + rec.scheduled_ns
        assert attrs[C.CLIENT_FIRST_TOKEN_UNIX_NANO] == u + rec.first_token_ns
        assert attrs[C.CLIENT_ITL_MS] == pytest.approx(tuple(rec.itl_ms)) and len(attrs[C.CLIENT_ITL_MS]) == 4
        assert attrs["http.response.status_code"] == 200
        assert attrs["gen_ai.usage.output_tokens"] == 5
        assert attrs["budgetscope.tier"] == "batch"
        assert attrs["gen_ai.request.model"] == "stub"
        assert span.status.status_code is StatusCode.UNSET
    tracer.shutdown()


def test_unsampled_requests_carry_flags_00(server):
    """sweep's pre-flight: a server that follows its parent's sampling records no span of these."""
    run_load(plan_of(3), Target(server.url), sampled=False)
    assert [parse_traceparent(h["traceparent"]).flags for _, h, _ in server.received] == [0, 0, 0]
    run_load(plan_of(1), Target(server.url))
    assert parse_traceparent(server.received[-1][1]["traceparent"]).flags == 1


def test_non_200_is_recorded_not_raised(server):
    server.status = 503
    exporter = InMemorySpanExporter()
    tracer = ClientTracer(exporter=exporter)
    result = run_load(plan_of(4), Target(server.url), tracer=tracer)
    assert tracer.flush()
    for rec in result.records:
        assert rec.status == 503 and rec.outcome == "http_503" and "stub status 503" in rec.error
        assert rec.first_token_ns is None and math.isnan(rec.ttft_ms)
    assert result.summary()["outcomes"] == {"http_503": 4}
    span = exporter.get_finished_spans()[0]
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["http.response.status_code"] == 503
    assert C.CLIENT_FIRST_TOKEN_UNIX_NANO not in span.attributes
    tracer.shutdown()


def test_error_event_mid_stream(server):
    server.error_after = 2
    result = run_load(plan_of(3), Target(server.url))
    for rec in result.records:
        assert rec.status == 200 and rec.outcome == "stream_error" and rec.error == "stream_error: stub failure"
        assert len(rec.token_ns) == 2


def test_dropped_connection_mid_stream_then_recovery(server):
    server.drop_after = 2
    result = run_load(plan_of(3, rate=50), Target(server.url), connections=1)
    assert [rec.outcome for rec in result.records] == ["connection_closed"] * 3
    assert all(rec.output_tokens == 2 for rec in result.records)
    server.drop_after = None
    assert all(rec.is_ok for rec in run_load(plan_of(3), Target(server.url), connections=1).records)


def test_timeout(server):
    server.first_token_delay_s = 5.0
    result = run_load(plan_of(2), Target(server.url), timeout_s=0.2)
    assert [rec.outcome for rec in result.records] == ["timeout", "timeout"]
    assert all(180 <= rec.e2e_ms < 2000 for rec in result.records)


def test_concurrency_cap_shows_up_as_schedule_lag(server):
    server.first_token_delay_s = 0.05  # each request holds its slot >= 50 ms; the plan sends every 10 ms
    result = run_load(plan_of(8, rate=100), Target(server.url), concurrency=1)
    recs = result.records
    lags = [rec.schedule_lag_ms for rec in recs]
    assert lags[0] < 20
    assert all(b > a for a, b in zip(lags, lags[1:]))  # the backlog grows: every request later than the last
    assert lags[-1] > 7 * 40 - 70 * 1.0  # about 7 x (50 - 10) ms behind by the end
    for a, b in zip(recs, recs[1:]):
        assert b.sent_ns >= a.end_ns  # never two in flight
    assert all(40 < rec.ttft_ms < 150 for rec in recs)  # sent-anchored TTFT hides the backlog...
    assert recs[-1].ttft_scheduled_ms > recs[-1].ttft_ms + 200  # ...the scheduled-anchored one shows it
    assert result.summary()["figures"]["schedule_lag_ms"]["max"] == pytest.approx(max(lags), abs=1e-3)


def test_unreachable_url_raises_one_line():
    target = Target(f"http://127.0.0.1:{free_port()}/v1/completions")
    with pytest.raises(LoadgenError, match="cannot connect to http://127.0.0.1:.*/v1/completions: .*refused"):
        run_load(plan_of(2), target)


def test_explicit_replay_prompt_is_sent(server):
    plan = Plan([PlannedRequest(0, 0, 2, 3, prompt="exact words")], seed=0)
    run_load(plan, Target(server.url))
    assert server.received[0][2]["prompt"] == "exact words" and server.received[0][2]["max_tokens"] == 3


def test_summary_percentiles_are_linear_interpolation():
    xs = [1.0, 2.0, 3.0, 4.0]
    assert quantile(xs, 0.5) == 2.5 and quantile(xs, 0.99) == pytest.approx(3.97) and quantile(xs, 0) == 1.0
    assert math.isnan(quantile([], 0.5))


def test_target_urls():
    assert Target("http://h:1").path == "/v1/completions"
    assert Target("http://h:1/v1", api="chat").path == "/v1/chat/completions"
    assert Target("http://h:1/v1/chat/completions").api == "chat"
    with pytest.raises(LoadgenError):
        Target("ftp://h/x")


# -- the command -------------------------------------------------------------------------------------------
def test_cli_end_to_end(server, tmp_path):
    out, spans = tmp_path / "results.json", tmp_path / "client.jsonl"
    result = CliRunner().invoke(
        load,
        [
            server.url,
            "--rate",
            "100",
            "--requests",
            "20",
            "--tiers",
            "interactive",
            "--out",
            str(out),
            "--spans",
            f"jsonl:{spans}",
            "--seed",
            "4",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "schedule_lag_ms" in result.stdout and "client_ttft_scheduled_ms" in result.stdout
    data = orjson.loads(out.read_bytes())
    assert data["summary"]["ok"] == 20 and len(data["requests"]) == 20
    first = data["requests"][0]
    assert first["outcome"] == "ok" and first["tier"] == "interactive" and len(first["itl_ms"]) == 4
    assert first["sent_unix_nano"] >= first["scheduled_unix_nano"] > 1.6e18
    assert server.received[0][2]["model"] == "stub"  # from GET /v1/models
    lines = spans.read_bytes().splitlines()
    names = [
        s["name"]
        for line in lines
        for rs in orjson.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]
    assert names == ["text_completion stub"] * 20


def test_cli_json_summary(server):
    result = CliRunner().invoke(load, [server.url, "--rate", "50", "--requests", "3", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["outcomes"] == {"ok": 3}


def test_cli_json_summary_has_vllm_bench_keys(server):
    result = CliRunner().invoke(load, [server.url, "--rate", "50", "--requests", "5", "--format", "json"])
    assert result.exit_code == 0, result.output
    s = orjson.loads(result.stdout)
    assert s["completed"] == 5 and s["total_output_tokens"] == 25
    for short, name in (("ttft", "client_ttft_ms"), ("tpot", "client_tpot_ms"), ("e2el", "client_e2e_ms")):
        assert s[f"median_{short}_ms"] == s["figures"][name]["p50"]
        assert s[f"p99_{short}_ms"] == s["figures"][name]["p99"]
        assert s[f"mean_{short}_ms"] == s["figures"][name]["mean"]
    assert s["std_ttft_ms"] >= 0 and s["request_throughput"] > 0


def test_tpot_is_vllms_definition_in_results_and_requests(server, tmp_path):
    """(E2E − TTFT) / (output tokens − 1) per request, the same in `load`'s results and the derived rows."""
    from budgetscope.cli import main
    from budgetscope.opener import Archive

    server.token_delay_s = 0.01
    out, spans, archive = tmp_path / "results.json", tmp_path / "client.jsonl", tmp_path / "a"
    result = CliRunner().invoke(
        load, [server.url, "--rate", "50", "--requests", "6", "--out", str(out), "--spans", f"jsonl:{spans}"]
    )
    assert result.exit_code == 0, result.output
    assert CliRunner().invoke(main, ["ingest", str(spans), "-a", str(archive)]).exit_code == 0
    with Archive(archive, read_only=True, create=False) as a:
        derived = dict(a.con.execute("SELECT client_span_id, client_tpot_ms FROM requests").fetchall())
    for r in orjson.loads(out.read_bytes())["requests"]:
        vllm_tpot = (r["client_e2e_ms"] - r["client_ttft_ms"]) / (r["output_tokens"] - 1)
        assert r["client_tpot_ms"] == pytest.approx(vllm_tpot, abs=1e-3)
        assert r["client_tpot_ms"] == pytest.approx(derived[r["span_id"]], abs=1e-3)


def test_cli_unreachable_url_is_one_line():
    result = CliRunner().invoke(load, [f"http://127.0.0.1:{free_port()}", "--rate", "5", "--requests", "2"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("budgetscope: cannot reach http://127.0.0.1:")


def test_cli_malformed_replay_is_one_line(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"offset_s": 0}\n{"offset_s": 1, "prompt_tokens": -3}\n')
    result = CliRunner().invoke(load, ["http://127.0.0.1:9", "--replay", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"budgetscope: {path}:2: prompt_tokens must be >= 1, got -3"


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give --rate"),
        (["--rate", "5"], "exactly one of --requests or --duration"),
        (["--rate", "5", "--requests", "2", "--arrivals", "gamma"], "gamma needs a burstiness"),
        (["--rate", "5", "--requests", "2", "--prompt-tokens", "uniform:9"], "bad length distribution"),
        (["--rate", "5", "--requests", "2", "--spans", "zipkin"], "unknown trace exporter"),
    ],
)
def test_cli_bad_input_is_one_line(args, message):
    result = CliRunner().invoke(load, ["http://127.0.0.1:9", *args])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


def test_cli_dry_run_sends_nothing():
    result = CliRunner().invoke(
        load,
        [
            "http://127.0.0.1:9",
            "--rate",
            "10",
            "--duration",
            "3",
            "--dry-run",
            "--shared-prefix",
            "fraction=0.5,count=2,tokens=8",
        ],
    )
    assert result.exit_code == 0 and "shared prefix on" in result.stdout


def test_the_command_module_stays_light():
    from conftest import fresh_python

    code = (
        "import sys, budgetscope.commands.load; "
        "print(sorted(m for m in ('torch', 'opentelemetry.sdk', 'asyncio', 'budgetscope.loadgen.runner') "
        "if m in sys.modules))"
    )
    assert fresh_python(code).strip() == "[]"
