"""Prometheus text for /metrics: live gauges, counters, and TTFT/ITL/E2E histograms (seconds)."""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0)

PREFIX = "budgetscope_engine_"


class Histogram:
    def __init__(self, buckets=LATENCY_BUCKETS_S):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out, running = [], 0
        for bound, n in zip(self.buckets, self.counts):
            running += n
            out.append(f'{name}_bucket{{le="{bound}"}} {running}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        out.append(f"{name}_sum {self.sum}")
        out.append(f"{name}_count {self.count}")
        return out


@dataclass(slots=True)
class EngineGauges:
    """The engine's state at one instant: read from the engine in process, or sent by the engine process."""

    num_running: int = 0
    num_waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_total: int = 0
    num_preemptions: int = 0
    num_steps: int = 0

    @classmethod
    def of(cls, engine) -> EngineGauges:
        """Read now from an LLMEngine's scheduler, block manager and metrics."""
        sched, blocks = engine.scheduler, engine.block_manager
        return cls(
            sched.num_running,
            sched.num_waiting,
            blocks.num_used_blocks,
            blocks.num_blocks,
            sched.num_preemptions,
            engine.metrics.steps,
        )

    @property
    def kv_usage(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total if self.kv_blocks_total else 0.0


class EngineMetrics:
    """Updated on the engine thread (tokens) and the server (outcomes); rendered on scrape."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ttft = Histogram()
        self.itl = Histogram()
        self.e2e = Histogram()
        self.outcomes: dict[str, int] = {}
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.cached_tokens = 0
        self.steps = 0
        self.deadline_refusals = 0  # 429s of deadline-aware admission (also counted in requests_total rejected)

    def observe_token(self, seq, now_ns: int) -> None:
        """A new token of seq at now_ns: TTFT for the first, ITL for the rest."""
        with self.lock:
            self.generation_tokens += 1
            if seq.last_token_ns is None:
                self.ttft.observe((now_ns - seq.arrival_ns) / 1e9)
            else:
                self.itl.observe((now_ns - seq.last_token_ns) / 1e9)

    def observe_finish(
        self, outcome: str, arrival_ns: int, end_ns: int, prompt_tokens: int, cached_tokens: int
    ) -> None:
        with self.lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            self.e2e.observe((end_ns - arrival_ns) / 1e9)
            self.prompt_tokens += prompt_tokens
            self.cached_tokens += cached_tokens

    def render(self, gauges: EngineGauges) -> str:
        """The exposition text: these counters and histograms, and the engine's state `gauges`."""
        g = gauges
        lines = []

        def metric(name, kind, help_text, samples):
            lines.append(f"# HELP {PREFIX}{name} {help_text}")
            lines.append(f"# TYPE {PREFIX}{name} {kind}")
            lines.extend(samples)

        metric(
            "requests_running",
            "gauge",
            "Sequences in the running batch.",
            [f"{PREFIX}requests_running {g.num_running}"],
        )
        metric(
            "requests_waiting",
            "gauge",
            "Sequences in the waiting queue.",
            [f"{PREFIX}requests_waiting {g.num_waiting}"],
        )
        metric(
            "kv_cache_usage_ratio",
            "gauge",
            "Share of KV blocks held by sequences (0-1).",
            [f"{PREFIX}kv_cache_usage_ratio {g.kv_usage}"],
        )
        metric(
            "kv_blocks_used", "gauge", "KV blocks held by sequences.", [f"{PREFIX}kv_blocks_used {g.kv_blocks_used}"]
        )
        metric("kv_blocks_total", "gauge", "KV blocks in the cache.", [f"{PREFIX}kv_blocks_total {g.kv_blocks_total}"])
        with self.lock:
            metric(
                "preemptions_total",
                "counter",
                "Sequences preempted (recompute).",
                [f"{PREFIX}preemptions_total {g.num_preemptions}"],
            )
            metric("steps_total", "counter", "Engine steps run.", [f"{PREFIX}steps_total {g.num_steps}"])
            metric(
                "deadline_refusals_total",
                "counter",
                "Requests refused at once: not startable within their deadline.",
                [f"{PREFIX}deadline_refusals_total {self.deadline_refusals}"],
            )
            metric(
                "prompt_tokens_total",
                "counter",
                "Prompt tokens of finished requests.",
                [f"{PREFIX}prompt_tokens_total {self.prompt_tokens}"],
            )
            metric(
                "prefix_cache_hit_tokens_total",
                "counter",
                "Prompt tokens served from the prefix cache.",
                [f"{PREFIX}prefix_cache_hit_tokens_total {self.cached_tokens}"],
            )
            metric(
                "generation_tokens_total",
                "counter",
                "Output tokens generated.",
                [f"{PREFIX}generation_tokens_total {self.generation_tokens}"],
            )
            metric(
                "requests_total",
                "counter",
                "Finished requests by outcome.",
                [f'{PREFIX}requests_total{{outcome="{k}"}} {v}' for k, v in sorted(self.outcomes.items())],
            )
            metric(
                "time_to_first_token_seconds",
                "histogram",
                "Server receive to first output token.",
                self.ttft.lines(PREFIX + "time_to_first_token_seconds"),
            )
            metric(
                "inter_token_latency_seconds",
                "histogram",
                "Gap between consecutive output tokens.",
                self.itl.lines(PREFIX + "inter_token_latency_seconds"),
            )
            metric(
                "e2e_request_latency_seconds",
                "histogram",
                "Server receive to request finish.",
                self.e2e.lines(PREFIX + "e2e_request_latency_seconds"),
            )
        return "\n".join(lines) + "\n"
