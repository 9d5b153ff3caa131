"""The span contract of docs/design.md, checked on spans captured by an in-memory exporter."""

import itertools

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from budgetscope import __version__
from budgetscope.instrument import Instrumentation, RequestFinishedError, request_trace
from budgetscope.instrument import attributes as A

UNIX0 = 1_700_000_000_000_000_000  # the fake wall clock at the first anchor
INCOMING = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class FakeClock:
    """perf_counter_ns stand-in: each reading is `next_step` ns after the previous; UNIX0 is START."""

    START = 5_000_000_000

    def __init__(self) -> None:
        self.mono = self.START
        self.next_step = 1_000

    def now(self) -> int:
        self.mono += self.next_step
        return self.mono

    def anchor(self) -> tuple[int, int]:
        mono = self.now()
        return UNIX0 + (mono - self.START), mono


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(request_trace, "now_ns", fake.now)
    monkeypatch.setattr(request_trace, "anchor", fake.anchor)
    return fake


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


@pytest.fixture
def instr(exporter, monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    instrumentation = Instrumentation(service_name="test-engine", exporter=exporter)
    yield instrumentation
    instrumentation.shutdown()


def spans_of(instr, exporter):
    assert instr.flush()
    return exporter.get_finished_spans()


def one_request(instr, clock, *, tokens=3, **start):
    req = instr.start_request(model="tiny", **start)
    clock.next_step = 2_000_000  # frontend 2 ms
    req.mark("queue")
    clock.next_step = 5_000_000  # queue 5 ms
    req.mark("prefill")
    clock.next_step = 30_000_000  # prefill 30 ms, then 10 ms between tokens
    for _ in range(tokens):
        req.token()
        clock.next_step = 10_000_000
    clock.next_step = 1_000_000
    req.mark("postprocess")
    clock.next_step = 4_000_000
    req.finish(outcome="ok", input_tokens=12, output_tokens=tokens, cached_tokens=4)
    return req


def test_root_span_has_the_contract_attributes(instr, exporter, clock):
    req = one_request(instr, clock, tier="interactive", tenant="acme", request_id="cmpl-1")
    root = spans_of(instr, exporter)[0]
    assert root.name == A.request_span_name(A.DEFAULT_OPERATION, root.attributes.get(A.GEN_AI_REQUEST_MODEL))
    assert root.kind is SpanKind.SERVER
    assert root.parent is None
    assert root.instrumentation_scope.name == A.SCOPE_NAME == "budgetscope"
    assert root.instrumentation_scope.version == __version__
    assert root.resource.attributes["service.name"] == "test-engine"
    assert f"{root.context.trace_id:032x}" == req.trace_id
    assert f"{root.context.span_id:016x}" == req.span_id
    first_token = UNIX0 + 1_000 + 2_000_000 + 5_000_000 + 30_000_000
    assert dict(root.attributes) == {
        A.GEN_AI_PROVIDER_NAME: "budgetscope",
        A.GEN_AI_OPERATION_NAME: "text_completion",
        A.GEN_AI_REQUEST_MODEL: "tiny",
        A.GEN_AI_RESPONSE_ID: "cmpl-1",
        A.GEN_AI_USAGE_INPUT_TOKENS: 12,
        A.GEN_AI_USAGE_OUTPUT_TOKENS: 3,
        A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 4,
        A.TIER: "interactive",
        A.TENANT: "acme",
        A.OUTCOME: "ok",
        A.FIRST_TOKEN_UNIX_NANO: first_token,
    }
    assert root.status.status_code is StatusCode.UNSET


def test_defaults_tier_and_response_id(instr, exporter, clock):
    req = instr.start_request()
    req.finish()
    root = spans_of(instr, exporter)[0]
    assert root.attributes[A.TIER] == A.DEFAULT_TIER == "default"
    assert root.attributes[A.GEN_AI_RESPONSE_ID] == req.span_id
    assert A.TENANT not in root.attributes and A.GEN_AI_REQUEST_MODEL not in root.attributes
    assert root.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 0


def test_stage_spans_tile_the_root_in_order(instr, exporter, clock):
    one_request(instr, clock)
    root, *stages = spans_of(instr, exporter)
    assert [s.name for s in stages] == [f"stage.{n}" for n in ("frontend", "queue", "prefill", "decode", "postprocess")]
    for span in stages:
        assert span.kind is SpanKind.INTERNAL
        assert span.parent.span_id == root.context.span_id and not span.parent.is_remote
        assert span.context.trace_id == root.context.trace_id
        assert span.attributes[A.STAGE] == span.name.removeprefix(A.SPAN_STAGE_PREFIX)
        assert span.instrumentation_scope.name == A.SCOPE_NAME
    assert stages[0].start_time == root.start_time == UNIX0 + 1_000
    assert stages[-1].end_time == root.end_time
    for before, after in itertools.pairwise(stages):
        assert before.end_time == after.start_time
    assert sum(s.end_time - s.start_time for s in stages) == root.end_time - root.start_time
    durations = [s.end_time - s.start_time for s in stages]
    # decode: two 10 ms gaps plus 1 ms from the last token to the postprocess mark
    assert durations == [2_000_000, 5_000_000, 30_000_000, 21_000_000, 4_000_000]


def test_decode_span_carries_itl_and_steps(instr, exporter, clock):
    one_request(instr, clock, tokens=4)
    decode = next(s for s in spans_of(instr, exporter) if s.name == "stage.decode")
    assert decode.attributes[A.DECODE_ITL_MS] == (10.0, 10.0, 10.0)
    assert decode.attributes[A.DECODE_STEPS] == 3
    prefill = next(s for s in exporter.get_finished_spans() if s.name == "stage.prefill")
    root = exporter.get_finished_spans()[0]
    assert prefill.end_time == root.attributes[A.FIRST_TOKEN_UNIX_NANO] == decode.start_time


def test_repeated_stages_make_more_spans_and_durations_add(instr, exporter, clock):
    req = instr.start_request(model="tiny")
    clock.next_step = 1_000_000
    for stage in ("queue", "prefill", "queue", "prefill", "prefill"):  # preempted once; prefill re-marked
        req.mark(stage)
    req.token()
    req.token()
    req.mark("queue")  # preempted during decode
    req.mark("prefill")
    req.token()  # resumes decode
    req.mark("postprocess")
    req.finish()
    root, *stages = spans_of(instr, exporter)
    names = [s.name.removeprefix("stage.") for s in stages]
    assert names == [
        "frontend",
        "queue",
        "prefill",
        "queue",
        "prefill",
        "decode",
        "queue",
        "prefill",
        "decode",
        "postprocess",
    ]
    assert sum(s.end_time - s.start_time for s in stages) == root.end_time - root.start_time
    decodes = [s for s in stages if s.name == "stage.decode"]
    assert [d.attributes[A.DECODE_ITL_MS] for d in decodes] == [(1.0,), (3.0,)]
    assert [d.attributes[A.DECODE_STEPS] for d in decodes] == [1, 1]
    assert root.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3


def test_marking_the_current_stage_again_adds_no_span(instr, exporter, clock):
    req = instr.start_request()
    req.mark("frontend")
    req.mark("queue")
    req.mark("queue")
    req.finish()
    assert [s.name for s in spans_of(instr, exporter)] == ["text_completion", "stage.frontend", "stage.queue"]


def test_incoming_traceparent_parents_the_root(instr, exporter, clock):
    req = instr.start_request(traceparent=INCOMING)
    assert req.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert req.traceparent == f"00-0af7651916cd43dd8448eb211c80319c-{req.span_id}-01"
    req.finish()
    root = spans_of(instr, exporter)[0]
    assert root.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert root.parent.trace_id == root.context.trace_id
    assert root.parent.span_id == 0xB7AD6B7169203331
    assert root.parent.is_remote


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        "00-" + "0" * 32 + "-b7ad6b7169203331-01",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    ],
)
def test_invalid_traceparent_starts_a_new_trace(instr, exporter, clock, header):
    req = instr.start_request(traceparent=header)
    req.finish()
    root = spans_of(instr, exporter)[0]
    assert root.parent is None
    assert len(req.trace_id) == 32 and req.trace_id != "0" * 32


