"""The cost of `collect --budgets`'s live SLIs (docs/alerting.md), against the targets of issue 35: a scrape of
/metrics every 15 s costs at most 1 % of the collector's CPU at 100,000 spans/s; a gauge is at most 30 s older
than the last landed commit.

    python benchmarks/bench_slis.py [--window-requests 1000000] [--live-requests 150000]
    python benchmarks/bench_slis.py --only steady [--steady-window 8571428] [--steady-live 1000000]

1. scrape: a real `budgetscope collect --budgets` process (two tiers, every figure budgeted) after 20,000
   requests; its CPU (from /proc) over 300 scrapes of GET /metrics, less its CPU idling as long.
2. counting: `SliCounters` fed as at 100,000 spans/s (14,300 requests a commit, one commit a second, rows waiting
   the default 10 s): CPU a commit.
3. attribution: `AttributionGauges.refresh` over a 10-minute window holding --window-requests requests (built
   through the real ingest, arriving over the last 10 minutes): wall and CPU seconds a refresh; and the same with
   the archive as if being written (its last commit 1 s before the refresh: the scans for requests in flight run).
4. live: bench_collector's eight exporters send --live-requests requests (7 spans each) over OTLP/HTTP JSON to an
   in-process collector with the budgets, scraped every second meanwhile: stored spans/s, the collector's CPU,
   the largest `budgetscope_attribution_lag_seconds` seen; and the same run without budgets.
5. steady (only when asked: about 25 minutes): the window full from the start. --steady-window requests (default:
   ten minutes at 100,000 spans/s, 60M spans) built through the real ingest, arriving over ten minutes that end
   150 s into the live run (none leaves the window), then --steady-live more sent live as in 4 to a collector that
   opens that archive: stored spans/s,
   the collector's CPU, each refresh's wall time, the largest lag, and how many requests the window held at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import httpx
import pyarrow as pa

from budgetscope.analysis.budgets import parse_budgets
from budgetscope.archive import manifest as mf
from budgetscope.collector.attribution_gauges import AttributionGauges
from budgetscope.collector.sli import COLUMNS, SliCounters
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from common import free_port, machine

BUDGETS_TEXT = """
[tiers.interactive]
percentile = 99
ttft_ms = 800
tpot_ms = 50
e2e_ms = 12000
[tiers.interactive.stages]
network = 50
frontend = 30
queue = 250
prefill = 470
decode = 9000
postprocess = 50
[tiers.batch]
percentile = 95
ttft_ms = 5000
e2e_ms = 30000
"""
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _post_lines(port: int, path: Path) -> None:
    with httpx.Client(timeout=120) as client:
        for line in path.read_bytes().splitlines():
            if line.strip():
                r = client.post(
                    f"http://127.0.0.1:{port}/v1/traces", content=line, headers={"content-type": "application/json"}
                )
                r.raise_for_status()


def scrape(out: Path, budgets_file: Path) -> float:
    """CPU seconds of the collector process a scrape (idle CPU taken off)."""
    archive = out / "slis-scrape"
    shutil.rmtree(archive, ignore_errors=True)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "budgetscope.cli", "collect", "-a", str(archive), "--budgets", str(budgets_file)]
        + ["--no-grpc", "--http-port", str(port), "--sli-settle", "0", "--attribution-every", "1s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "collect did not start"
                time.sleep(0.2)
        traces = out / "slis-scrape.jsonl"
        write_jsonl(
            traces, SyntheticSpec(num_requests=20_000, tiers=("interactive", "batch"), start_ns=time.time_ns() - 60e9)
        )
        _post_lines(port, traces)
        time.sleep(4)  # derived, counted, the gauges computed
        body = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
        idle0, t0 = _cpu_of(proc.pid), time.perf_counter()
        time.sleep(5)
        idle = (_cpu_of(proc.pid) - idle0) / (time.perf_counter() - t0)
        n = 300
        with httpx.Client() as client:
            c0, t0 = _cpu_of(proc.pid), time.perf_counter()
            for _ in range(n):
                client.get(f"http://127.0.0.1:{port}/metrics").raise_for_status()
            spent, took = _cpu_of(proc.pid) - c0, time.perf_counter() - t0
        per = max(0.0, spent - idle * took) / n
        print(
            f"scrape: {series:,} series, {len(body) / 1e3:.0f} kB; collector CPU {1e3 * per:.2f} ms a scrape "
            f"(300 scrapes in {took:.1f} s: {spent:.2f} CPU-s, less idle {idle:.3f} CPU-s/s); every 15 s: "
            f"{per / 15:.5f} CPU-s/s"
        )
        return per
    finally:
        proc.terminate()
        proc.wait(60)


def counting() -> float:
    """CPU seconds a commit of 14,300 requests, rows waiting 10 s."""
    budgets = parse_budgets(BUDGETS_TEXT)
    sli = SliCounters(budgets)
    import random

    rng = random.Random(1)
    n = 14_300
    empty = pa.table({"trace_id": pa.array([], pa.string())})

    def rows(k: int) -> pa.Table:
        cols = {"trace_id": [f"{k:08x}{i:024x}" for i in range(n)]}
        for c in COLUMNS:
            if c == "outcome":
                cols[c] = [rng.choice(["ok"] * 50 + ["error"]) for _ in range(n)]
            elif c == "tier":
                cols[c] = [rng.choice(["interactive", "batch"]) for _ in range(n)]
            elif c in ("model", "tenant", "service_name", "source"):
                cols[c] = pa.array([None] * n, pa.string())
            else:
                cols[c] = [rng.lognormvariate(4, 1) for _ in range(n)]
        return pa.table(cols)

    batches = [rows(k) for k in range(40)]
    times = []
    for k, b in enumerate(batches):
        c0 = time.process_time()
        sli.observe(b, b.select(["trace_id"]), empty, now_ns=k * 10**9)
        times.append(time.process_time() - c0)
    steady = times[12:]  # once rows are counted every commit
    per = statistics.median(steady)
    print(
        f"counting: {n:,} requests a commit (100,000 spans/s at 7 spans a request), {sli.waiting:,} rows waiting: "
        f"CPU {1e3 * per:.0f} ms a commit (median of {len(steady)}; {1e3 * min(steady):.0f}–{1e3 * max(steady):.0f})"
    )
    return per


def attribution(out: Path, n: int) -> None:
    archive = out / f"slis-window-{n}"
    if not (archive / "manifest.json").exists():
        from budgetscope.ingest.files import read_batches
        from budgetscope.opener import Archive

        traces = out / f"slis-window-{n}.jsonl"
        t = time.perf_counter()
        write_jsonl(
            traces,
            SyntheticSpec(
                num_requests=n, tiers=("interactive", "batch"), rate_per_s=n / 600, start_ns=time.time_ns() - 600e9
            ),
        )
        with Archive(archive) as a:
            a.ingest(read_batches(traces))
        traces.unlink()
        print(f"attribution: built {n:,} requests in {time.perf_counter() - t:.0f} s")
    gauges = AttributionGauges(archive, parse_budgets(BUDGETS_TEXT), window_s=10**9)  # the whole archive
    committed = mf.read(archive).committed_ns
    for how, now in (("", committed + 3600 * 10**9), (" as if being written", committed + 10**9)):
        walls, cpus = [], []
        for _ in range(4):
            c0, t0 = time.process_time(), time.perf_counter()
            assert gauges.refresh(now_ns=now)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        print(
            f"attribution: a refresh over {n:,} requests (a 10-minute window at {n / 600 * 7:,.0f} spans/s){how}: "
            f"wall {walls[0]:.2f} s first, {statistics.median(walls[1:]):.2f} s warm median; CPU "
            f"{statistics.median(cpus[1:]):.2f} s"
        )


def _watch_lags(found: dict, lags: list[float], stop: threading.Event) -> None:
    """The collector's /metrics every second, as a scraper would: each `budgetscope_attribution_lag_seconds`."""
    while not stop.wait(1.0):
        port = found.get("port")
        if not port:
            continue
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        except httpx.HTTPError:
            continue
        for line in text.splitlines():
            if line.startswith("budgetscope_attribution_lag_seconds "):
                lags.append(float(line.split()[1]))


