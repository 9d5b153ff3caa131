"""Reference-engine benchmarks; prints figures (not a test).

1. Continuous batching: output tokens/s with 16 requests in flight vs the same requests one at a time.
2. Instrumentation overhead: throughput and p99 inter-token latency with budgetscope.instrument on vs off,
   rounds interleaved A/B/B/A in one process so drift (thermal, other load) hits both arms alike.

In-process: requests go straight to LLMEngine and the caller steps it (no HTTP), greedy, ignore_eos,
fresh random prompts every round (no prefix-cache hits). Every configuration runs once untimed first.

    python benchmarks/bench_engine.py                 # tiny, the figures quoted in docs/engine.md
    python benchmarks/bench_engine.py --config small --rounds 2 --sequential 2 --skip-overhead
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.engine_loop import freeze_heap
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.engine.telemetry import Telemetry
from budgetscope.gil import short_switch_interval
from budgetscope.stats import quantile_linear


def run(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams, concurrency: int) -> dict:
    """Run prompts with at most `concurrency` in flight; full request lifecycle incl. telemetry traces."""
    arm = Arm(engine, prompts, params, concurrency)
    start = time.perf_counter_ns()
    cpu_start = time.process_time()
    while not arm.done:
        arm.turn()
    elapsed_s = (time.perf_counter_ns() - start) / 1e9
    cpu_s = time.process_time() - cpu_start  # every thread of this process (export thread included)
    tokens = len(prompts) * params.max_tokens
    steps = len(arm.step_ns)
    return {
        "tok_s": tokens / elapsed_s,
        "elapsed_s": elapsed_s,
        "steps": steps,
        "step_ms": elapsed_s * 1e3 / steps,
        "itl": arm.itl_ms(),
        "cpu_ms_per_tok": cpu_s * 1e3 / tokens,
    }


def summary(results: list[dict]) -> dict:
    """Median throughput and step time over rounds; ITL quantiles over every gap of every round."""
    itl = sorted(x for r in results for x in r["itl"])
    return {
        "tok_s": statistics.median(r["tok_s"] for r in results),
        "cpu_ms_per_tok": statistics.median(r["cpu_ms_per_tok"] for r in results),
        "step_ms": statistics.median(r["step_ms"] for r in results),
        "itl_p50": quantile_linear(itl, 0.5),
        "itl_p99": quantile_linear(itl, 0.99),
    }


def prompts_for(round_no: int, n: int, length: int, vocab: int = 256) -> list[list[int]]:
    gen = torch.Generator().manual_seed(1000 + round_no)
    return [[256] + torch.randint(0, vocab, (length - 1,), generator=gen).tolist() for _ in range(n)]


def make_engine(args, telemetry=None, prefix_caching: bool = True) -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            model=args.config,
            max_model_len=1024,
            max_num_seqs=args.requests,
            max_num_batched_tokens=512,
            num_kv_blocks=1024,
            num_threads=args.threads,
            enable_prefix_caching=prefix_caching,
        ),
        telemetry,
    )


def bench_batching(args) -> list[tuple]:
    engine = make_engine(args)
    params = SamplingParams(max_tokens=args.output_tokens, temperature=0, ignore_eos=True)
    run(engine, prompts_for(-1, args.requests, args.prompt_tokens), params, args.requests)  # warm-up
    run(engine, prompts_for(-2, 2, args.prompt_tokens), params, 1)
    batched, single = [], []
    for r in range(args.rounds):
        batched.append(run(engine, prompts_for(2 * r, args.requests, args.prompt_tokens), params, args.requests))
        single.append(run(engine, prompts_for(2 * r + 1, args.sequential, args.prompt_tokens), params, 1))
    b, s = summary(batched), summary(single)
    return [
        _row(f"{args.requests} concurrent", b),
        _row("1 at a time", s),
        ("batching speed-up", f"{b['tok_s'] / s['tok_s']:.2f}x", "", "", "", "target >= 4x"),
    ]


def bench_overhead(args) -> list[tuple]:
    path = Path(tempfile.mkdtemp()) / "spans.jsonl"
    on = Telemetry.create(enabled=True, exporter=f"jsonl:{path}")
    off = Telemetry(None)
    if not on.enabled:
        return [("instrumentation", "unavailable", "", "", "", "budgetscope.instrument missing")]
    # Records every mark/token/step on the hot path but exports nothing: separates the engine-thread
    # cost from the export thread's (span building and writing, which competes for the same 2 cores).
    record = Telemetry.create(enabled=True, exporter="none")
    # Every arm of a round runs the same prompts, so the prefix cache is off: with it, whichever arm ran
    # second or third in a round skipped most of its prefill, a bias that swamped the figure being measured.
    engine = make_engine(args, prefix_caching=False)
    params = SamplingParams(max_tokens=args.output_tokens, temperature=0, ignore_eos=True)
    arms = {"off": off, "on": on, "record": record}
    orders = list(itertools.permutations(arms))  # every arm in every position equally often
    results = {name: [] for name in arms}
    for name in arms:  # warm-up of every arm
        engine.telemetry = arms[name]
        run(engine, prompts_for(-3, args.requests, args.prompt_tokens), params, args.requests)
    ratios, record_ratios = [], []
    for r in range(args.ab_rounds):
        pair = {}
        for name in orders[r % len(orders)]:
            engine.telemetry = arms[name]
            pair[name] = run(engine, prompts_for(100 + r, args.requests, args.prompt_tokens), params, args.requests)
            results[name].append(pair[name])
        ratios.append(pair["on"]["tok_s"] / pair["off"]["tok_s"])
        record_ratios.append(pair["record"]["tok_s"] / pair["off"]["tok_s"])
    on.flush()
    lines = sum(1 for _ in path.open()) if path.exists() else 0
    hot = hot_path_row(on)
    on.shutdown()
    off_s, on_s, rec_s = summary(results["off"]), summary(results["on"]), summary(results["record"])
    spread = statistics.pstdev(r["tok_s"] for r in results["off"]) / off_s["tok_s"] * 100
    d_tput = (statistics.median(ratios) - 1) * 100
    q1, _, q3 = statistics.quantiles(ratios, n=4)  # how far one paired ratio strays: the figure's noise
    d_itl = (on_s["itl_p99"] / off_s["itl_p99"] - 1) * 100
    d_rec = (statistics.median(record_ratios) - 1) * 100
    d_rec_itl = (rec_s["itl_p99"] / off_s["itl_p99"] - 1) * 100
    d_cpu = (on_s["cpu_ms_per_tok"] / off_s["cpu_ms_per_tok"] - 1) * 100
    d_rec_cpu = (rec_s["cpu_ms_per_tok"] / off_s["cpu_ms_per_tok"] - 1) * 100
    return [
        _row("instrumentation off", off_s),
        _row("on, record only", rec_s),
        _row("on, JSONL export", on_s),
        (
            "record only vs off",
            f"{d_rec:+.2f}%",
            "",
            "",
            f"{d_rec_itl:+.2f}%",
            f"engine-thread cost alone; process CPU per token {d_rec_cpu:+.2f}%",
        ),
        (
            "export vs off",
            f"{d_tput:+.2f}%",
            "",
            "",
            f"{d_itl:+.2f}%",
            f"target within 1%; median of {args.ab_rounds} paired ratios (IQR {(q1 - 1) * 100:+.2f}% to "
            f"{(q3 - 1) * 100:+.2f}%); off-arm round spread {spread:.1f}%; "
            f"process CPU per token {d_cpu:+.2f}%; {lines} JSONL lines",
        ),
        hot,
    ]


class Arm:
    """One engine working through its prompts, with its own clock: only the time spent in its own calls
    (adding requests, stepping, finishing traces) advances it. Alone (`run`) that clock is the wall clock;
    in the step-interleaved A/B the other arm's steps never count on it."""

    def __init__(self, engine: LLMEngine, prompts: list[list[int]], params: SamplingParams, concurrency: int):
        self.engine, self.pending, self.params, self.concurrency = engine, list(prompts), params, concurrency
        self.live: list = []
        self.clock_ns = 0  # own time so far
        self.step_ns: list[int] = []
        self.token_clock: dict[int, list[int]] = {}
        self._t0 = 0

    @property
    def done(self) -> bool:
        return not (self.pending or self.live)

    def _on_output(self, seq) -> None:
        self.token_clock.setdefault(seq.seq_id, []).append(self.clock_ns + time.perf_counter_ns() - self._t0)

    def turn(self) -> None:
        """Admit up to `concurrency`, step once, finish what is done; timed on this arm's clock."""
        t0 = self._t0 = time.perf_counter_ns()
        engine = self.engine
        while self.pending and len(self.live) < self.concurrency:
            trace = engine.telemetry.start_request(
                model=engine.model_name,
                tier="default",
                tenant=None,
                traceparent=None,
                request_id=None,
                operation="text_completion",
            )
            seq = engine.make_sequence(self.pending.pop(0), self.params, trace=trace, on_output=self._on_output)
            engine.add(seq)
            self.live.append(seq)
        engine.step()
        for seq in [s for s in self.live if s.is_finished]:
            engine.finish_trace(seq)
            self.live.remove(seq)
        took = time.perf_counter_ns() - t0
        self.clock_ns += took
        self.step_ns.append(took)

    def itl_ms(self) -> list[float]:
        return [(b - a) / 1e6 for ts in self.token_clock.values() for a, b in zip(ts, ts[1:])]


