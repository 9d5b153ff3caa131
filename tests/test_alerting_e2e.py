"""End to end, every part real, on loopback: the reference engine (CPU, `tiny` model) is driven into a queueing
burst by `budgetscope load`; a `budgetscope collect --budgets` receives both sides' spans and serves the live SLIs;
a real Prometheus (Debian's package) scrapes it every second and evaluates `budgetscope rules --window-scale 1/60`
(the Workbook's hour is a minute); the page alert fires, its annotations name queue as the tail's dominant stage,
and the `budgetscope report` command it gives, run as given, finds the same."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from budgetscope.demo.live import _otlp_env, free_port, load_command
from budgetscope.demo.scenarios import SCENARIOS

pytest.importorskip("torch")
PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus missing: `apt-get install prometheus`"),
]
DEMO = Path(__file__).resolve().parent.parent / "budgetscope" / "data" / "demo_budgets.toml"
SCALE = 1 / 60


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "budgetscope.cli", *args]


def _get(url: str, timeout: float = 2):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def _wait(what: str, predicate, timeout_s: float, procs=()) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return
        except OSError:
            pass
        for name, p, log in procs:
            assert p.poll() is None, f"{name} exited ({p.returncode}): {Path(log).read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _page_alerts(port: int) -> list[dict]:
    _, body = _get(f"http://127.0.0.1:{port}/api/v1/alerts")
    return [
        a
        for a in json.loads(body)["data"]["alerts"]
        if a["labels"]["alertname"] == "BudgetscopeBudgetBurnPage" and a["state"] == "firing"
    ]


def test_a_queueing_burst_pages_and_the_page_names_queue(tmp_path):
    archive, budgets = tmp_path / "archive", tmp_path / "budgets.toml"
    budgets.write_text(DEMO.read_text())
    collect_port, engine_port, prom_port = free_port(), free_port(), free_port()
    logs = {n: tmp_path / f"{n}.log" for n in ("collect", "engine", "prometheus")}
    rules = subprocess.run(
        _cli("rules", "--budgets", str(budgets), "-o", str(tmp_path / "rules.yml"), "--window-scale", repr(SCALE))
        + ["--archive", str(archive)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rules.returncode == 0, rules.stderr
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [rules.yml]\n"
        "scrape_configs:\n"
        f"  - job_name: budgetscope\n    static_configs: [{{targets: ['127.0.0.1:{collect_port}']}}]\n"
    )
    procs = []
    sc = SCENARIOS["burst"]
    env = _otlp_env(collect_port)
    try:
        collect = subprocess.Popen(
            _cli(
                "collect",
                "-a",
                str(archive),
                "--budgets",
                str(budgets),
                "--no-grpc",
                "--http-port",
                str(collect_port),
                # longer than the exporters' batch delay (the SDK's 5 s): with 1 s, a request whose client span
                # came before its server spans was counted as a client-only row, its TTFT all unaccounted, and on
                # a busy machine (the suite's other worker) the page named `unaccounted` (2 runs in 3 with two
                # CPU-bound processes beside it; 0 in 3 with 8 s)
                "--sli-settle",
                "8s",
                "--attribution-window",
                "60s",
                "--attribution-every",
                "2s",
            ),
            stdout=subprocess.DEVNULL,
            stderr=open(logs["collect"], "w"),  # noqa: SIM115 - closed with the process
        )
        procs.append(("collect", collect, logs["collect"]))
        _wait("collect's /metrics", lambda: _get(f"http://127.0.0.1:{collect_port}/metrics")[0] == 200, 60, procs)
        prometheus = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(logs["prometheus"], "w"),  # noqa: SIM115 - closed with the process
            cwd=tmp_path,
        )
        procs.append(("prometheus", prometheus, logs["prometheus"]))
        engine = subprocess.Popen(
            _cli("engine", "serve", "--config", "tiny", "--port", str(engine_port), *sc.engine_args),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(logs["engine"], "w"),  # noqa: SIM115 - closed with the process
        )
        procs.append(("engine", engine, logs["engine"]))
        _wait("the engine", lambda: _get(f"http://127.0.0.1:{engine_port}/health")[0] == 200, 180, procs)
        _wait("Prometheus", lambda: _get(f"http://127.0.0.1:{prom_port}/-/ready")[0] == 200, 60, procs)
        load = subprocess.Popen(
            load_command(sc, f"http://127.0.0.1:{engine_port}", 25),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(("load", load, os.devnull))
        fired: list[dict] = []

        def paged() -> bool:  # annotations are expanded at every evaluation: once the gauges have the burst
            fired[:] = [
                a
                for a in _page_alerts(prom_port)
                if a["labels"]["figure"] in ("ttft", "queue") and a["annotations"]["dominant_stage"] != "unknown"
            ]
            return bool(fired)

        _wait("the page alert", paged, 90, [p for p in procs if p[0] != "load"])
        alert = fired[0]
        print(json.dumps(alert, indent=1, ensure_ascii=False))  # the page as Alertmanager would get it (pytest -s)
        ann = alert["annotations"]
        assert alert["labels"]["severity"] == "page" and alert["labels"]["tier"] == "interactive"
        assert ann["dominant_stage"] == "queue", ann
        assert " queue " in ann["summary"] and "burning at" in ann["summary"], ann["summary"]
        assert ann["report"].startswith(f"budgetscope report --archive {archive} --budgets {budgets} --since ")
        # the window it names holds the burst: run the command as the page gives it. Run at once, the requests at
        # the window's end may have one side's spans only (the exporters batch them for 5 s): a tail of client-only
        # rows reads as `unaccounted` (once in CI), and the report says so in a warning, naming
        # when to run it again; run it again then, as the engineer paged would
        deadline = time.monotonic() + 90
        while True:
            report = subprocess.run(
                _cli(*shlex.split(ann["report"])[1:], "--format", "json"), capture_output=True, text=True, timeout=120
            )
            assert report.returncode == 1, report.stderr  # BROKEN
            rep = json.loads(report.stdout)
            if rep["in_flight"] is None:
                break
            print(report.stderr.strip())
            assert "the archive is being written" in report.stderr and "run the report again in 10 s" in report.stderr
            assert time.monotonic() < deadline, "the window's requests never landed whole"
            time.sleep(rep["in_flight"]["settle_s"])
        (tier,) = rep["tiers"]
        assert tier["attribution"]["ttft"]["dominant"] == "queue"
        assert tier["burn_rates"]["figures"]["ttft"]["period"]["burn_rate"] > 1
    finally:
        for _, p, _ in reversed(procs):
            _stop(p)
