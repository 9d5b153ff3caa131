"""The engine's spans through budgetscope.instrument with an in-memory exporter: names, parents, outcomes,
stage durations that tile the request."""

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")
pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.engine.telemetry import NULL_TRACE, Telemetry
from budgetscope.instrument import Instrumentation
from engine_fixtures import running_server, wait_for

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def telemetry():
    exporter = InMemorySpanExporter()
    return Telemetry(Instrumentation(service_name="budgetscope-engine", exporter=exporter)), exporter


def requests_by_outcome(spans):
    return {s.attributes["budgetscope.outcome"]: s for s in spans if s.kind is SpanKind.SERVER}


def stages_of(root, spans):
    kids = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    return sorted(kids, key=lambda s: s.start_time)


def test_server_request_spans_follow_the_contract():
    tel, exporter = telemetry()
    config = EngineConfig(model="tiny", max_model_len=512, num_kv_blocks=128, max_prompt_tokens=50)
    with running_server(config, tel) as (url, engine):
        headers = {
            "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
            "x-budgetscope-tier": "interactive",
            "x-budgetscope-tenant": "acme",
        }
        with httpx.stream(
            "POST",
            f"{url}/v1/completions",
            headers=headers,
            json={"prompt": "traced", "max_tokens": 5, "ignore_eos": True, "stream": True},
        ) as r:
            assert r.status_code == 200
            list(r.iter_lines())
        assert httpx.post(f"{url}/v1/completions", json={"prompt": "x" * 80}).status_code == 400
        with httpx.stream(
            "POST",
            f"{url}/v1/completions",
            json={"prompt": "gone", "max_tokens": 400, "ignore_eos": True, "stream": True},
        ) as r:
            lines = r.iter_lines()
            next(lines)
        assert wait_for(lambda: engine.block_manager.num_used_blocks == 0)
        assert wait_for(lambda: "cancelled" in engine.metrics.outcomes)
        tel.flush()
    spans = exporter.get_finished_spans()
    roots = requests_by_outcome(spans)
    assert set(roots) == {"ok", "rejected", "cancelled"}

    ok = roots["ok"]
    assert ok.kind is SpanKind.SERVER
    assert f"{ok.context.trace_id:032x}" == TRACE_ID and f"{ok.parent.span_id:016x}" == PARENT_ID
    attrs = ok.attributes
    assert attrs["budgetscope.tier"] == "interactive" and attrs["budgetscope.tenant"] == "acme"
    assert attrs["gen_ai.usage.output_tokens"] == 5 and attrs["gen_ai.usage.input_tokens"] == 7
    assert attrs["gen_ai.request.model"] == "tiny"
    # the GenAI conventions' span name and response attributes
    assert ok.name == "text_completion tiny"
    assert attrs["gen_ai.request.max_tokens"] == 5 and attrs["gen_ai.response.model"] == "tiny"
    assert attrs["gen_ai.response.finish_reasons"] == ("length",)
    # when uvicorn read each request: before its span began (the handler), and not long before on an idle server
    for root in roots.values():
        read_ns = root.attributes["budgetscope.http.read_unix_nano"]
        assert 0 <= root.start_time - read_ns < 2_000_000_000
    stages = stages_of(ok, spans)
    assert [s.name for s in stages] == [
        "stage.frontend",
        "stage.queue",
        "stage.prefill",
        "stage.decode",
        "stage.postprocess",
    ]
    assert all(s.kind is SpanKind.INTERNAL for s in stages)
    total = sum(s.end_time - s.start_time for s in stages)
    assert abs(total - (ok.end_time - ok.start_time)) <= 1000  # ns: the stages tile the request
    for before, after in zip(stages, stages[1:]):
        assert before.end_time == after.start_time

    assert roots["rejected"].attributes["budgetscope.tier"] == "default"
    cancelled = roots["cancelled"]
    assert [s.name for s in stages_of(cancelled, spans)][:4] == [
        "stage.frontend",
        "stage.queue",
        "stage.prefill",
        "stage.decode",
    ]
    steps = [s for s in spans if s.name == "engine.step"]
    assert steps and all(s.attributes["budgetscope.step.kv_blocks_total"] == 128 for s in steps)
    assert any(s.attributes["budgetscope.step.prefill_tokens"] == 7 for s in steps)