def live(out: Path, n: int) -> None:
    import bench_collector as bc

    traces = out / f"slis-live-{n}.jsonl"
    write_jsonl(
        traces,
        SyntheticSpec(num_requests=n, tiers=("interactive", "batch"), start_ns=time.time_ns() - 120 * 10**9),
    )
    lines = [line for line in traces.read_bytes().splitlines() if line.strip()]
    spans = n * 7
    for label, budgets in (("without budgets", None), ("with budgets", parse_budgets(BUDGETS_TEXT))):
        lags: list[float] = []
        stop = threading.Event()
        options = {} if budgets is None else {"budgets": budgets}
        found: dict = {}

        watcher = threading.Thread(target=_watch_lags, args=(found, lags, stop), daemon=True)
        load = os.getloadavg()[0]
        watcher.start()
        answered, stored, cpu, _ = bc.run(lines, "http", 8, out / "slis-live", options, found)
        stop.set()
        print(
            f"live {label}: {spans:,} spans; stored {spans / stored:,.0f} spans/s (answered {spans / answered:,.0f}); "
            f"collector CPU {cpu:.1f} s ({cpu / spans * 1e6:.1f} µs a span)"
            + (f"; attribution lag max {max(lags):.1f} s over {len(lags)} scrapes" if lags else "")
            + f"; load {load:.1f} before, {os.getloadavg()[0]:.1f} after"
        )


def _chunk(args: tuple) -> Path:
    """One part of the full window as a trace file (a process of its own, ahead of the ingest)."""
    path, n, start_ns, seed = args
    write_jsonl(
        path,
        SyntheticSpec(num_requests=n, tiers=("interactive", "batch"), rate_per_s=RATE, start_ns=start_ns, seed=seed),
    )
    return path


RATE = 100_000 / 7
"""Requests a second at 100,000 spans/s (7 spans a request)."""


