"""Run a live scenario: engine, collector and load generator on loopback, then the budget report.

    collector (this process, OTLP/HTTP on a free port)  ◄── stage spans ── engine (subprocess, tiny model)
                    ▲                                                        ▲  HTTP + SSE (through the
                    └──────────── client spans ─── load generator (subprocess) ┘  delaying hop if any)

Every arrow is a real socket. The engine and the load generator export through the standard OTLP exporter
(`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); the collector acknowledges a batch once it is in the archive.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from budgetscope.analysis.attribution import tail_label
from budgetscope.analysis.report import build_report
from budgetscope.demo.scenarios import COMMON_LOAD, Scenario


class DemoError(RuntimeError):
    """A part of the demo did not start or stop; the message is one line."""


@dataclass(slots=True)
class ScenarioRun:
    scenario: Scenario
    archive: Path
    report: dict
    load_summary: str
    dominant: str | None  # dominant stage of the interactive tier's `scenario.metric` tail
    tail: str  # the same in words: the dominant stage, or `mixed (queue 50%, prefill 48%)`
    seconds: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _otlp_env(http_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{http_port}/v1/traces",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:{http_port}/v1/metrics",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "budgetscope.cli", *args]


def load_command(sc: Scenario, url: str, duration_s: float, *more: str) -> list[str]:
    """The `budgetscope load` command of a scenario against `url` (its client spans over OTLP, seed 1)."""
    return _cli(
        "load",
        url,
        "--rate",
        str(sc.rate),
        "--duration",
        str(duration_s),
        "--tiers",
        sc.tiers,
        "--spans",
        "otlp",
        "--seed",
        "1",
        *more,
        *COMMON_LOAD,
        *sc.load_args,
    )


def _tail(path: Path, n: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-n:])
    except OSError:
        return ""


def _wait_healthy(proc: subprocess.Popen, port: int, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoError(f"the engine exited with status {proc.returncode}: {_tail(log)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise DemoError(f"the engine did not answer /health within {timeout_s:.0f} s: {_tail(log)}")


def _stop(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    """SIGINT first (the engine flushes its spans on the way out), then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_scenario(
    sc: Scenario, out: Path, budgets, duration_s: float = 15.0, say: Callable[[str], None] = print, model: str = "tiny"
) -> ScenarioRun:
    """Run one scenario for `duration_s` of load; return its report (archive at out/<name>/).

    `model`: the engine's named config (`tiny` everywhere; `1b` on a GPU)."""
    # imported on use: duckdb 153 ms, concurrent.futures 92 ms, asyncio 89 ms to import
    from budgetscope.collector import Collector
    from budgetscope.demo.netdelay import DelayProxy
    from budgetscope.opener import Archive

    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    archive = out / sc.name  # a folder archive: the report and the dashboard can read it while it fills
    shutil.rmtree(archive, ignore_errors=True)
    engine_log = out / f"{sc.name}-engine.log"
    collector = Collector(archive, grpc_port=None, http_port=0)
    collector.start()
    env = _otlp_env(collector.http_port)
    port = free_port()
    proxy = None
    with open(engine_log, "w") as logf:
        engine = subprocess.Popen(
            _cli("engine", "serve", "--config", model, "--port", str(port), *sc.engine_args),
            env=env,
            stdout=logf,
            stderr=subprocess.STDOUT,
        )
    # GPU samples beside the spans when a GPU is there; without one the sampler says why in one line and exits.
    sampler = subprocess.Popen(
        _cli("gpu", "sample", "--otlp", "--every", "100ms"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_healthy(engine, port, engine_log)
        if sampler.poll() is not None:
            say(f"[{sc.name}] {(sampler.stderr.read().strip().splitlines() or ['no GPU sampler'])[-1]}")
        url = f"http://127.0.0.1:{port}"
        if sc.delay_ms:
            proxy = DelayProxy(port, sc.delay_ms, sc.slow_fraction).start()
            url = f"http://127.0.0.1:{proxy.port}"
        say(f"[{sc.name}] {sc.what}; {duration_s:g} s of load at {sc.rate:g} req/s")
        load = subprocess.run(
            load_command(sc, url, duration_s, "--out", str(out / f"{sc.name}-load.json")),
            env=env,
            capture_output=True,
            text=True,
            timeout=duration_s + 300,
        )
        if load.returncode != 0:
            raise DemoError(f"the load generator failed: {load.stderr.strip().splitlines()[-1:] or load.returncode}")
    finally:
        _stop(engine)
        _stop(sampler)
        if proxy is not None:
            proxy.stop()
        collector.stop()
    with Archive(archive, read_only=True) as a:
        report = build_report(a.con, budgets)
    tier = next((t for t in report["tiers"] if t["name"] == "interactive"), report["tiers"][0])
    attribution = tier["attribution"].get(sc.metric) or {}
    return ScenarioRun(
        sc, archive, report, load.stdout, attribution.get("dominant"), tail_label(attribution), time.perf_counter() - t0
    )
