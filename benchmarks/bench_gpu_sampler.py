"""The GPU sampler's own CPU cost at 10 Hz, measured on the sampling thread (`time.thread_time_ns`).

Runs against the FAKE NVML of tests/test_gpu.py (`fake_pynvml`: no GPU on the machine this was written on), so it
measures budgetscope's side only — conversions, buffering, OTLP/JSON export — not the NVML driver calls, which a
GPU session must add (docs/gpu.md, "To do on a GPU"). Target: ≤ 1 % of one core at 10 Hz.

    .venv/bin/python benchmarks/bench_gpu_sampler.py [--seconds 10] [--gpus 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from budgetscope.instrument.gpu import GpuSampler
from test_gpu import fake_pynvml


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        s = GpuSampler(every_s=0.1, sink=f"jsonl:{d}/gpu.jsonl", nvml=fake_pynvml(count=args.gpus), host_name="bench")
        s.start()
        t0 = time.perf_counter_ns()
        time.sleep(args.seconds)
        s.stop()
        wall = time.perf_counter_ns() - t0
        size = os.path.getsize(f"{d}/gpu.jsonl")
    print(
        f"GPU sampler (fake NVML, {args.gpus} GPUs, 10 Hz, jsonl sink) over {wall / 1e9:.1f} s: "
        f"{s.num_ticks} ticks, {s.num_points:,} points, {size / 1e3:,.0f} kB written; "
        f"CPU {s.cpu_ns / 1e6:.1f} ms = {100 * s.cpu_ns / wall:.3f}% of one core "
        f"({s.cpu_ns / max(1, s.num_ticks) / 1e3:.0f} µs a tick)"
    )


if __name__ == "__main__":
    main()