def steady(out: Path, window: int, n: int, lead_s: float) -> None:
    """The lag with the window full: `window` requests arriving at 100,000 spans/s over ten minutes (built through
    the real ingest, in parts, ending 150 s after the live run is to start: every one of them stays in the window
    to its end), then `n` more sent live to a collector that opens the archive (exporters as fast as it answers).
    The window holds `window` requests and more throughout."""
    import multiprocessing as mp

    import bench_collector as bc
    from budgetscope.archive.reader import ArchiveReader
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    t_live = time.time_ns() + int(lead_s * 1e9)  # when the live run is to start, the window built
    ahead = 150 * 10**9  # the window's arrivals end this long after it: all of them stay in it to the run's end
    archive = out / "slis-steady"
    shutil.rmtree(archive, ignore_errors=True)
    part = 500_000
    parts = [
        (
            out / f"slis-steady-{k}.jsonl",
            min(part, window - k * part),
            t_live + ahead - 600 * 10**9 + int(k * part / RATE * 1e9),
            k + 1,
        )
        for k in range((window + part - 1) // part)
    ]
    t = time.perf_counter()

    def batches(paths):
        for p in paths:
            yield from read_batches(p)
            p.unlink()

    with mp.get_context("spawn").Pool(1) as pool, Archive(archive) as a:
        a.ingest(batches(pool.imap(_chunk, parts)))
    built = time.perf_counter() - t
    early = (t_live - time.time_ns()) / 1e9
    print(f"steady: built {window:,} requests ({window * 7:,} spans) in {built:.0f} s; {early:+.0f} s to the live run")
    if early > 0:
        time.sleep(early)
    # the live spans, made now, start two minutes from now: after the collector has opened the archive (a span
    # older than its opening would be looked for among the published segments as a late span of a forgotten trace)
    traces = out / "slis-steady-live.jsonl"
    t = time.perf_counter()
    start_ns = time.time_ns() + 120 * 10**9
    spec = SyntheticSpec(num_requests=n, tiers=("interactive", "batch"), rate_per_s=RATE, start_ns=start_ns, seed=999)
    write_jsonl(traces, spec)
    lines = [line for line in traces.read_bytes().splitlines() if line.strip()]
    traces.unlink()
    made_s = time.perf_counter() - t
    if time.time_ns() > start_ns - 20 * 10**9:
        sys.exit(f"making the live requests took {made_s:.0f} s: their spans would start before the collector opens")
    print(f"steady: {n:,} live requests made in {made_s:.0f} s")
    refreshes: list[float] = []
    plain = AttributionGauges.refresh

    def timed(self, now_ns=None):  # the wall time of each refresh, for the print below
        t0 = time.perf_counter()
        ok = plain(self, now_ns)
        refreshes.append(time.perf_counter() - t0)
        return ok

    AttributionGauges.refresh = timed
    lags: list[float] = []
    stop = threading.Event()
    found: dict = {}
    watcher = threading.Thread(target=_watch_lags, args=(found, lags, stop), daemon=True)
    load = os.getloadavg()[0]
    watcher.start()
    try:
        answered, stored, cpu, _ = bc.run(
            lines, "http", 8, archive, {"budgets": parse_budgets(BUDGETS_TEXT)}, found, keep=True
        )
    finally:
        stop.set()
        AttributionGauges.refresh = plain
    end = time.time_ns()
    with ArchiveReader(archive, since_ns=end - 600 * 10**9) as r:
        (held,) = r.con.execute(f"SELECT count(*) FROM requests WHERE arrival_ns >= {end - 600 * 10**9}").fetchone()
    spans = n * 7
    print(
        f"steady: {spans:,} spans live into a window of {held:,} requests at the end; stored {spans / stored:,.0f} "
        f"spans/s (answered {spans / answered:,.0f}); collector CPU {cpu:.1f} s ({cpu / spans * 1e6:.1f} µs a span); "
        f"{len(refreshes)} refreshes, wall {min(refreshes):.2f}–{max(refreshes):.2f} s; attribution lag max "
        f"{max(lags) if lags else float('nan'):.1f} s over {len(lags)} scrapes; load {load:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after"
    )
    shutil.rmtree(archive, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--window-requests", type=int, default=1_000_000)
    ap.add_argument("--live-requests", type=int, default=150_000)
    ap.add_argument("--only", choices=["scrape", "counting", "attribution", "live", "steady"])
    ap.add_argument("--steady-window", type=int, default=int(600 * RATE), help="requests in the full window")
    ap.add_argument("--steady-live", type=int, default=1_000_000, help="requests sent live into the full window")
    ap.add_argument("--steady-lead", type=float, default=1500, help="seconds allowed for building the window")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    budgets_file = out / "slis-budgets.toml"
    budgets_file.write_text(BUDGETS_TEXT)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    if args.only in (None, "scrape"):
        scrape(out, budgets_file)
    if args.only in (None, "counting"):
        counting()
    if args.only in (None, "attribution"):
        attribution(out, args.window_requests)
    if args.only in (None, "live"):
        live(out, args.live_requests)
    if args.only == "steady":  # 20-odd minutes: only when asked
        steady(out, args.steady_window, args.steady_live, args.steady_lead)


if __name__ == "__main__":
    main()
