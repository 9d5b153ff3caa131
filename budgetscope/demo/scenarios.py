"""The live demo's scenarios: each causes its tail for real on the reference engine's `tiny` model.

A scenario is engine flags, load-generator flags and (for `slow-network`) a delaying TCP hop. `expect` names the
stage that must dominate the tail of `metric` ("ttft" or "e2e") when the scenario ran: the tests check it.
Lengths use `--prompt-format token-ids`, so prompt sizes are exact tokens of the engine's tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    what: str
    expect: str | None  # dominant stage of the tail, or None (calm: nothing should break)
    metric: str = "ttft"
    engine_args: tuple[str, ...] = ()
    load_args: tuple[str, ...] = ()
    rate: float = 4.0
    delay_ms: float = 0.0
    slow_fraction: float = 0.0
    tiers: str = "interactive=1"
    extra: dict = field(default_factory=dict)


COMMON_LOAD = ("--prompt-format", "token-ids", "--api", "completions", "--ignore-eos")

SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "calm",
            "a light, steady load of short requests: every budget should hold",
            None,
            rate=2.0,
            load_args=("--prompt-tokens", "uniform:16,64", "--output-tokens", "uniform:8,24"),
        ),
        Scenario(
            "burst",
            "bursty arrivals (gamma, CV 4) outrun a 4-sequence batch: requests wait in the queue",
            "queue",
            rate=12.0,
            engine_args=("--max-seqs", "4"),
            load_args=(
                "--arrivals",
                "gamma:cv=4",
                "--prompt-tokens",
                "uniform:16,48",
                "--output-tokens",
                "uniform:16,32",
            ),
        ),
        Scenario(
            "long-prompts",
            "one request in ten carries a ~1,800-token prompt, one request at a time: its chunked prefill is long",
            "prefill",
            rate=2.0,
            # one in flight: a request arriving during a long prefill waits at the client (schedule lag), not in
            # the engine's queue, whose share would grow with the step time, i.e. with the machine's load
            load_args=("--prompt-tokens", "choice:32=0.9,1800=0.1", "--output-tokens", "8", "--concurrency", "1"),
        ),
        Scenario(
            "long-outputs",
            "one request in ten asks for 300 tokens: its decode is long",
            "decode",
            metric="e2e",
            rate=3.0,
            load_args=("--prompt-tokens", "32", "--output-tokens", "choice:12=0.9,300=0.1"),
        ),
        Scenario(
            "slow-network",
            "a quarter of the client's connections go through a hop that holds each chunk 150 ms",
            "network",
            rate=4.0,
            delay_ms=150.0,
            slow_fraction=0.25,
            load_args=(
                "--prompt-tokens",
                "uniform:16,48",
                "--output-tokens",
                "uniform:8,16",
                "--connections",
                "8",
                "--concurrency",
                "8",
            ),
        ),
    )
}
