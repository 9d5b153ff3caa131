"""`Sweep`: open-loop steps at rising rates (or closed-loop steps at rising concurrency) into one archive, each
read back with the report's analysis.

    sweep (this process) ── a Collector on OTLP/HTTP (and gRPC) ◄── the server's own spans, when it exports here
        │  one ClientTracer: llm.client.request spans tagged with run, step, repeat, rate, duration
        ▼
    target (any OpenAI-compatible server) ◄── budgetscope.loadgen: an open- or closed-loop plan, one per step
        ▲
        └── /metrics scraped once a second during each step (landed in server_metrics at the end)

Before anything is written: the rates, the budgets and the target are checked, and a few requests are sent,
so that bad input ends in one line with the archive untouched. See docs/capacity.md.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from budgetscope.analysis import capacity, coverage
from budgetscope.analysis.selection import Selection
from budgetscope.archive.archive import is_single_file
from budgetscope.archive.errors import ArchiveError
from budgetscope.instrument.client import ClientTracer
from budgetscope.loadgen import Arrivals, Prompts, build_plan, run_load
from budgetscope.loadgen.plan import build_closed_plan
from budgetscope.sources import server_metrics
from budgetscope.sources.prometheus import PrometheusError

PREFLIGHT_REQUESTS = 3


class SweepError(Exception):
    """Bad input or an unusable target; the message is one line. Raised before the archive is touched."""


@dataclass(slots=True)
class SweepConfig:
    """What to sweep and how. Rates in requests/s, times in seconds."""

    url: str
    archive: str
    budgets: object  # analysis.budgets.Budgets
    rates: list[float] | None = None  # fixed rates, increasing; None with search or concurrencies
    concurrencies: list[int] | None = None  # closed-loop steps: requests in flight, increasing
    search: bool = False
    start_rate: float = 1.0
    max_rate: float = 256.0
    tolerance: float = 0.1  # search: stop once each tier's capacity is bracketed within this share of the rate
    max_steps: int = 12  # search: at most this many rates
    runs: int = 1  # runs per rate
    duration_s: float = 30.0
    arrivals: str = "poisson"
    workload: object = None  # loadgen.Workload
    seed: int = 0
    timeout_s: float = 60.0
    send_deadline: bool = True  # send timeout_s as x-budgetscope-deadline-ms
    api: str = "auto"
    model: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    token_ids: bool = False
    otlp_port: int = 4318
    otlp_grpc_port: int | None = None
    settle_s: float = 20.0  # at most this long after a step for its spans to land
    scrape_metrics: bool = True
    target_attainment: float | None = None
    warmup: object = None  # loadgen.warmup.Warmup of each step (None: none)
    tokenizer: object = None  # loadgen.tokenizer.TargetTokenizer (exact prompt lengths)
    dataset: object = None  # loadgen.dataset.Dataset: real prompts


def parse_concurrencies(text: str) -> list[int]:
    """'1,2,4' → [1, 2, 4]; SweepError unless positive whole numbers, strictly increasing."""
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SweepError(f"--concurrency {text!r}: expected whole numbers separated by commas, e.g. 1,2,4,8") from None
    if not levels or any(c < 1 for c in levels):
        raise SweepError(f"--concurrency {text!r}: give requests in flight >= 1, e.g. 1,2,4,8")
    for a, b in zip(levels, levels[1:]):
        if b <= a:
            raise SweepError(f"--concurrency {text!r}: levels must be increasing ({b} comes after {a})")
    return levels


def parse_rates(text: str) -> list[float]:
    """'1,2,4' → [1.0, 2.0, 4.0]; SweepError unless positive numbers, strictly increasing."""
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SweepError(f"--rates {text!r}: expected numbers separated by commas, e.g. 1,2,4,8") from None
    if not rates:
        raise SweepError("--rates is empty; give e.g. 1,2,4,8")
    if any(not (r > 0 and r < float("inf")) for r in rates):
        raise SweepError(f"--rates {text!r}: every rate must be a positive number of requests/s")
    for a, b in zip(rates, rates[1:]):
        if b <= a:
            raise SweepError(f"--rates {text!r}: rates must be increasing ({b:g} comes after {a:g})")
    return rates


class _TaggedTracer:
    """A ClientTracer whose records carry the current step's tags as span attributes."""

    def __init__(self, tracer) -> None:
        self.tracer = tracer
        self.tags: dict = {}

    def record(self, request) -> None:
        # imported on use: concurrent.futures 92 ms, asyncio 89 ms, orjson 28 ms to import
        from budgetscope.loadgen.runner import CLIENT_WARMUP

        if not request.extra_attributes.get(CLIENT_WARMUP):  # warm-up belongs to no step
            request.extra_attributes.update(self.tags)
        self.tracer.record(request)


