"""Requests recorded from several threads: an engine thread marks, a handler thread finishes."""

import threading

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from budgetscope.instrument import Instrumentation
from budgetscope.instrument import attributes as A


def test_engine_thread_marks_and_handler_finishes():
    exporter = InMemorySpanExporter()
    instr = Instrumentation(exporter=exporter)
    req = instr.start_request(model="tiny")
    req.mark("queue")

    def engine():
        req.mark("prefill")
        for _ in range(5):
            req.token()

    worker = threading.Thread(target=engine)
    worker.start()
    worker.join()
    req.mark("postprocess")
    req.finish(outcome="ok")
    instr.flush()
    instr.shutdown()
    root, *stages = exporter.get_finished_spans()
    assert [s.name for s in stages] == [
        "stage.frontend",
        "stage.queue",
        "stage.prefill",
        "stage.decode",
        "stage.postprocess",
    ]
    assert root.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 5


def test_concurrent_requests_all_exported_and_tiled():
    exporter = InMemorySpanExporter()
    instr = Instrumentation(exporter=exporter)
    per_thread, threads = 200, 4

    def serve():
        for _ in range(per_thread):
            req = instr.start_request()
            req.mark("queue")
            req.mark("prefill")
            req.token()
            req.token()
            req.finish()

    workers = [threading.Thread(target=serve) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert instr.flush()
    instr.shutdown()
    spans = exporter.get_finished_spans()
    roots = {s.context.span_id: s for s in spans if s.kind is SpanKind.SERVER}
    assert len(roots) == per_thread * threads
    totals = dict.fromkeys(roots, 0)
    for span in spans:
        if span.kind is not SpanKind.SERVER:
            totals[span.parent.span_id] += span.end_time - span.start_time
    assert all(totals[sid] == root.end_time - root.start_time for sid, root in roots.items())