def bench_interleaved(args) -> list[tuple]:
    """Instrumentation on vs off, A/B within each engine step: two identical engines (same seed, same prompts)
    take turns step by step, in the order AB BA AB …, so whatever slows the machine for a few milliseconds hits
    both arms. Each arm's throughput and ITL are on its own clock. The export thread runs beside both: its
    cost shows in the process CPU, reported apart."""
    path = Path(tempfile.mkdtemp()) / "spans.jsonl"
    on = Telemetry.create(enabled=True, exporter=f"jsonl:{path}")
    if not on.enabled:
        return [("instrumentation (interleaved)", "unavailable", "", "", "", "budgetscope.instrument missing")]
    engines = {
        "off": make_engine(args, Telemetry(None), prefix_caching=False),
        "on": make_engine(args, on, prefix_caching=False),
    }
    params = SamplingParams(max_tokens=args.output_tokens, temperature=0, ignore_eos=True)
    for engine in engines.values():  # warm-up
        run(engine, prompts_for(-4, args.requests, args.prompt_tokens), params, args.requests)
    freeze_heap()  # as EngineLoop.start does before serving
    arms = {name: [] for name in engines}
    cpu0, wall0 = time.process_time(), time.perf_counter()
    export0 = thread_cpu_s("budgetscope-export")
    turn = 0
    for r in range(args.ab_rounds):
        prompts = prompts_for(200 + r, args.requests, args.prompt_tokens)
        live = {name: Arm(e, prompts, params, args.requests) for name, e in engines.items()}
        while not all(a.done for a in live.values()):
            order = ("off", "on") if turn % 2 == 0 else ("on", "off")
            for name in order:
                if not live[name].done:
                    live[name].turn()
            turn += 1
        for name, arm in live.items():
            arms[name].append(arm)
    on.flush()
    wall_s = time.perf_counter() - wall0
    export_s = thread_cpu_s("budgetscope-export") - export0
    own = {name: sum(a.clock_ns for a in rounds) / 1e9 for name, rounds in arms.items()}
    tokens = args.ab_rounds * args.requests * args.output_tokens
    tok_s = {name: tokens / own[name] for name in arms}
    itl = {name: sorted(x for a in rounds for x in a.itl_ms()) for name, rounds in arms.items()}
    # per-round paired ratio of own time: how much one round's figure strays
    ratios = [b.clock_ns / a.clock_ns for a, b in zip(arms["off"], arms["on"])]
    q1, med, q3 = statistics.quantiles(ratios, n=4)
    export_cpu = export_s / wall_s * 100
    on.shutdown()
    rows = []
    for name in ("off", "on"):
        steps = [x for a in arms[name] for x in a.step_ns]
        rows.append(
            (
                f"interleaved, instrumentation {name}",
                f"{tok_s[name]:,.0f}",
                f"{statistics.median(steps) / 1e6:.2f}",
                f"{quantile_linear(itl[name], 0.5):.2f}",
                f"{quantile_linear(itl[name], 0.99):.2f}",
                f"{len(steps)} steps on its own clock",
            )
        )
    d_tput = (tok_s["on"] / tok_s["off"] - 1) * 100
    d_itl = (quantile_linear(itl["on"], 0.99) / quantile_linear(itl["off"], 0.99) - 1) * 100
    # p99 ITL of the pooled gaps moves with a handful of machine hiccups; the per-round p99s paired round by
    # round, and their median, is the steadier figure
    p99 = [
        quantile_linear(sorted(b.itl_ms()), 0.99) / quantile_linear(sorted(a.itl_ms()), 0.99)
        for a, b in zip(arms["off"], arms["on"])
    ]
    p1, pm, p3 = statistics.quantiles(p99, n=4)
    rows.append(
        (
            "interleaved on vs off",
            f"{d_tput:+.2f}%",
            "",
            "",
            f"{d_itl:+.2f}%",
            f"target within 1%; {args.ab_rounds} rounds, per-round time ratio median {(med - 1) * 100:+.2f}% "
            f"(IQR {(q1 - 1) * 100:+.2f}% to {(q3 - 1) * 100:+.2f}%); per-round p99 ITL ratio median {(pm - 1) * 100:+.2f}% "
            f"(IQR {(p1 - 1) * 100:+.2f}% to {(p3 - 1) * 100:+.2f}%); export thread {export_cpu:.2f}% of one core "
            f"(off both clocks)",
        )
    )
    return rows