def test_traceparent_of_a_new_trace_is_well_formed(instr, clock):
    req = instr.start_request()
    version, trace_id, span_id, flags = req.traceparent.split("-")
    assert (version, trace_id, span_id, flags) == ("00", req.trace_id, req.span_id, "01")
    req.finish()


def test_engine_step_span(instr, exporter):
    instr.step(
        start_ns=UNIX0,
        end_ns=UNIX0 + 7_000_000,
        batch_size=8,
        prefill_tokens=512,
        decode_seqs=6,
        kv_blocks_used=100,
        kv_blocks_total=1000,
        queue_depth=3,
        preempted=1,
    )
    (span,) = spans_of(instr, exporter)
    assert span.name == A.SPAN_ENGINE_STEP
    assert span.kind is SpanKind.INTERNAL
    assert span.parent is None
    assert (span.start_time, span.end_time) == (UNIX0, UNIX0 + 7_000_000)
    assert dict(span.attributes) == {
        A.STEP_BATCH_SIZE: 8,
        A.STEP_PREFILL_TOKENS: 512,
        A.STEP_DECODE_SEQS: 6,
        A.STEP_KV_BLOCKS_USED: 100,
        A.STEP_KV_BLOCKS_TOTAL: 1000,
        A.STEP_QUEUE_DEPTH: 3,
        A.STEP_PREEMPTED: 1,
    }


