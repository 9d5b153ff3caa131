"""The maintained OpenTelemetry Collector configurations: one for every server kit (traces and metrics), one
sharded; every component they name exists in a current otelcol-contrib, and no per-server copies drift apart."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "instrumentation"

# Component types of otelcol-contrib v0.144+ that these configs may use (from its builder manifest). The gRPC
# OTLP exporter is `otlp_grpc` there; `otlp` and `otlphttp` are deprecated aliases and must not be used.
CONTRIB = {
    "receivers": {"otlp", "prometheus", "hostmetrics"},
    "processors": {"batch", "memory_limiter", "resource", "attributes", "filter", "transform", "tail_sampling"},
    "exporters": {"otlp_grpc", "otlp_http", "loadbalancing", "debug", "file"},
}
DEPRECATED = {"exporters": {"otlp", "otlphttp"}}


def _load(name: str) -> dict:
    return yaml.safe_load((KIT / "otel-collector" / name).read_text())


@pytest.mark.parametrize("name", ["otelcol.yaml", "otelcol-sharded.yaml", "otelcol-slis.yaml"])
def test_components_exist_in_current_otelcol_contrib(name):
    cfg = _load(name)
    for kind, known in CONTRIB.items():
        for component in cfg.get(kind, {}):
            ctype = component.split("/")[0]
            assert ctype not in DEPRECATED.get(kind, ()), f"{name}: {kind} {component} is a deprecated name"
            assert ctype in known, f"{name}: unknown {kind[:-1]} type {ctype}"
    for signal, pipe in cfg["service"]["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipe.get(kind, []):
                assert component in cfg[kind], f"{name}: pipeline {signal} uses undefined {component}"


def test_the_maintained_config_carries_traces_and_metrics_to_budgetscope():
    cfg = _load("otelcol.yaml")
    pipes = cfg["service"]["pipelines"]
    assert set(pipes) == {"traces", "metrics"}  # GPU samples are OTLP gauges: a metrics pipeline
    for pipe in pipes.values():
        assert pipe["receivers"] == ["otlp"] and pipe["exporters"] == ["otlp_grpc/budgetscope"]
        assert pipe["processors"][0] == "memory_limiter"  # the Collector's rule: memory_limiter first
    assert cfg["exporters"]["otlp_grpc/budgetscope"]["endpoint"] == "127.0.0.1:14317"
    assert "--grpc-port 14317" in (KIT / "otel-collector" / "otelcol.yaml").read_text()


def test_the_slis_config_pulls_collects_metrics_endpoint_and_sends_otlp_metrics():
    """OTLP is push-only: the Collector pulls with its `prometheus` receiver (a Prometheus scrape job) and sends
    the result on as OTLP metrics; the target is collect's OTLP/HTTP port, where GET /metrics answers."""
    cfg = _load("otelcol-slis.yaml")
    (job,) = cfg["receivers"]["prometheus/budgetscope"]["config"]["scrape_configs"]
    assert (
        job["static_configs"] == [{"targets": ["127.0.0.1:14318"]}]
        and job.get("metrics_path", "/metrics") == "/metrics"
    )
    assert cfg["service"]["pipelines"] == {
        "metrics": {
            "receivers": ["prometheus/budgetscope"],
            "processors": ["memory_limiter", "batch"],
            "exporters": ["otlp_http/metrics"],
        }
    }
    assert "--http-port 14318" in (KIT / "otel-collector" / "otelcol-slis.yaml").read_text()


def test_one_config_not_a_copy_per_server():
    copies = sorted(p.relative_to(ROOT).as_posix() for p in KIT.glob("*/otelcol*.yaml"))
    assert copies == [
        "instrumentation/otel-collector/otelcol-sharded.yaml",
        "instrumentation/otel-collector/otelcol-slis.yaml",
        "instrumentation/otel-collector/otelcol.yaml",
    ]
    for readme in KIT.glob("*/README.md"):
        text = readme.read_text()
        if readme.parent.name != "otel-collector" and "otelcol" in text:
            assert "../otel-collector/otelcol.yaml" in text, readme
