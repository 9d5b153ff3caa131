"""Disabled instrumentation and the no-exporter configuration emit nothing and stay cheap."""

import contextvars
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from budgetscope.instrument import Instrumentation, NoopRequestTrace, current_request, stage
from budgetscope.instrument.exporters import ENDPOINT_VARIABLES, default_traces_exporter


def test_disabled_emits_nothing(monkeypatch):
    exporter = InMemorySpanExporter()
    instr = Instrumentation(exporter=exporter, enabled=False)
    req = instr.start_request(model="tiny", traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    assert isinstance(req, NoopRequestTrace)
    assert req.traceparent is None
    with req:
        with req.stage("queue"):
            req.mark("prefill")
        req.token()
        req.set("k", "v")
        req.model = "ignored"
        req.finish(outcome="ok", input_tokens=1, output_tokens=1, cached_tokens=0)
        req.finish(outcome="ok")  # no double-finish error when disabled: nothing is recorded
    instr.step(
        start_ns=1,
        end_ns=2,
        batch_size=1,
        prefill_tokens=0,
        decode_seqs=1,
        kv_blocks_used=1,
        kv_blocks_total=1,
        queue_depth=0,
        preempted=0,
    )
    assert instr.flush()
    instr.shutdown()
    assert exporter.get_finished_spans() == ()
    assert not instr.is_exporting


def test_disabled_does_not_become_current():
    instr = Instrumentation(enabled=False)

    @stage("queue")
    def handler():
        instr.start_request()
        return current_request()

    assert contextvars.Context().run(handler) is None


def test_no_exporter_configured_records_but_exports_nothing(monkeypatch):
    for name in ("OTEL_TRACES_EXPORTER", *ENDPOINT_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    instr = Instrumentation()
    assert not instr.is_exporting
    req = instr.start_request()
    req.mark("queue")
    req.token()
    req.finish()
    assert len(req.traceparent) == 55
    assert instr.flush()
    instr.shutdown()


@pytest.mark.parametrize(
    "env, spec",
    [
        ({}, "none"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:4318/v1/traces"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_TRACES_EXPORTER": "none"}, "none"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
    ],
)
def test_default_exporter_follows_opentelemetry_once_an_endpoint_is_set(monkeypatch, env, spec):
    for name in ("OTEL_TRACES_EXPORTER", *ENDPOINT_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert default_traces_exporter() == spec


def test_otel_traces_exporter_none(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert not Instrumentation().is_exporting


def test_unknown_exporter_spec_is_a_clear_error():
    with pytest.raises(ValueError, match="'zipkin'.*none, otlp, console, jsonl:<path>"):
        Instrumentation(exporter="zipkin")


def test_import_loads_neither_the_sdk_nor_torch():
    code = (
        "import sys, budgetscope.instrument as bi\n"
        "bi.Instrumentation(exporter='none').start_request().finish()\n"
        "bad = [m for m in sys.modules if m.startswith(('opentelemetry', 'torch', 'google.protobuf'))]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