def test_engine_step_span_carries_the_limits_when_given(instr, exporter):
    instr.step(
        start_ns=UNIX0,
        end_ns=UNIX0 + 1,
        batch_size=8,
        prefill_tokens=0,
        decode_seqs=8,
        kv_blocks_used=1,
        kv_blocks_total=10,
        queue_depth=0,
        preempted=0,
        max_seqs=64,
        token_budget=512,
    )
    (span,) = spans_of(instr, exporter)
    assert (span.attributes[A.STEP_MAX_SEQS], span.attributes[A.STEP_TOKEN_BUDGET]) == (64, 512)


def test_engine_step_accepts_perf_counter_readings(instr, exporter):
    import time

    start = time.perf_counter_ns()
    before = time.time_ns()
    instr.step(
        start_ns=start,
        end_ns=start + 3_000_000,
        batch_size=1,
        prefill_tokens=0,
        decode_seqs=1,
        kv_blocks_used=1,
        kv_blocks_total=2,
        queue_depth=0,
        preempted=0,
    )
    (span,) = spans_of(instr, exporter)
    assert span.end_time - span.start_time == 3_000_000
    assert abs(span.start_time - before) < 1_000_000_000


@pytest.mark.parametrize("outcome", ["error", "timeout"])
def test_error_outcomes_set_error_status(instr, exporter, clock, outcome):
    instr.start_request().finish(outcome=outcome, error_type="EngineCrash")
    root = spans_of(instr, exporter)[0]
    assert root.attributes[A.OUTCOME] == outcome
    assert root.attributes[A.ERROR_TYPE] == "EngineCrash"
    assert root.status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("outcome", ["ok", "rejected", "cancelled"])
def test_other_outcomes_leave_status_unset(instr, exporter, clock, outcome):
    instr.start_request().finish(outcome=outcome)
    root = spans_of(instr, exporter)[0]
    assert root.attributes[A.OUTCOME] == outcome
    assert root.status.status_code is StatusCode.UNSET


def test_set_adds_root_attributes(instr, exporter, clock):
    req = instr.start_request()
    req.set("http.request.method", "POST")
    req.set("app.prompt_chars", 1234)
    req.set("app.scores", [0.5, 1.5])
    req.finish()
    attrs = spans_of(instr, exporter)[0].attributes
    assert attrs["http.request.method"] == "POST"
    assert attrs["app.prompt_chars"] == 1234
    assert attrs["app.scores"] == (0.5, 1.5)


