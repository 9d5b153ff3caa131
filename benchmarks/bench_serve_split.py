"""Served output tokens/s at saturation: the engine on a thread of the server (`--engine-in-process`) vs the engine in
its own process (the default); prints figures (not a test).

Each variant starts `budgetscope engine serve` on a free port, warms it up, then keeps `--concurrency` streaming
requests in flight (closed loop; or opens `--rate` requests a second, Poisson) for `--duration` seconds and
counts the SSE token events that arrived. Random token-id prompts (no prefix-cache hits), ignore_eos, greedy.
The client is one asyncio process on the same machine; both variants share it alike.

    python benchmarks/bench_serve_split.py                                   # tiny on CPU, ~2 x 25 s
    python benchmarks/bench_serve_split.py --config 1b --device cuda --max-seqs 64 --concurrency 64 \\
        --prompt-tokens 256 --output-tokens 256 --duration 45
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))

from common import free_port, stop_process  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {"thread": ["--engine-in-process"], "process": []}


def start_server(args, extra: list[str]) -> tuple[subprocess.Popen, str]:
    """`engine serve` with the benchmark's knobs; returns once /health answers."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "budgetscope.cli",
        "engine",
        "serve",
        "--config",
        args.config,
        "--device",
        args.device,
        "--port",
        str(port),
        "--max-seqs",
        str(args.max_seqs),
        "--max-batched-tokens",
        str(args.max_batched_tokens),
        "--max-model-len",
        str(args.prompt_tokens + args.output_tokens + 16),
        "--max-waiting",
        "0",
        "--no-prefix-caching",
        "--log-level",
        "warning",
        *extra,
        *args.serve_arg,
    ]
    if not args.instrument:
        cmd.append("--no-instrument")
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.start_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench_serve_split: the server exited with code {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("bench_serve_split: the server did not start in time")


async def one_request(client: httpx.AsyncClient, url: str, args, rng: random.Random, counts: dict) -> None:
    prompt = [rng.randrange(1, 250) for _ in range(args.prompt_tokens)]
    body = {"prompt": prompt, "max_tokens": args.output_tokens, "ignore_eos": True, "temperature": 0, "stream": True}
    async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {") and counts["start"] <= time.monotonic() < counts["end"]:
                counts["tokens"] += 1
    counts["requests"] += 1


async def drive(url: str, args, duration_s: float) -> dict:
    """Load for warm-up + duration_s; tokens counted in the timed window only."""
    rng = random.Random(0)
    now = time.monotonic()
    counts = {"tokens": 0, "requests": 0, "start": now + args.warmup, "end": now + args.warmup + duration_s}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=None, limits=limits) as client:
        tasks: set[asyncio.Task] = set()
        if args.rate:
            while time.monotonic() < counts["end"]:
                tasks.add(asyncio.create_task(one_request(client, url, args, rng, counts)))
                await asyncio.sleep(rng.expovariate(args.rate))
        else:

            async def worker():
                while time.monotonic() < counts["end"]:
                    await one_request(client, url, args, rng, counts)

            tasks = {asyncio.create_task(worker()) for _ in range(args.concurrency)}
            await asyncio.sleep(counts["end"] - time.monotonic())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"tok_s": counts["tokens"] / duration_s, "tokens": counts["tokens"]}


def engine_steps(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return next(
        float(line.split()[1]) for line in text.splitlines() if line.startswith("budgetscope_engine_steps_total ")
    )


def measure(args, name: str) -> dict:
    proc, url = start_server(args, VARIANTS[name])
    try:
        load0 = os.getloadavg()[0]
        t0 = time.monotonic()
        steps0 = engine_steps(url)
        result = asyncio.run(drive(url, args, args.duration))
        steps = engine_steps(url) - steps0
        result.update(load=(load0, os.getloadavg()[0]), steps_s=steps / (time.monotonic() - t0))
        return result
    finally:
        stop_process(proc)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-seqs", type=int, default=16)
    p.add_argument("--max-batched-tokens", type=int, default=512)
    p.add_argument("--concurrency", type=int, default=0, help="requests in flight (default: --max-seqs)")
    p.add_argument("--rate", type=float, default=0.0, help="open loop: requests a second (Poisson) instead")
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--duration", type=float, default=20.0, help="timed seconds per variant")
    p.add_argument("--warmup", type=float, default=5.0, help="untimed seconds of load first")
    p.add_argument("--threads", type=int, default=1, help="--threads of the server (0: the server's default)")
    p.add_argument("--instrument", action="store_true", help="spans on (exported nowhere unless OTEL_* say)")
    p.add_argument("--variants", default="thread,process")
    p.add_argument("--start-timeout", type=float, default=600.0)
    p.add_argument("--serve-arg", action="append", default=[], help="one more argument for engine serve")
    args = p.parse_args()
    args.concurrency = args.concurrency or args.max_seqs
    names = args.variants.split(",")
    results = {name: measure(args, name) for name in names}
    load = f"rate {args.rate:.1f}/s" if args.rate else f"{args.concurrency} in flight"
    print(
        f"\nengine serve --config {args.config} --device {args.device} --max-seqs {args.max_seqs}; {load}, "
        f"{args.prompt_tokens} prompt / {args.output_tokens} output tokens, {args.duration:.0f} s timed, "
        f"cpus {os.cpu_count()}"
    )
    print(f"{'engine':<10} {'output tok/s':>12} {'steps/s':>8} {'load avg 1m (start, end)':>26}")
    for name, r in results.items():
        print(f"{name:<10} {r['tok_s']:>12,.0f} {r['steps_s']:>8,.1f} {r['load'][0]:>12.2f}, {r['load'][1]:.2f}")
    if {"thread", "process"} <= results.keys() and results["thread"]["tok_s"]:
        print(f"process / thread: {results['process']['tok_s'] / results['thread']['tok_s']:.2f}x")
    print(
        json.dumps({k: {"tok_s": round(v["tok_s"], 1), "steps_s": round(v["steps_s"], 1)} for k, v in results.items()})
    )


if __name__ == "__main__":
    main()
