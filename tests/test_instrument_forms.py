"""The context-manager and decorator forms, and the current request of a context."""

import asyncio
import contextvars

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from budgetscope.instrument import Instrumentation, current_request, stage
from budgetscope.instrument import attributes as A


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


@pytest.fixture
def instr(exporter):
    instrumentation = Instrumentation(service_name="test-engine", exporter=exporter)
    yield instrumentation
    instrumentation.shutdown()


def names(instr, exporter):
    assert instr.flush()
    return [s.name for s in exporter.get_finished_spans()]


def test_start_request_makes_the_request_current(instr):
    def run():
        req = instr.start_request()
        assert current_request() is req
        req.finish()

    contextvars.Context().run(run)


def test_finish_stops_the_request_being_current(instr):
    def run():
        req = instr.start_request()
        req.finish()
        assert current_request() is None

    contextvars.Context().run(run)


def test_request_stage_context_manager(instr, exporter):
    req = instr.start_request()
    with req.stage("frontend"):
        pass
    with req.stage("queue") as inside:
        assert inside is req
        assert req.current_stage == "queue"
    assert req.current_stage == "queue"  # a stage lasts until the next mark, not until the block ends
    with req.stage("prefill"):
        req.token()
    req.finish()
    assert names(instr, exporter) == [
        "text_completion",
        "stage.frontend",
        "stage.queue",
        "stage.prefill",
        "stage.decode",
    ]


def test_decorator_marks_the_current_request(instr, exporter):
    @stage("queue")
    def enqueue(x):
        return x + 1

    def run():
        req = instr.start_request()
        assert enqueue(1) == 2
        req.finish()

    contextvars.Context().run(run)
    assert names(instr, exporter) == ["text_completion", "stage.frontend", "stage.queue"]
    assert enqueue.__name__ == "enqueue"


def test_decorator_without_a_current_request_just_calls(instr, exporter):
    @stage("queue")
    def enqueue():
        return "ran"

    assert contextvars.Context().run(enqueue) == "ran"
    assert names(instr, exporter) == []


def test_decorator_on_a_coroutine_function(instr, exporter):
    @stage("postprocess")
    async def detokenize():
        return current_request().current_stage

    async def handler():
        with instr.start_request(model="tiny") as req:
            req.token()
            assert await detokenize() == "postprocess"

    asyncio.run(handler())
    assert names(instr, exporter) == ["text_completion tiny", "stage.frontend", "stage.decode", "stage.postprocess"]


def test_module_level_stage_as_context_manager(instr, exporter):
    def run():
        instr.start_request()
        with stage("queue"):
            pass
        current_request().finish()

    contextvars.Context().run(run)
    assert names(instr, exporter) == ["text_completion", "stage.frontend", "stage.queue"]


def test_with_request_sets_current_and_finishes_ok(instr, exporter):
    def run():
        with instr.start_request() as req:
            assert current_request() is req
        assert req.outcome == "ok"

    contextvars.Context().run(run)
    assert names(instr, exporter) == ["text_completion", "stage.frontend"]


def test_with_request_restores_the_previous_current(instr):
    def run():
        outer = instr.start_request()
        inner = instr.start_request()
        with outer:
            assert current_request() is outer
        assert current_request() is inner
        inner.finish()

    contextvars.Context().run(run)


@pytest.mark.parametrize(
    ("error", "outcome"),
    [(RuntimeError("boom"), "error"), (TimeoutError(), "timeout"), (asyncio.CancelledError(), "cancelled")],
)
def test_with_request_maps_an_escaping_exception_to_the_outcome(instr, exporter, error, outcome):
    with pytest.raises(type(error)):
        with instr.start_request() as req:
            raise error
    assert req.outcome == outcome
    instr.flush()
    root = exporter.get_finished_spans()[0]
    assert root.attributes[A.OUTCOME] == outcome
    assert root.attributes[A.ERROR_TYPE] == type(error).__qualname__


def test_with_request_keeps_an_explicit_finish(instr, exporter):
    def run():
        with instr.start_request() as req:
            req.finish(outcome="rejected")
        assert current_request() is None

    contextvars.Context().run(run)
    instr.flush()
    assert [s.attributes.get(A.OUTCOME) for s in exporter.get_finished_spans()] == ["rejected", None]


def test_unknown_stage_in_decorator_fails_at_decoration():
    with pytest.raises(ValueError, match="'tokenize'.*frontend, queue, prefill, decode, postprocess"):
        stage("tokenize")