def test_set_refuses_owned_keys_and_bad_values(instr, clock):
    req = instr.start_request()
    with pytest.raises(ValueError, match=r"budgetscope.outcome.*finish\(outcome="):
        req.set(A.OUTCOME, "ok")
    with pytest.raises(TypeError, match="app.obj"):
        req.set("app.obj", object())
    with pytest.raises(TypeError, match="app.mixed"):
        req.set("app.mixed", [1, "a"])
    req.finish()


def test_attributes_assigned_after_start(instr, exporter, clock):
    req = instr.start_request()
    req.model, req.tier, req.tenant, req.request_id = "llama", "batch", "t1", "cmpl-9"
    req.finish()
    attrs = spans_of(instr, exporter)[0].attributes
    assert (attrs[A.GEN_AI_REQUEST_MODEL], attrs[A.TIER], attrs[A.TENANT], attrs[A.GEN_AI_RESPONSE_ID]) == (
        "llama",
        "batch",
        "t1",
        "cmpl-9",
    )


def test_unknown_stage_names_it_and_the_valid_ones(instr, clock):
    req = instr.start_request()
    with pytest.raises(ValueError) as err:
        req.mark("prefil")
    message = str(err.value)
    assert "'prefil'" in message
    for stage in A.MARKABLE_STAGES:
        assert stage in message
    with pytest.raises(ValueError, match="'networking'"):
        req.stage("networking")
    req.finish()


def test_unknown_outcome_is_refused_and_request_stays_open(instr, exporter, clock):
    req = instr.start_request()
    with pytest.raises(ValueError, match="'success'.*ok, rejected, cancelled, error, timeout"):
        req.finish(outcome="success")
    with pytest.raises(ValueError, match="output_tokens"):
        req.finish(output_tokens=-1)
    with pytest.raises(ValueError, match="input_tokens.*'12'"):
        req.finish(input_tokens="12")
    req.finish(outcome="ok")
    assert len(spans_of(instr, exporter)) == 2


def test_finish_twice_is_an_error_and_exports_once(instr, exporter, clock):
    req = instr.start_request(request_id="cmpl-7")
    req.mark("queue")
    req.finish(outcome="ok")
    with pytest.raises(RequestFinishedError, match="cmpl-7.*already finished.*'ok'"):
        req.finish(outcome="cancelled")
    spans = spans_of(instr, exporter)
    assert [s.name for s in spans] == ["text_completion", "stage.frontend", "stage.queue"]
    assert spans[0].attributes[A.OUTCOME] == "ok"
    assert req.outcome == "ok" and req.is_finished


def test_marks_after_finish_change_nothing(instr, exporter, clock):
    req = instr.start_request()
    req.finish()
    req.mark("queue")
    req.token()
    assert [s.name for s in spans_of(instr, exporter)] == ["text_completion", "stage.frontend"]


def test_otel_service_name_overrides_the_argument(exporter, monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    instr = Instrumentation(service_name="from-code", exporter=exporter)
    instr.start_request().finish()
    root = spans_of(instr, exporter)[0]
    instr.shutdown()
    assert root.resource.attributes["service.name"] == "from-env"
    assert root.resource.attributes["deployment.environment"] == "test"


def test_many_requests_all_exported_in_batches(exporter, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")
    instr = Instrumentation(exporter=exporter)
    for _ in range(200):
        req = instr.start_request()
        req.mark("queue")
        req.finish()
    assert instr.flush()
    instr.shutdown()
    assert len(exporter.get_finished_spans()) == 600
    assert instr.dropped_requests == 0


def test_full_queue_drops_and_counts(monkeypatch):
    class Stalled(InMemorySpanExporter):
        pass

    instr = Instrumentation(exporter=Stalled(), max_queued_requests=5)
    instr._worker._wake_at = 10**9  # keep the worker asleep so the queue fills
    instr._worker._delay = 60
    for _ in range(8):
        instr.start_request().finish()
    assert instr.dropped_requests == 3
    instr.shutdown()