def test_preemption_requeues_and_prefills_again():
    tel, exporter = telemetry()
    engine = LLMEngine(
        EngineConfig(
            model="tiny", num_kv_blocks=6, block_size=16, max_model_len=512, max_num_batched_tokens=64, max_num_seqs=4
        ),
        tel,
    )
    params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    seqs = engine.generate([list(range(1, 30)), list(range(40, 69))], params)
    assert sum(s.num_preemptions for s in seqs) >= 1
    tel.flush()
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.kind is SpanKind.SERVER]
    assert len(roots) == 2
    for stage in ("stage.queue", "stage.prefill"):
        counts = sorted(sum(c.name == stage for c in stages_of(r, spans)) for r in roots)
        assert counts == sorted(1 + s.num_preemptions for s in seqs)
    steps = [s for s in spans if s.name == "engine.step"]
    assert sum(s.attributes["budgetscope.step.preempted"] for s in steps) == sum(s.num_preemptions for s in seqs)


def test_cached_tokens_reach_the_root_span():
    tel, exporter = telemetry()
    engine = LLMEngine(EngineConfig(model="tiny", num_kv_blocks=32, max_model_len=256), tel)
    prompt = list(range(1, 40))
    engine.generate([prompt], SamplingParams(max_tokens=2))
    engine.generate([prompt + [7]], SamplingParams(max_tokens=2))
    tel.flush()
    cached = sorted(
        s.attributes.get("gen_ai.usage.cache_read.input_tokens", 0)
        for s in exporter.get_finished_spans()
        if s.kind is SpanKind.SERVER
    )
    assert cached == [0, 32]


def test_engine_runs_without_instrumentation():
    off = Telemetry(Instrumentation(enabled=False))
    assert not off.enabled and off.start_request(model="tiny") is NULL_TRACE
    for tel in (off, Telemetry(None), Telemetry.create(enabled=False)):
        engine = LLMEngine(EngineConfig(model="tiny", num_kv_blocks=16, max_model_len=128), tel)
        assert engine.generate(["hi"], SamplingParams(max_tokens=3, ignore_eos=True))[0].num_output_tokens == 3


def test_steps_carry_the_engine_limits():
    tel, exporter = telemetry()
    engine = LLMEngine(
        EngineConfig(model="tiny", num_kv_blocks=16, max_model_len=256, max_num_batched_tokens=96, max_num_seqs=3), tel
    )
    engine.generate([list(range(1, 20))], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))
    tel.flush()
    steps = [s for s in exporter.get_finished_spans() if s.name == "engine.step"]
    assert steps and {
        (s.attributes["budgetscope.step.max_seqs"], s.attributes["budgetscope.step.token_budget"]) for s in steps
    } == {(3, 96)}


@pytest.mark.parametrize(
    "env, says_nowhere", [({}, True), ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, False)]
)
def test_engine_serve_says_when_spans_go_nowhere(monkeypatch, env, says_nowhere):
    """With neither an exporter nor an OTLP endpoint, `engine serve` says so in one line; an endpoint alone
    exports (OpenTelemetry's default `OTEL_TRACES_EXPORTER=otlp`)."""
    from click.testing import CliRunner

    import budgetscope.engine.server as server
    from budgetscope.cli import main

    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    served = []
    monkeypatch.setattr(server, "serve", lambda llm, **kw: served.append(llm.telemetry.is_exporting))
    r = CliRunner().invoke(main, ["engine", "serve", "--config", "tiny", "--port", "0"])
    assert r.exit_code == 0, r.output
    nowhere = (
        "budgetscope engine: spans go nowhere (set OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER or --exporter)"
    )
    assert (nowhere in r.output) is says_nowhere and served == [not says_nowhere]
