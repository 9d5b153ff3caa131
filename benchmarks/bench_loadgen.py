"""Overhead of the load generator: sustained requests/s and schedule lag against a no-delay local endpoint.

    .venv/bin/python benchmarks/bench_loadgen.py                      # 500 req/s, 5000 requests, 3 runs
    .venv/bin/python benchmarks/bench_loadgen.py --rate 1000 --spans  # also build and export client spans

The endpoint is `budgetscope.loadgen.stub_server` in a subprocess on 127.0.0.1: HTTP/1.1 keep-alive,
each response streams `--tokens` SSE token events with no delay, then usage and [DONE]. What is measured
is the client: how closely it keeps an open-loop Poisson schedule (schedule lag = sent - scheduled) and
the CPU it spends per request. Both processes share the machine's cores.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from budgetscope.instrument.client import ClientTracer
from budgetscope.loadgen import Arrivals, Distribution, Target, Workload, build_plan, run_load
from common import free_port


def start_server(port: int, tokens: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "budgetscope.loadgen.stub_server", "--port", str(port), "--tokens", str(tokens)],
        stdout=subprocess.PIPE,
        text=True,
    )
    proc.stdout.readline()  # "stub server on ..."
    return proc


def one_run(url: str, args, seed: int) -> dict:
    plan = build_plan(
        Arrivals.parse(args.arrivals, args.rate),
        Workload(
            prompt_tokens=Distribution.parse(str(args.prompt_tokens)),
            output_tokens=Distribution.parse(str(args.tokens)),
        ),
        seed=seed,
        num_requests=args.requests,
    )
    tracer = None
    if args.spans:
        path = os.path.join(tempfile.mkdtemp(), "client.jsonl")
        tracer = ClientTracer(exporter=f"jsonl:{path}")
    cpu0 = _cpu_s()
    result = run_load(plan, Target(url), tracer=tracer, spin_us=args.spin_us, connections=args.connections)
    cpu = _cpu_s() - cpu0
    if tracer is not None:
        tracer.shutdown()
    s = result.summary()
    lag = s["figures"]["schedule_lag_ms"]
    return {
        "ok": s["ok"],
        "requests": s["requests"],
        "send_rps": s["achieved_send_rate_rps"],
        "ok_rps": s["ok_throughput_rps"],
        "lag_p50": lag["p50"],
        "lag_p99": lag["p99"],
        "lag_max": lag["max"],
        "ttft_p50": s["figures"]["client_ttft_ms"]["p50"],
        "cpu_us_per_req": cpu / max(1, s["requests"]) * 1e6,
    }


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=500.0, help="planned requests/s")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--arrivals", default="poisson")
    parser.add_argument("--tokens", type=int, default=4, help="token events per response")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--spin-us", type=int, default=0)
    parser.add_argument("--connections", type=int, default=None)
    parser.add_argument("--spans", action="store_true", help="build and export client spans to a jsonl file")
    args = parser.parse_args()
    port = free_port()
    server = start_server(port, args.tokens)
    try:
        url = f"http://127.0.0.1:{port}/v1/completions"
        one_run(url, argparse.Namespace(**{**vars(args), "requests": 200}), seed=999)  # warm-up
        print(
            f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
            f"plan: {args.arrivals} at {args.rate:g}/s, {args.requests} requests, {args.tokens} tokens each; "
            f"spans {'on' if args.spans else 'off'}; spin {args.spin_us} us"
        )
        runs = []
        for i in range(args.repeat):
            r = one_run(url, args, seed=i)
            runs.append(r)
            print(
                f"run {i + 1}: ok {r['ok']}/{r['requests']}  sent {r['send_rps']:.1f}/s  ok {r['ok_rps']:.1f}/s  "
                f"lag p50 {r['lag_p50']:.3f} ms  p99 {r['lag_p99']:.3f} ms  max {r['lag_max']:.2f} ms  "
                f"ttft p50 {r['ttft_p50']:.3f} ms  cpu {r['cpu_us_per_req']:.0f} us/request",
                flush=True,
            )
        print("median (min-max) over runs:")
        for key, label in (
            ("send_rps", "sustained send req/s"),
            ("ok_rps", "ok completions/s"),
            ("lag_p50", "schedule lag p50 ms"),
            ("lag_p99", "schedule lag p99 ms"),
            ("cpu_us_per_req", "client CPU us/request"),
        ):
            values = [r[key] for r in runs]
            print(f"  {label:<24} {statistics.median(values):9.3f}  ({min(values):.3f}-{max(values):.3f})")
    finally:
        server.terminate()
        server.wait(5)


if __name__ == "__main__":
    main()