def thread_cpu_s(name: str) -> float:
    """CPU seconds of this process's thread called `name` (Linux /proc; 10 ms ticks), 0 if none."""
    for t in threading.enumerate():
        if t.name == name and t.native_id is not None:
            try:
                fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return 0.0
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def hot_path_row(on: Telemetry) -> tuple:
    """What the instrumentation calls of one 16-sequence decode step cost, timed alone (no model)."""
    n, reps = 16, 1000
    traces = [
        on.start_request(
            model="tiny", tier="default", tenant=None, traceparent=None, request_id=None, operation="text_completion"
        )
        for _ in range(n)
    ]
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        for tr in traces:
            tr.token()
        on.step(
            start_ns=1,
            end_ns=2,
            batch_size=n,
            prefill_tokens=0,
            decode_seqs=n,
            kv_blocks_used=1,
            kv_blocks_total=2,
            queue_depth=0,
            preempted=0,
        )
    per_step_us = (time.perf_counter_ns() - t0) / reps / 1e3
    for tr in traces:
        tr.finish(outcome="ok")
    return (
        "hot path per step",
        f"{per_step_us:.1f} us",
        "",
        "",
        "",
        "16 token() + 1 step() calls; vs the measured step time this is the deterministic overhead",
    )


def _row(name: str, s: dict) -> tuple:
    return (name, f"{s['tok_s']:,.0f}", f"{s['step_ms']:.2f}", f"{s['itl_p50']:.2f}", f"{s['itl_p99']:.2f}", "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--requests", type=int, default=16, help="requests in flight for the batched runs")
    parser.add_argument("--sequential", type=int, default=8, help="requests run one at a time per round")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--ab-rounds",
        type=int,
        default=24,
        help="A/B rounds (a multiple of 6 puts every arm in every position equally) for the overhead figure",
    )
    # One intra-op thread by default: on a 2-core box a second torch thread makes every op wait whenever
    # anything else (the export thread, another process) holds a core, and p99 ITL measures that instead.
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-batching", action="store_true")
    parser.add_argument(
        "--skip-rounds", action="store_true", help="overhead: only the step-interleaved A/B, not the whole-round one"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), {'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}"
    )
    print(
        f"workload: config {args.config}, prompt {args.prompt_tokens} tokens, {args.output_tokens} output tokens, "
        f"greedy, median of {args.rounds} rounds (batching) / {args.ab_rounds} A/B pairs (overhead)\n"
    )
    rows = [] if args.skip_batching else bench_batching(args)
    if not args.skip_overhead:
        with short_switch_interval():  # as the engine's serving loop runs (EngineLoop)
            rows += bench_interleaved(args)
            if not args.skip_rounds:
                rows += bench_overhead(args)
    header = ("run", "output tok/s", "step ms", "ITL p50 ms", "ITL p99 ms", "note")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(6)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
