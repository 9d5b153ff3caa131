"""The OpenTelemetry conventions budgetscope's emitters follow: OTEL_SERVICE_NAME, OTEL_SDK_DISABLED, the
http/json exporter protocol, and the GenAI semantic conventions on the spans it emits."""

from __future__ import annotations

from budgetscope.instrument import gpu


def _resource(doc: dict) -> dict:
    return {a["key"]: a["value"]["stringValue"] for a in doc["resourceMetrics"][0]["resource"]["attributes"]}


def _point() -> gpu.Point:
    return gpu.Point(1_700_000_000_000_000_000, gpu.HBM_USED, 1.0e9, "GPU-0", 0)


def test_gpu_exporter_honours_otel_service_name(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    assert _resource(gpu.otlp_json([_point()], "node-1"))["service.name"] == "budgetscope-gpu"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gpu-fleet-a")
    assert _resource(gpu.otlp_json([_point()], "node-1")) == {"host.name": "node-1", "service.name": "gpu-fleet-a"}
