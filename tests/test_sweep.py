"""`budgetscope sweep`: bad input ends in one line and exit 2 with the archive untouched; on the CPU `tiny` engine a
short sweep shows the cliff for real (queueing small at a low rate, dominant past capacity, attainment falling)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fake_refusing_server import refusing

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = """[tiers.interactive]
percentile = 99
ttft_ms = 250
e2e_ms = 3000

[tiers.interactive.stages]
queue = 100
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sweep(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "budgetscope.cli", "sweep", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _snapshot(path: Path) -> dict:
    """Every file under path with its bytes (a missing path is {})."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture()
def budgets(tmp_path) -> Path:
    p = tmp_path / "budgets.toml"
    p.write_text(BUDGETS)
    return p


@pytest.fixture()
def archive(tmp_path) -> Path:
    """An existing folder archive with something in it, which a refused sweep must leave as it was."""
    dest = tmp_path / "cap"
    shutil.copytree(ROOT / "sample_traces" / "calm", dest)
    return dest


@pytest.fixture()
def refusing_url():
    with refusing() as url:
        yield url


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rates", "1,4,2"], "rates must be increasing (2 comes after 4)"),
        (["--rates", "2,2"], "rates must be increasing"),
        (["--rates", "0,1"], "every rate must be a positive number"),
        (["--rates", "1,x"], "expected numbers separated by commas"),
        ([], "give --rates R1,R2,…, --concurrency C1,C2,… or --search (one of them)"),
        (["--rates", "1,2", "--search"], "give --rates R1,R2,…, --concurrency C1,C2,… or --search (one of them)"),
        (["--rates", "1,2", "--concurrency", "1,2"], "give --rates R1,R2,…, --concurrency C1,C2,… or --search"),
        (["--concurrency", "4,2"], "--concurrency '4,2': levels must be increasing (2 comes after 4)"),
        (["--concurrency", "0,2"], "give requests in flight >= 1"),
        (["--concurrency", "1.5"], "expected whole numbers separated by commas"),
        (["--concurrency", "1,2", "--arrivals", "constant"], "a --concurrency sweep has no arrival process"),
        (["--concurrency", "1,2", "--warmup", "ten"], "--warmup 'ten': give a number of requests (20) or of seconds"),
        (["--rates", "1", "--dataset", "/nonexistent/prompts.json"], "/nonexistent/prompts.json"),
    ],
)
def test_bad_rates_are_one_line_and_leave_the_archive_unchanged(budgets, archive, args, message):
    before = _snapshot(archive)
    r = _sweep("http://127.0.0.1:9", "--budgets", str(budgets), "--archive", str(archive), *args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("budgetscope: ") and message in r.stderr
    assert "Traceback" not in r.stderr
    assert _snapshot(archive) == before


def test_budgets_without_tiers_is_one_line(tmp_path, archive):
    empty = tmp_path / "empty.toml"
    empty.write_text("# no tiers\n")
    before = _snapshot(archive)
    r = _sweep("http://127.0.0.1:9", "--budgets", str(empty), "--archive", str(archive), "--rates", "1,2")
    assert r.returncode == 2
    assert r.stderr == f"budgetscope: {empty}: no tiers (add a [tiers.<name>] table)\n"
    assert _snapshot(archive) == before


def test_a_target_that_refuses_every_request_is_one_line(budgets, archive, refusing_url, tmp_path):
    before = _snapshot(archive)
    r = _sweep(refusing_url, "--budgets", str(budgets), "--archive", str(archive), "--rates", "1,2", "--otlp-port", "0")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(
        f"budgetscope: {refusing_url}/v1/completions refused every request of the pre-flight (3 of 3): http_429"
    )
    assert r.stderr.count("\n") == 1
    assert _snapshot(archive) == before
    new = tmp_path / "never-made"  # nor is a new archive made
    r = _sweep(refusing_url, "--budgets", str(budgets), "--archive", str(new), "--search", "--otlp-port", "0")
    assert r.returncode == 2 and not new.exists()


def test_an_unreachable_target_is_one_line(budgets, tmp_path):
    new = tmp_path / "cap"
    r = _sweep(f"http://127.0.0.1:{_free_port()}", "--budgets", str(budgets), "--archive", str(new), "--rates", "1")
    assert r.returncode == 2
    assert r.stderr.startswith("budgetscope: cannot reach") and r.stderr.count("\n") == 1
    assert not new.exists()


@contextlib.contextmanager
def _tiny_engine(**otel: str):
    """`engine serve --config tiny` with four slots on a free port, exporting its spans to a free OTLP port (the
    sweep's collector), with `otel` as more OTEL_ settings: yields (url, otlp_port)."""
    otlp_port, engine_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://127.0.0.1:{otlp_port}/v1/traces",
        **otel,
    )
    engine = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "budgetscope.cli",
            "engine",
            "serve",
            "--config",
            "tiny",
            "--port",
            str(engine_port),
            "--threads",
            "1",
            "--max-seqs",
            "4",
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{engine_port}/health", timeout=1).read()
                break
            except OSError:
                assert time.monotonic() < deadline and engine.poll() is None, "the engine did not start"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{engine_port}", otlp_port
    finally:
        engine.terminate()
        engine.wait(30)


@pytest.mark.slow
def test_tiny_engine_sweep_shows_the_cliff(budgets, tmp_path):
    """Four slots, 128-token outputs (capacity ~9 req/s on our 2 cores, more on a faster CI machine): at 2 req/s every
    budget holds and the tail queues little; 48 req/s is well past capacity on any of
    them (with 64-token outputs 24 req/s was not: a faster 2-core CI machine kept 0.91 of its requests there, so its
    capacity is about 1.4x ours; 48 req/s is 5x ours), queueing takes the TTFT tail and attainment falls (0.03
    here)."""
    pytest.importorskip("torch")
    cap = tmp_path / "cap"
    with _tiny_engine() as (url, otlp_port):
        r = _sweep(
            url,
            "--budgets",
            str(budgets),
            "--archive",
            str(cap),
            "--rates",
            "2,48",
            "--duration",
            "5",
            "--otlp-port",
            str(otlp_port),
            "--prompt-format",
            "token-ids",
            "--prompt-tokens",
            "64",
            "--output-tokens",
            "128",
            "--timeout",
            "20",
            "--format",
            "json",
            timeout=180,
        )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    low, high = res["points"]
    assert (low["rate_rps"], high["rate_rps"]) == (2.0, 48.0)
    # the pre-flight's three requests went unsampled: the engine exported no span of them, so every server row
    # has its client span (before, three server-only rows put the whole tier on server figures)
    from conftest import rows

    assert rows(cap, "SELECT count(*), count(*) FILTER (WHERE NOT has_client_span) FROM requests")[0][1] == 0
    assert res["steps"][0]["tiers"][0]["metrics"]["ttft_ms"]["column"] == "client_ttft_ms"
    lo, hi = low["tiers"]["interactive"], high["tiers"]["interactive"]
    # the server's stages joined the client spans: the shares hold queue and prefill, not only "unaccounted"
    assert set(lo["ttft_shares"]) == {"network", "frontend", "queue", "prefill", "unaccounted"}
    # at 2 req/s the tail is a few ms over the body, so the shares of that excess are noise (one run in CI had queue
    # at 0.53 of it; ours range from -0.02 to 0.14). Queueing's share of the tail requests' own TTFT at 2 req/s is
    # no steadier: 5 % on a quiet machine, 37 % once at load 12, 60 % once in CI (98 ms of 161), when the other
    # work on the two cores took most of the engine's capacity. What holds on any machine is the size of the step:
    # past capacity the tail's queueing is most of its TTFT and two orders of magnitude longer (11,184 ms in that
    # same CI run), so the test asks for most of it and for a tenfold step
    tail = res["steps"][0]["tiers"][0]["attribution"]["ttft"]["tail_mean_ms"]
    tail_high = res["steps"][1]["tiers"][0]["attribution"]["ttft"]["tail_mean_ms"]
    high_share = tail_high["queue"] / sum(tail_high.values())
    assert high_share > 0.5 and tail_high["queue"] > 10 * max(tail["queue"], 1.0), (tail, tail_high)
    assert lo["keeps"] and lo["attainment"] == 1.0
    assert hi["ttft_dominant"] == "queue" and hi["ttft_shares"]["queue"] > 0.5, hi
    # well past capacity attainment falls far under the 99 % target (0.03 on our machine)
    assert hi["attainment"] < 0.9 and not hi["keeps"]
    tier = res["tiers"][0]
    assert (tier["capacity_rps"], tier["first_break_rps"], tier["knee_rps"]) == (2.0, 48.0, 2.0)
    assert tier["takeover"]["stage"] == "queue" and tier["takeover"]["above_rps"] == 2.0
    assert "Above 2 req/s queue is" in tier["verdict"]
    steps = res["steps"]
    assert steps[0]["signals"]["source"] == "engine_steps"
    assert steps[1]["signals"]["queue_max"] > steps[0]["signals"]["queue_max"]
    # the table form of the same archive, as the dashboard reads it
    from budgetscope.analysis import capacity
    from budgetscope.analysis.budgets import load_budgets
    from budgetscope.opener import Archive

    with Archive(cap, read_only=True, create=False) as a:
        again = capacity.analyze(a.con, load_budgets(budgets))
    assert again["tiers"][0]["capacity_rps"] == 2.0 and again["run"] == res["run"]


@pytest.mark.slow
def test_each_step_is_read_once_a_server_batching_every_5_s_has_sent_its_spans(budgets, tmp_path):
    """The engine exports as vLLM, SGLang and TGI do, every 5 s (the OpenTelemetry SDK's default): each of three
    steps is read with every request's server spans joined to its client's, so no tail is called `unaccounted`
    for want of them. Before, a step was read once its counts had not moved for 1.5 s, so it could be read between two
    of the server's batches: three runs of this test with that rule all failed."""
    pytest.importorskip("torch")
    cap = tmp_path / "cap"
    with _tiny_engine(OTEL_BSP_SCHEDULE_DELAY="5000") as (url, otlp_port):
        r = _sweep(
            url,
            *("--budgets", str(budgets), "--archive", str(cap), "--rates", "4", "--runs", "3", "--duration", "1"),
            *("--otlp-port", str(otlp_port), "--prompt-format", "token-ids", "--prompt-tokens", "32"),
            *("--output-tokens", "8", "--format", "json"),
            timeout=180,
        )
    assert r.returncode == 0, r.stderr
    steps = json.loads(r.stdout)["steps"]
    assert len(steps) == 3 and "one side's spans only" not in r.stderr
    for s in steps:
        cov = s["coverage"]
        assert cov["requests"] == cov["with_both"] == s["sent"] > 0, cov
        assert s["tiers"][0]["attribution"]["ttft"]["dominant"] != "unaccounted", s["tiers"][0]["attribution"]


@pytest.mark.slow
def test_tiny_engine_concurrency_sweep_with_warmup_repeats_and_plots(budgets, tmp_path):
    """`--concurrency 1,8 --repeats 2 --warmup 2 --plots`: four closed-loop steps; each step's two warm-up
    requests reach the archive untagged (in no step), the points are concurrencies, each tier says what each
    repeat found, and the chart is a self-contained HTML file. Figures are not asserted: only what the sweep is."""
    pytest.importorskip("torch")
    pytest.importorskip("plotly")
    cap, plots = tmp_path / "cap", tmp_path / "plots"
    with _tiny_engine() as (url, otlp_port):
        r = _sweep(
            url,
            "--budgets",
            str(budgets),
            "--archive",
            str(cap),
            "--concurrency",
            "1,8",
            "--repeats",
            "2",
            "--warmup",
            "2",
            "--duration",
            "2",
            "--otlp-port",
            str(otlp_port),
            "--prompt-format",
            "token-ids",
            "--prompt-tokens",
            "32",
            "--output-tokens",
            "16",
            "--timeout",
            "30",
            "--plots",
            str(plots),
            "--format",
            "json",
            timeout=240,
        )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["mode"] == "concurrency" and res["unit"] == "concurrent requests"
    assert [p["concurrency"] for p in res["points"]] == [1, 8] and [p["runs"] for p in res["points"]] == [2, 2]
    assert all(p["rate_rps"] is None for p in res["points"])
    assert sorted((s["concurrency"], s["repeat"]) for s in res["steps"]) == [(1, 0), (1, 1), (8, 0), (8, 1)]
    tier = res["tiers"][0]
    assert tier["unit"] == "concurrent requests" and len(tier["repeats"]["by_repeat"]) == 2
    assert "capacity_concurrency" in tier and "capacity_rps" not in tier
    from budgetscope.analysis.capacity import RUN
    from budgetscope.loadgen.runner import CLIENT_WARMUP
    from budgetscope.opener import Archive

    with Archive(cap, read_only=True, create=False) as a:
        warm, tagged = a.con.execute(f"""SELECT count_if(attributes->>'{CLIENT_WARMUP}' = 'true'),
            count_if(attributes->>'{CLIENT_WARMUP}' = 'true' AND (attributes->>'{RUN}') IS NOT NULL)
            FROM spans WHERE source = 'client'""").fetchone()
    assert (warm, tagged) == (8, 0)  # 2 a step, none of them in a step
    html = (plots / "capacity-interactive.html").read_text()
    assert "plotly" in html.lower() and "concurrency (requests in flight)" in html and len(html) > 1_000_000
    assert f"wrote {plots / 'capacity-interactive.html'}" in r.stderr


def test_plots_without_plotly_is_one_line_and_leaves_the_archive_unchanged(budgets, archive):
    before = _snapshot(archive)
    code = "import sys\nsys.modules['plotly'] = None\nfrom budgetscope.cli import main\nmain(prog_name='budgetscope')"
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "sweep",
            "http://127.0.0.1:9",
            "--budgets",
            str(budgets),
            "--archive",
            str(archive),
            "--concurrency",
            "1,2",
            "--plots",
            str(archive / "plots"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr == (
        "budgetscope: sweep --plots needs the 'dashboard' extra (plotly is not installed): "
        "pip install 'budgetscope[dashboard]'\n"
    )
    assert _snapshot(archive) == before


@pytest.mark.parametrize("levels", [{"rates": [4.0]}, {"concurrencies": [2]}])
def test_each_step_sends_the_dataset_prompts(levels):
    """`sweep --dataset`: every step's plan (open or closed loop, the closed one as it grows) takes the dataset's
    prompts and lengths."""
    from budgetscope.loadgen import Distribution, Mix, Workload
    from budgetscope.loadgen.dataset import Dataset, DatasetPrompt
    from budgetscope.sweep.runner import Sweep, SweepConfig

    data = Dataset("d.jsonl", [DatasetPrompt("one two three", 3, 7), DatasetPrompt("four", 1, 2)], 0, True)
    workload = Workload(Distribution.parse("16"), Distribution.parse("5"), Mix.parse(None), Mix.parse(None))
    cfg = SweepConfig(
        url="http://127.0.0.1:9",
        archive="unused",
        budgets=None,
        workload=workload,
        dataset=data,
        duration_s=5.0,
        **levels,
    )
    plan = Sweep(cfg)._plan((cfg.rates or cfg.concurrencies)[0], 0)
    requests = plan.requests + (plan.more(6) if plan.more else [])
    assert len(requests) >= 8
    assert {(r.prompt, r.prompt_tokens, r.output_tokens) for r in requests} == {("one two three", 3, 7), ("four", 1, 2)}
    assert plan.is_closed_loop == bool(cfg.concurrencies)