class _MetricsScraper:
    """Scrapes the target's /metrics about once a second on its own thread; keeps (ts_ns, body) pairs."""

    def __init__(self, url: str, headers: dict[str, str], every_s: float = 1.0) -> None:
        self.url, self.headers, self.every_s = url, headers, every_s
        self.bodies: list[tuple[int, str]] = []
        self.is_available = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def scrape_once(self) -> None:
        try:
            req = urllib.request.Request(self.url, headers=self.headers)
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200 and "text/plain" in r.headers.get("content-type", "text/plain"):
                    self.bodies.append((time.time_ns(), r.read().decode("utf-8", "replace")))
                    return
        except OSError:
            pass
        self.is_available = False

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="budgetscope-sweep-scrape", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scrape_once()
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


def _metrics_url(target) -> str:
    scheme = "https" if target.is_tls else "http"
    return f"{scheme}://{target.host}:{target.port}/metrics"


class Sweep:
    """Runs a sweep (`run()`), reporting progress through `say(line)`; the result is `capacity.analyze`'s."""

    def __init__(self, config: SweepConfig, say: Callable[[str], None] = lambda line: None) -> None:
        self.config = config
        self.say = say
        self.run_id = uuid.uuid4().hex[:12]
        self.step_results: list[dict] = []
        self.search_log: list[dict] = []
        self.server_spans: bool | None = None  # whether the target sends spans: unknown until a step is read

    # -- checks before anything is written ---------------------------------------------------------------
    def preflight(self):
        """Check the archive path and the target; send a few requests. Returns the Target. SweepError if unusable."""
        # imported on use: orjson 28 ms to import
        from budgetscope.loadgen import Arrivals, LoadgenError, Prompts, Target, build_plan, run_load

        cfg = self.config
        if is_single_file(cfg.archive):
            raise SweepError(f"{cfg.archive}: sweep writes a folder archive (its collector's); give a folder path")
        if os.path.exists(cfg.archive) and not os.path.isdir(cfg.archive):
            raise SweepError(f"{cfg.archive}: exists and is not a folder")
        try:
            headers = dict(cfg.headers)
            if cfg.send_deadline:
                headers.setdefault("x-budgetscope-deadline-ms", str(int(cfg.timeout_s * 1000)))
            target = Target(cfg.url, api=cfg.api, model=cfg.model, headers=headers)
            if cfg.token_ids and target.api == "chat":
                raise SweepError("--prompt-format token-ids needs the completions API")
            target.model = cfg.model or target.probe()
            plan = build_plan(
                Arrivals.parse("constant", 10.0), cfg.workload, seed=cfg.seed, num_requests=PREFLIGHT_REQUESTS
            )
            # unsampled (traceparent flags 00): a server that follows its parent's sampling, as the OpenTelemetry
            # SDK's default sampler and budgetscope's engine do, exports no span of these requests, which
            # would otherwise land later with no client span beside them
            result = run_load(
                plan,
                target,
                timeout_s=min(cfg.timeout_s, 60.0),
                prompts=Prompts(cfg.seed, token_ids=cfg.token_ids, tokenizer=cfg.tokenizer),
                sampled=False,
            )
        except LoadgenError as e:
            raise SweepError(str(e)) from None
        if not any(r.is_ok for r in result.records):
            why = sorted(
                {
                    f"{r.outcome}" + (f" ({r.error.split(':', 1)[-1].strip()[:120]})" if r.error else "")
                    for r in result.records
                }
            )
            raise SweepError(
                f"{target.url} refused every request of the pre-flight "
                f"({len(result.records)} of {len(result.records)}): {'; '.join(why)}"
            )
        return target

    # -- the run ---------------------------------------------------------------------------------------------
    def run(self) -> dict:
        """Pre-flight, then every step; returns the capacity result (capacity.analyze of this run) with the
        sweep's own keys (`mode`, `search`, `collector`)."""
        # imported on use: duckdb 153 ms, protobuf 57 ms, orjson 28 ms to import
        from budgetscope.collector import Collector
        from budgetscope.collector.server import CollectorError

        cfg = self.config
        target = self.preflight()
        collector = Collector(cfg.archive, grpc_port=cfg.otlp_grpc_port, http_port=cfg.otlp_port)
        try:
            collector.start()
        except CollectorError as e:
            raise SweepError(str(e)) from None
        self.say(
            f"collector: {', '.join(collector.endpoints)} → {cfg.archive} (run {self.run_id}); point the "
            "server's OTLP exporter here for its stages"
        )
        tracer = self._tracer(collector.http_port)
        scraper = _MetricsScraper(_metrics_url(target), cfg.headers) if cfg.scrape_metrics else None
        try:
            if cfg.search:
                self._search(target, tracer, scraper)
            else:
                for level in cfg.rates or cfg.concurrencies:
                    self._measure(level, target, tracer, scraper)
        finally:
            tracer.tracer.shutdown()
            time.sleep(0.2)
            collector.stop()
        if scraper is not None and scraper.bodies:
            self._land_scrapes(scraper, target)
        return self.result()

    def result(self) -> dict:
        # imported on use: duckdb 153 ms, protobuf 57 ms, orjson 28 ms to import
        from budgetscope.opener import Archive

        with Archive(self.config.archive, read_only=True, create=False) as a:
            out = capacity.analyze(a.con, self.config.budgets, self.run_id, self.config.target_attainment)
        out["mode"] = "search" if self.config.search else "concurrency" if self.config.concurrencies else "rates"
        out["archive"] = self.config.archive
        out["duration_s"] = self.config.duration_s
        out["runs_per_rate"] = self.config.runs
        if self.config.search:
            out["search"] = {
                "log": self.search_log,
                "tolerance": self.config.tolerance,
                "max_steps": self.config.max_steps,
            }
        return out

    def _tracer(self, http_port: int) -> _TaggedTracer:
        # imported on use: the OTLP HTTP exporter 86 ms to import
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/traces")
        return _TaggedTracer(ClientTracer(service_name="budgetscope-sweep", exporter=exporter, schedule_delay_s=0.5))

    def _step_index(self) -> int:
        return len(self.step_results)

    def _measure(self, rate: float, target, tracer: _TaggedTracer, scraper) -> list[dict]:
        """Every run of one rate (a concurrency in a concurrency sweep); returns their step figures (also kept in
        step_results)."""
        out = []
        for repeat in range(self.config.runs):
            out.append(self._one_step(rate, repeat, target, tracer, scraper))
        return out

    def _plan(self, level: float, index: int):
        """The plan of step `index`: open loop at `level` req/s, or a closed loop of `level` requests in flight."""
        cfg = self.config
        if cfg.concurrencies:
            plan = build_closed_plan(cfg.workload, int(level), seed=cfg.seed + index)
        else:
            plan = build_plan(
                Arrivals.parse(cfg.arrivals, level), cfg.workload, seed=cfg.seed + index, duration_s=cfg.duration_s
            )
        if cfg.dataset is not None:
            # imported on use: orjson 28 ms to import
            from budgetscope.loadgen.dataset import apply_dataset

            plan = apply_dataset(plan, cfg.dataset)
        return plan

    def _one_step(self, rate: float, repeat: int, target, tracer: _TaggedTracer, scraper) -> dict:

        cfg = self.config
        index = self._step_index()
        plan = self._plan(rate, index)
        load = {capacity.CONCURRENCY: int(rate)} if cfg.concurrencies else {capacity.RATE: float(rate)}
        tracer.tags = {
            capacity.RUN: self.run_id,
            capacity.STEP: index,
            capacity.REPEAT: repeat,
            capacity.DURATION: float(cfg.duration_s),
            **load,
        }
        what = f"a closed loop of {rate:g} in flight" if cfg.concurrencies else f"{rate:g} req/s ({len(plan)} requests)"
        self.say(
            f"step {index + 1}: {what} for {cfg.duration_s:g} s"
            + (f", run {repeat + 1} of {cfg.runs}" if cfg.runs > 1 else "")
        )
        if scraper is not None and scraper.is_available:
            scraper.start()
        try:
            result = run_load(
                plan,
                target,
                tracer=tracer,
                timeout_s=cfg.timeout_s,
                prompts=Prompts(cfg.seed + index, token_ids=cfg.token_ids, tokenizer=cfg.tokenizer),
                warmup=cfg.warmup,
                duration_s=cfg.duration_s if plan.is_closed_loop else None,
            )
        finally:
            if scraper is not None:
                scraper.stop()
        tracer.tracer.flush()
        sent = sum(1 for r in result.records if r.sent_ns is not None)
        figures = self._settle_and_read(index, sent)
        self.step_results.append(figures)
        self.say(_step_line(figures))
        return figures

    def _settle_and_read(self, index: int, sent: int) -> dict:
        """Wait until the step's client spans are all in the archive and the server's stop arriving, then
        return the step's figures."""
        # imported on use: duckdb 153 ms, protobuf 57 ms, orjson 28 ms to import
        from budgetscope.opener import Archive

        deadline = time.monotonic() + self.config.settle_s
        last, stable_since = None, time.monotonic()
        while True:
            try:
                with Archive(self.config.archive, read_only=True, create=False) as a:
                    steps = [s for s in capacity.sweep_steps(a.con, self.run_id) if s.index == index]
                    counts = None
                    if steps:  # the step's window as its report reads it (capacity.step_figures)
                        window = Selection({}, steps[0].start_ns, steps[0].end_ns + 1)
                        counts = coverage.coverage(a.con, window.where(), window.params)
                    now = time.monotonic()
                    if counts != last:
                        last, stable_since = counts, now
                    complete = steps and steps[0].sent >= sent and counts["with_client_spans"] >= sent
                    settled = complete and now - stable_since >= _quiet_s(counts, self.server_spans)
                    if settled or now > deadline:
                        if not steps:
                            raise SweepError(
                                f"no client span of step {index + 1} reached the archive within "
                                f"{self.config.settle_s:g} s"
                            )
                        # False once a step was read, after the longer wait, without any: the target sends none
                        self.server_spans = bool(self.server_spans or counts["with_server_spans"])
                        return capacity.step_figures(
                            a.con, steps[0], self.config.budgets, self.config.target_attainment
                        )
            except ArchiveError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.5)

    # -- search ------------------------------------------------------------------------------------------------
    def _keeps(self, rate: float) -> dict[str, bool | None]:
        """Tier → whether every run at `rate` kept its budgets (None: no request of the tier)."""
        out: dict[str, bool | None] = {}
        for s in self.step_results:
            if s["rate_rps"] != rate:
                continue
            for t in s["tiers"]:
                if t["keeps"] is None:
                    continue
                out[t["name"]] = bool(out.get(t["name"], True) and t["keeps"])
        return out

    def _brackets(self, tried: list[float]) -> dict[str, tuple[float | None, float | None]]:
        """Tier → (highest rate kept below the first break, lowest rate that broke)."""
        out = {}
        for tb in self.config.budgets.tiers:
            lo = hi = None
            for rate in sorted(tried):
                k = self._keeps(rate).get(tb.name)
                if k is None:
                    continue
                if not k:
                    hi = rate
                    break
                lo = rate
            out[tb.name] = (lo, hi)
        return out

    def _search(self, target, tracer, scraper) -> None:
        """Double from start_rate until a rate breaks every tier, then bisect each tier's bracket until it is
        within `tolerance` of the rate (or max_steps)."""
        cfg = self.config
        tried: list[float] = []

        def measure(rate: float, why: str) -> None:
            rate = round(rate, 3)
            self.search_log.append({"rate_rps": rate, "why": why})
            self._measure(rate, target, tracer, scraper)
            tried.append(rate)

        rate = cfg.start_rate
        while len(tried) < cfg.max_steps:
            measure(rate, "doubling" if tried else "start")
            keeps = self._keeps(rate)
            if keeps and not any(keeps.values()):
                self.say(f"{rate:g} req/s breaks every tier's budgets: doubling stops")
                break
            if rate * 2 > cfg.max_rate:
                self.say(f"reached --max-rate {cfg.max_rate:g} req/s")
                break
            rate *= 2
        while len(tried) < cfg.max_steps:
            wide = []
            for name, (lo, hi) in self._brackets(tried).items():
                if hi is None:
                    continue  # never broke: capacity is at least the highest rate tried
                low = lo if lo is not None else 0.0
                if lo is None and hi / 2 < cfg.start_rate / 8:
                    continue  # breaks even far below the start: give up going down
                if (hi - low) > cfg.tolerance * hi:
                    wide.append(((hi - low) / hi, name, low, hi))
            if not wide:
                break
            _, name, low, hi = max(wide)
            mid = (low + hi) / 2 if low > 0 else hi / 2
            if round(mid, 3) in tried:
                break
            measure(mid, f"bisect {name}: kept {low:g}, broke {hi:g}")

    def _land_scrapes(self, scraper: _MetricsScraper, target) -> None:
        """Land the /metrics samples of every step in server_metrics (the collector has stopped)."""
        # imported on use: duckdb 153 ms, protobuf 57 ms, orjson 28 ms to import
        from budgetscope.opener import Archive

        url = _metrics_url(target)
        landed = 0
        with Archive(self.config.archive) as a:
            for ts_ns, body in scraper.bodies:
                try:
                    landed += server_metrics.land(
                        a,
                        body,
                        instance=url,
                        service_name=f"{target.host}:{target.port}",
                        ts_ns=ts_ns,
                        origin=f"sweep:{self.run_id}",
                    )
                except PrometheusError as e:
                    self.say(f"note: a /metrics scrape was not Prometheus text ({e}); skipped")
        self.say(f"/metrics: {len(scraper.bodies)} scrapes, {landed:,} samples landed in server_metrics")


