"""Parity with the OpenTelemetry SDK's own OTLP JSON file exporter (`opentelemetry-exporter-otlp-json-file`): the
same spans and GPU gauges, written once by it and once by budgetscope's exporters (`jsonl:` spans,
`budgetscope gpu sample --out jsonl:`), ingest into the same rows.

The official exporter pins `opentelemetry-exporter-otlp-common` to another build than the OTLP/HTTP exporter
budgetscope installs, so it cannot live in the same environment: the test installs it (from the package
registry, pinned, `--no-deps`) into a folder of its own and runs the exporting side in a subprocess with that
folder first on its path. See docs/design.md, "Decisions"."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from budgetscope.ingest.files import read_batches
from budgetscope.opener import Archive
from conftest import rows

pytestmark = pytest.mark.slow

OFFICIAL = [
    "opentelemetry-exporter-otlp-json-file==0.66b1",
    "opentelemetry-exporter-otlp-json-common==0.66b1",
    "opentelemetry-proto-json==0.66b1",
    "opentelemetry-exporter-otlp-common==0.66b1",
]

EXPORT = textwrap.dedent("""
    import sys, time
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
    from opentelemetry.exporter.otlp.json.file.metric_exporter import FileMetricExporter
    from opentelemetry.sdk.metrics.export import (Gauge, Metric, MetricsData, NumberDataPoint, ResourceMetrics,
                                                  ScopeMetrics)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from budgetscope.instrument import ClientRequest, ClientTracer, Instrumentation
    from budgetscope.instrument.exporters import FanOutExporter
    from budgetscope.instrument.jsonl_exporter import OtlpJsonLinesExporter
    from budgetscope.instrument import gpu

    official, ours, official_gpu, ours_gpu = sys.argv[1:5]
    exporter = FanOutExporter([FileSpanExporter(official), OtlpJsonLinesExporter(ours)])
    instr = Instrumentation(service_name="parity-engine", exporter=exporter)
    for i in range(12):
        req = instr.start_request(model="tiny", tier=("interactive", "batch")[i % 2], tenant="acme" if i % 3 else None,
                                  traceparent=f"00-{i + 1:032x}-{i + 1:016x}-01" if i % 4 == 0 else None)
        req.mark("queue"); time.sleep(0.001)
        req.mark("prefill"); time.sleep(0.001)
        req.token(); req.mark("decode")
        for _ in range(3):
            time.sleep(0.0005); req.token()
        req.mark("postprocess")
        req.finish(input_tokens=10 + i, output_tokens=4, cached_tokens=i % 3)
    now = time.time_ns()
    instr.step(start_ns=now, end_ns=now + 1_000_000, batch_size=4, prefill_tokens=64, decode_seqs=3,
               kv_blocks_used=10, kv_blocks_total=100, queue_depth=2, preempted=0)
    instr.shutdown()
    tracer = ClientTracer(exporter=FanOutExporter([FileSpanExporter(official), OtlpJsonLinesExporter(ours)]))
    for i in range(4):
        t = time.time_ns()
        tracer.record(ClientRequest(i + 1, i + 1, scheduled_ns=t - 500, start_ns=t, end_ns=t + 9_000_000,
                                    first_token_ns=t + 2_000_000, itl_ms=(1.5, 2.5), status_code=200,
                                    output_tokens=3, input_tokens=11, tier="interactive", model="tiny",
                                    url="http://127.0.0.1:8000/v1/completions", operation="text_completion"))
    tracer.shutdown()

    points = [gpu.Point(now + k * 100_000_000, m, v, "GPU-1234", 0)
              for k in range(3) for m, v in ((gpu.HBM_USED, 4.0e9 + k), (gpu.POWER, 250.0 + k))]
    metrics = [Metric(m, None, gpu.UNITS[m], Gauge([NumberDataPoint(gpu._point_attrs(p), 0, p.ts_ns, p.value)
                                                    for p in ps])) for m, ps in gpu._group(points).items()]
    data = MetricsData([ResourceMetrics(Resource({"host.name": "node-1", "service.name": gpu.service_name()}),
                                        [ScopeMetrics(InstrumentationScope(gpu.SCOPE), metrics, "")], "")])
    FileMetricExporter(official_gpu).export(data)
    sink = gpu.JsonLinesSink(ours_gpu); sink.export(points, "node-1"); sink.close()
""")


@pytest.fixture(scope="module")
def official_exporter(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("otel-json-file")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), *OFFICIAL],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0:
        pytest.skip(f"the OTLP JSON file exporter is not installable here: {r.stderr.strip().splitlines()[-1:]}")
    return target


def _ingest(path: Path, archive: Path) -> None:
    with Archive(archive) as a:
        report = a.ingest(read_batches(path))
    assert not report.rejected, report.rejected


SPAN_COLUMNS = "trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, service_name, attributes, resource"
REQUEST_COLUMNS = (
    "trace_id, tier, tenant, model, outcome, arrival_ns, first_token_ns, end_ns, input_tokens, "
    "cached_tokens, output_tokens, queue_ms, prefill_ms, decode_ms, postprocess_ms, ttft_ms, e2e_ms, "
    "tpot_ms"
)


def test_official_otlp_json_file_exporter_ingests_like_budgetscope_exporters(official_exporter, tmp_path):
    files = [tmp_path / n for n in ("official.jsonl", "ours.jsonl", "official-gpu.jsonl", "ours-gpu.jsonl")]
    env = {"PYTHONPATH": f"{official_exporter}", "PATH": "/usr/bin:/bin", "OTEL_SERVICE_NAME": ""}
    r = subprocess.run(
        [sys.executable, "-c", EXPORT, *map(str, files)], capture_output=True, text=True, timeout=120, env=env
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        "exporter.otlp.json.file"
        in subprocess.run(  # the official exporter really wrote the file
            [sys.executable, "-c", "import opentelemetry.exporter.otlp.json.file as m; print(m.__name__)"],
            capture_output=True,
            text=True,
            env=env,
        ).stdout
    )
    for f in files:
        assert f.stat().st_size > 0, f
    for official, ours, name in ((files[0], files[1], "spans"), (files[2], files[3], "gpu")):
        _ingest(official, tmp_path / f"official-{name}")
        _ingest(ours, tmp_path / f"ours-{name}")
    a, b = tmp_path / "official-spans", tmp_path / "ours-spans"
    spans = rows(a, f"SELECT {SPAN_COLUMNS} FROM spans ORDER BY trace_id, span_id")
    assert len(spans) == 12 * 6 + 1 + 4  # root and five stages a request, a step, four client spans
    assert spans == rows(b, f"SELECT {SPAN_COLUMNS} FROM spans ORDER BY trace_id, span_id")
    requests = rows(a, f"SELECT {REQUEST_COLUMNS} FROM requests ORDER BY trace_id")
    assert len(requests) == 12 + 4 - 1  # a client span whose trace the server joined makes one request with it
    assert requests == rows(b, f"SELECT {REQUEST_COLUMNS} FROM requests ORDER BY trace_id")
    gpu_cols = "*"
    assert rows(tmp_path / "official-gpu", f"SELECT {gpu_cols} FROM gpu_samples ORDER BY ALL") == rows(
        tmp_path / "ours-gpu", f"SELECT {gpu_cols} FROM gpu_samples ORDER BY ALL"
    )
    assert rows(tmp_path / "official-gpu", "SELECT count(*) FROM gpu_samples") == [(6,)]
