"""On a CUDA GPU: how fast PyTorch's bf16 matrix-vector products (one token's F.linear) read the `1b` model's weights.

A batch-1 decode step reads every weight once; if the per-layer products reach only a fraction of the copy
bandwidth, so does the step. For each weight shape of the `1b` config (fused q/k/v, o, fused gate/up, down, and the
tied lm_head) this times F.linear(x[1, K], W[N, K]) as the engine's step runs it: captured in a CUDA graph, one
call per copy of W (enough copies that the 60 MB L2 holds none of them between calls), the graph replayed between
two CUDA events (median of 20 replays, per call). It prints bytes read / time against a device-to-device copy.

A lone call between two events (how this script timed it first, 2026-11-28) measures the launch as much as the
kernel: 36 us for a product the step's graph runs in 6 us.

    python benchmarks/gpu/gemv_bw.py
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

SHAPES = {
    "qkv (3072x2048)": (3072, 2048),
    "o (2048x2048)": (2048, 2048),
    "gate_up (16384x2048)": (16384, 2048),
    "down (2048x8192)": (2048, 8192),
    "lm_head (32000x2048)": (32000, 2048),
}


def timed(fn, reps: int = 50) -> float:
    """Median seconds of fn() over reps calls, each between two CUDA events."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def copy_bandwidth(dev: torch.device, n: int = 1 << 30) -> float:
    """Bytes read + written per second by a device-to-device copy of n bytes."""
    src, dst = torch.empty(n, dtype=torch.uint8, device=dev), torch.empty(n, dtype=torch.uint8, device=dev)
    for _ in range(3):
        dst.copy_(src)
    return 2 * n / timed(lambda: dst.copy_(src), 20)


def gemv_seconds(dev: torch.device, rows: int, cols: int) -> float:
    """Median seconds of one token's F.linear through a [rows, cols] bf16 weight, none of it in L2, back to back in a
    CUDA graph as the engine's step graph runs them."""
    copies = max(2, -(-256 * 2**20 // (rows * cols * 2)))  # > 4x the L2 in all
    ws = [torch.randn(rows, cols, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    x = torch.randn(1, cols, device=dev, dtype=torch.bfloat16)
    for w in ws:  # warm-up: cuBLAS picks its kernel
        F.linear(x, w)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for w in ws:
            F.linear(x, w)
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(3):
        graph.replay()
    return timed(graph.replay, 20) / copies


def main() -> None:
    dev = torch.device("cuda")
    copy = copy_bandwidth(dev)
    torch.cuda.empty_cache()
    print(f"copy (read + written): {copy / 1e12:.2f} TB/s")
    print(f"{'weight':<24} {'MB':>7} {'us':>8} {'TB/s':>6} {'of copy':>8}")
    for name, (rows, cols) in SHAPES.items():
        nbytes = rows * cols * 2
        s = gemv_seconds(dev, rows, cols)
        torch.cuda.empty_cache()
        print(
            f"{name:<24} {nbytes / 1e6:>7.1f} {s * 1e6:>8.1f} {nbytes / s / 1e12:>6.2f} {nbytes / s / copy:>8.1%}",
            flush=True,
        )


if __name__ == "__main__":
    main()