QUIET_S = 1.5
"""How long a step's counts must stay unchanged, once its client spans are all in the archive, before it is read
when every request has both sides' spans (`_quiet_s`)."""


def _one_sided(cov: dict) -> int:
    """Of a step's requests (its `coverage.coverage`), those with one side's spans only, where the target sends
    server spans at all (0 where it sent none: there is no other side to wait for)."""
    return cov["requests"] - cov["with_both"] if cov["with_server_spans"] else 0


def _quiet_s(cov: dict, server_spans: bool | None) -> float:
    """How long a step's coverage (`coverage.coverage`) must stay unchanged before it is read: QUIET_S, or, while
    some requests have one side's spans only and the target sends spans (`server_spans`: a step had some; None: no
    step read yet, or this one has some), longer than an exporter's batch delay (coverage.EXPORT_DELAY_S). A server
    exporting every 5 s sends nothing for up to 5 s, and a step read meanwhile holds client-only rows, their whole
    TTFT `unaccounted`; a target that sends no span costs its first step the longer wait only."""
    sends = cov["with_server_spans"] > 0 or server_spans is not False
    return coverage.EXPORT_DELAY_S + 1.0 if sends and cov["with_both"] < cov["requests"] else QUIET_S


def _step_line(s: dict) -> str:
    where = f"{s['rate_rps']:g} req/s" if s.get("concurrency") is None else f"{s['concurrency']} in flight"
    parts = [f"  {where}: {s['ok']}/{s['requests']} ok"]
    if one_sided := _one_sided(s["coverage"]):
        parts[0] += f" ({one_sided} with one side's spans only when read)"
    for t in s["tiers"]:
        if not t["requests"]:
            continue
        key = f"p{t['percentile']:g}"
        ttft = t["metrics"]["ttft_ms"].get(key)
        a = t["attribution"]["ttft"]
        dom = f", TTFT tail {a['dominant']} {100 * a['shares'][a['dominant']]:.0f}%" if a and a["dominant"] else ""
        att = "n/a" if t["attainment"] is None else f"{100 * t['attainment']:.0f}%"
        verdict = "UNKNOWN" if t["status"] == "UNKNOWN" else "keeps" if t["keeps"] else "BREAKS"
        parts.append(
            f"{t['name']}: attainment {att}, {key} TTFT {'n/a' if ttft is None else f'{ttft:.0f} ms'}{dom}, {verdict}"
        )
    return "; ".join(parts)
