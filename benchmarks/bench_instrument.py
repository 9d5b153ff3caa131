"""Overhead of budgetscope.instrument: hot-path cost per call and background cost per span.

Run: python benchmarks/bench_instrument.py [--requests N] [--tokens T]

Hot-path figures are wall ns per call, loop overhead included, best of `--repeat` runs (the export thread
is kept asleep while they run, so it does not share the GIL with the timed loop). Background figures are
what the export thread spends per span, measured on the same records in this thread.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from budgetscope.instrument import Instrumentation
from budgetscope.instrument.request_trace import RequestTrace


class DiscardExporter(SpanExporter):
    """Accepts every batch and keeps nothing."""

    def export(self, spans: Sequence) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def best_ns_per_call(
    run: Callable[[], int | tuple[int, int]], repeat: int, between: Callable[[], object] = lambda: None
) -> float:
    """The best ns/call over `repeat` runs. `run` returns its number of calls, or (ns it timed, calls).

    `between` runs untimed before each run (here: drain the export queue, as the export thread would).
    """
    best = float("inf")
    for _ in range(repeat):
        between()
        t0 = time.perf_counter_ns()
        result = run()
        ns, calls = result if isinstance(result, tuple) else (time.perf_counter_ns() - t0, result)
        best = min(best, ns / calls)
    return best


def one_request(instr: Instrumentation, tokens: int) -> None:
    req = instr.start_request(model="tiny", tier="interactive")
    req.mark("queue")
    req.mark("prefill")
    for _ in range(tokens):
        req.token()
    req.mark("postprocess")
    req.finish(outcome="ok", input_tokens=16, output_tokens=tokens)


def hot_path(instr: Instrumentation, args: argparse.Namespace) -> dict[str, float]:
    n = args.requests

    def timed(run: Callable[[], int | tuple[int, int]]) -> float:
        return best_ns_per_call(run, args.repeat, between=instr.flush)

    def empty_loop() -> int:
        for _ in range(n * 10):
            pass
        return n * 10

    def marks() -> int:
        for _ in range(n // 100):
            req = instr.start_request()
            mark = req.mark
            for _ in range(50):
                mark("queue")
                mark("prefill")
            req.finish()
        return (n // 100) * 100

    def tokens() -> int:
        for _ in range(n // 100):
            req = instr.start_request()
            token = req.token
            for _ in range(100):
                token()
            req.finish()
        return (n // 100) * 100

    def starts() -> int:
        for _ in range(n):
            instr.start_request(model="tiny")
        return n

    def finishes() -> tuple[int, int]:
        reqs = [instr.start_request(model="tiny") for _ in range(n)]
        t0 = time.perf_counter_ns()
        for req in reqs:
            req.finish(outcome="ok", input_tokens=16, output_tokens=0)
        return time.perf_counter_ns() - t0, n

    def requests() -> int:
        for _ in range(n // 10):
            one_request(instr, args.tokens)
        return n // 10

    return {
        "empty loop iteration": timed(empty_loop),
        "mark()": timed(marks),
        "token()": timed(tokens),
        "start_request()": timed(starts),
        "finish()": timed(finishes),
        f"request start..finish, 3 marks + {args.tokens} tokens": timed(requests),
    }


def background(args: argparse.Namespace) -> dict[str, float]:
    import orjson
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from budgetscope.instrument.instrumentation import _resource
    from budgetscope.instrument.otlp_json import encode_request
    from budgetscope.instrument.span_builder import SpanBuilder

    records: list = []
    for _ in range(args.requests // 10):
        req = RequestTrace(records.append, model="tiny", tier="interactive")
        req.mark("queue")
        req.mark("prefill")
        for _ in range(args.tokens):
            req.token()
        req.mark("postprocess")
        req.finish(outcome="ok", input_tokens=16)
    builder = SpanBuilder(_resource("bench"))
    t0 = time.perf_counter_ns()
    spans = [span for record in records for span in builder.build(record)]
    build_ns = (time.perf_counter_ns() - t0) / len(spans)
    batches = [spans[i : i + 512] for i in range(0, len(spans), 512)]
    t0 = time.perf_counter_ns()
    for batch in batches:
        encode_spans(batch).SerializeToString()
    proto_ns = (time.perf_counter_ns() - t0) / len(spans)
    t0 = time.perf_counter_ns()
    for batch in batches:
        orjson.dumps(encode_request(batch))
    json_ns = (time.perf_counter_ns() - t0) / len(spans)
    return {
        "build ReadableSpan (per span)": build_ns,
        "encode OTLP protobuf (per span)": proto_ns,
        "encode OTLP JSON line (per span)": json_ns,
        "spans per request": len(spans) / len(records),
    }


def otel_sdk_reference(args: argparse.Namespace) -> float:
    """One span started and ended through the OpenTelemetry SDK tracer (BatchSpanProcessor), for scale."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DiscardExporter(), max_queue_size=args.requests * 2))
    tracer = provider.get_tracer("bench")

    def spans() -> int:
        for _ in range(args.requests // 10):
            with tracer.start_as_current_span("stage.queue", attributes={"budgetscope.stage": "queue"}):
                pass
        return args.requests // 10

    ns = best_ns_per_call(spans, args.repeat)
    provider.shutdown()
    return ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="calls per timed run (default 20000)")
    parser.add_argument("--tokens", type=int, default=32, help="output tokens per request (default 32)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs; the best is kept (default 5)")
    args = parser.parse_args()

    enabled = Instrumentation(exporter=DiscardExporter(), max_queued_requests=10**7)
    enabled._worker._delay = 3600  # keep the export thread asleep while the hot path is timed
    enabled._worker._wake_at = 10**9
    disabled = Instrumentation(enabled=False)

    rows: list[tuple[str, str, str]] = []
    on, off = hot_path(enabled, args), hot_path(disabled, args)
    for name in on:
        rows.append((f"hot: {name}", f"{on[name]:,.0f} ns", f"{off[name]:,.0f} ns"))
    enabled.flush()
    before = enabled._worker.exported_spans
    for _ in range(args.requests // 10):
        one_request(enabled, args.tokens)
    t0 = time.perf_counter_ns()
    enabled.flush(timeout_s=600)
    flush_ns = (time.perf_counter_ns() - t0) / max(enabled._worker.exported_spans - before, 1)
    enabled.shutdown()
    for name, ns in background(args).items():
        value = f"{ns:.1f}" if name == "spans per request" else f"{ns:,.0f} ns"
        rows.append((f"background: {name}", value, ""))
    rows.append(("background: export thread, build+export (per span)", f"{flush_ns:,.0f} ns", ""))
    rows.append(("reference: OTel SDK span start+end (per span)", f"{otel_sdk_reference(args):,.0f} ns", ""))

    print(
        f"budgetscope.instrument overhead -- {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}, best of {args.repeat}"
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  {'enabled':>12}  {'disabled':>12}")
    print(f"{'-' * width}  {'-' * 12}  {'-' * 12}")
    for name, a, b in rows:
        print(f"{name:<{width}}  {a:>12}  {b:>12}")


if __name__ == "__main__":
    main()
