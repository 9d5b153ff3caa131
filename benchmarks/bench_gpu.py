"""On a real GPU: decode bandwidth of the reference engine, the sampler's cost, GPM vs the software estimate.

Prints figures and writes them to OUT/gpu_figures.json (docs/gpu.md and docs/benchmarks.md quote them):

1. copy bandwidth: a device-to-device copy of 2 GiB, bytes read + written over time (the achievable ceiling);
2. decode of the `1b` config at batch 1, 8, 32 (CUDA graphs; batch 1 also eager): tokens/s, step time, and
   bytes a step must read (every weight once + each sequence's K/V so far) over step time, as a fraction of (1);
3. with the GPU sampler on (NVML at 10 Hz, GPM): GPM's DRAM bandwidth over the decode window vs the software
   estimate of (2) over the same window;
4. the sampler's own CPU time at 10 Hz (real NVML calls included), with and without GPM, and batch-1 decode
   tokens/s with the sampler off and on;
5. an NVML tape (budgetscope.instrument.nvml_tape) recorded during decode: OUT/nvml_tape.json, the test fixture.

    python benchmarks/bench_gpu.py --out OUT [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.instrument import gpu
from budgetscope.instrument.gpu import GpuSampler


class ListSink:
    def __init__(self):
        self.points = []

    def export(self, points, host_name):
        self.points += points

    def close(self):
        pass


def copy_bandwidth(gib: float = 2.0, reps: int = 20) -> float:
    """Bytes read + written per second by a device-to-device copy (torch), mean of `reps` after warm-up."""
    n = int(gib * 2**30)
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / reps
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n / seconds


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of every parameter once (tied embedding / lm_head counted once: the lm_head reads all of it)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def kv_bytes_per_token(engine: LLMEngine) -> int:
    c = engine.model_config
    return 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * torch.finfo(engine.dtype).bits // 8


ATTENTION = "auto"  # --attention: the engine's attention backend (auto: triton on CUDA; sdpa with --compile)


def make_engine(batch: int, mode: str, max_tokens: int, prompt_len: int) -> LLMEngine:
    """mode: `graphs` (the default engine on CUDA), `compiled` (graphs of the torch.compile'd step), `eager`."""
    need = batch * (prompt_len + max_tokens)
    return LLMEngine(
        EngineConfig(
            model="1b",
            max_model_len=2048,
            max_num_seqs=batch,
            max_num_batched_tokens=max(512, batch * prompt_len),
            num_kv_blocks=-(-need // 16) + 16,
            enforce_eager=mode == "eager",
            compile=mode == "compiled",
            enable_prefix_caching=False,
            attention_backend="auto" if mode == "compiled" else ATTENTION,
        )
    )


def decode(engine: LLMEngine, batch: int, seconds: float, prompt_len: int, max_tokens: int, seed: int = 0) -> dict:
    """Rounds of `batch` fresh prompts decoded together until `seconds` of decode-only steps were timed.

    Only steps whose every row decodes with the whole batch present count; each step's bytes = weights + the
    K/V of every sequence's context so far (what attention must read)."""
    wbytes, per_tok = weight_bytes(engine.model), kv_bytes_per_token(engine)
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    gen = torch.Generator().manual_seed(seed)
    step_s, step_bytes, windows = [], [], []
    timed = 0.0
    rounds = 0
    while timed < seconds or rounds == 0:
        prompts = [[256] + torch.randint(0, 32000, (prompt_len - 1,), generator=gen).tolist() for _ in range(batch)]
        seqs = [engine.make_sequence(p, params) for p in prompts]
        for s in seqs:
            engine.add(s)
        window_start = None
        while engine.has_work:
            sched_peek = [s for s in seqs if not s.is_finished]
            full = len(sched_peek) == batch and all(s.num_computed_tokens >= s.num_prompt_tokens for s in sched_peek)
            ctx = sum(s.num_computed_tokens + 1 for s in sched_peek)
            t0 = time.perf_counter()
            engine.step()
            dt = time.perf_counter() - t0
            if full:
                if window_start is None:
                    window_start = time.time_ns() - int(dt * 1e9)
                step_s.append(dt)
                step_bytes.append(wbytes + ctx * per_tok)
                timed += dt
        windows.append((window_start, time.time_ns()))
        rounds += 1
    total_s, total_bytes = sum(step_s), sum(step_bytes)
    return {
        "batch": batch,
        "steps": len(step_s),
        "rounds": rounds,
        "step_ms_median": 1e3 * statistics.median(step_s),
        "step_ms_p99": 1e3 * sorted(step_s)[int(0.99 * (len(step_s) - 1))],
        "tokens_per_s": batch * len(step_s) / total_s,
        "bytes_per_step_mean": total_bytes / len(step_s),
        "estimated_bytes_per_s": total_bytes / total_s,
        "weight_bytes": wbytes,
        "windows": windows,
        "graph_steps": engine.runner.graph_steps,
    }


def gpm_over(points, windows) -> dict:
    """Mean GPM DRAM bandwidth utilization of the samples inside the decode windows, and the peak it is of."""
    peak = next((p.value for p in points if p.metric == gpu.PEAK_BANDWIDTH), None)
    inside = [
        p.value
        for p in points
        if p.metric == gpu.DRAM_BANDWIDTH and any(a is not None and a + 150_000_000 <= p.ts_ns <= b for a, b in windows)
    ]  # a sample covers 100 ms before it
    hbm = [p.value for p in points if p.metric == gpu.HBM_USED]
    occ = [
        p.value
        for p in points
        if p.metric == gpu.SM_OCCUPANCY and any(a is not None and a + 150_000_000 <= p.ts_ns <= b for a, b in windows)
    ]
    util = statistics.mean(inside) if inside else None
    return {
        "samples": len(inside),
        "dram_util_mean": util,
        "peak_bytes_per_s": peak,
        "gpm_bytes_per_s": util * peak if util is not None and peak else None,
        "sm_occupancy_mean": statistics.mean(occ) if occ else None,
        "hbm_used_max": max(hbm) if hbm else None,
    }


def sampler_cost(seconds: float, gpm: bool) -> dict:
    s = GpuSampler(every_s=gpu.DEFAULT_EVERY_S, sink=ListSink(), flush_every_s=1.0)
    s.open()
    if not gpm:
        for g in s.nvml.gpus:
            g.has_gpm = False
    t0 = time.perf_counter_ns()
    s.start()
    time.sleep(seconds)
    s.stop()
    wall = time.perf_counter_ns() - t0
    return {
        "gpm": gpm,
        "ticks": s.num_ticks,
        "cpu_ms": s.cpu_ns / 1e6,
        "share_of_one_core": s.cpu_ns / wall,
        "us_per_tick": s.cpu_ns / max(1, s.num_ticks) / 1e3,
        "wall_us_per_tick": s.wall_ns / max(1, s.num_ticks) / 1e3,
    }


def cuda_call_costs() -> dict:
    """Host time of the CUDA calls a decode step makes: a kernel launch, a small pinned copy, a sync round trip."""
    x = torch.zeros(1, device="cuda")
    pinned = torch.zeros(512, dtype=torch.long, pin_memory=True)
    dev = torch.zeros(512, dtype=torch.long, device="cuda")
    torch.cuda.synchronize()
    out = {}
    for name, fn, n in (
        ("launch_us", lambda: x.add_(1), 2000),
        ("pinned_h2d_4kB_us", lambda: dev.copy_(pinned, non_blocking=True), 1000),
        ("pageable_h2d_4kB_us", lambda: dev.copy_(pinned.clone(), non_blocking=True), 300),
        ("launch_and_item_us", lambda: x.add_(1).item(), 500),
    ):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        out[name] = (time.perf_counter() - t0) / n * 1e6
    return out


def step_phases(engine: LLMEngine, prompt_len: int, steps: int = 500) -> dict:
    """Where a batch-1 decode step's wall time goes (host timers around the engine's parts; no extra syncs)."""
    acc: dict[str, list[float]] = {}

    def timed(name, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc.setdefault(name, []).append(time.perf_counter() - t0)

        return wrapper

    sched, runner, graphs = engine.scheduler, engine.runner, engine.runner.graphs
    sched.schedule = timed("schedule", sched.schedule)
    if hasattr(graphs, "_fill"):  # DecodeGraphs (sdpa)
        graphs._fill = timed("fill inputs", graphs._fill)
    else:  # StepGraphs (triton): numpy fill of the pinned buffer + the one copy
        graphs.buffer.pack = timed("fill inputs + copy", graphs.buffer.pack)
    graphs.run = timed("graphs.run (fill + copy + replay launch)", graphs.run)
    runner.launch = timed("runner.launch (all but the read-back)", runner.launch)
    sched.postprocess = timed("postprocess", sched.postprocess)
    engine.step = timed("engine.step", engine.step)
    from budgetscope.engine.model_runner import PendingTokens

    wait = PendingTokens.wait
    PendingTokens.wait = timed("wait for the sampled ids (the GPU)", wait)
    try:
        decode(engine, 1, 0, prompt_len, steps)
    finally:
        PendingTokens.wait = wait
    st = next(iter(graphs._static.values())) if hasattr(graphs, "_static") else graphs._get(1)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(50):
        st.graph.replay()
    end.record()
    torch.cuda.synchronize()
    out = {k: statistics.median(v) * 1e3 for k, v in acc.items()}  # median per call
    out["graph GPU time (batch-1 bucket, back to back)"] = start.elapsed_time(end) / 50
    return out


def about() -> dict:
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    out = {
        "gpu": pynvml.nvmlDeviceGetName(h),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "nvml": pynvml.nvmlSystemGetNVMLVersion(),
        "cuda_driver": pynvml.nvmlSystemGetCudaDriverVersion(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }
    try:
        from importlib.metadata import version

        out["nvidia_ml_py"] = version("nvidia-ml-py")
    except Exception:  # noqa: BLE001 - one failing case is reported and the run goes on
        pass
    pynvml.nvmlShutdown()
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds of timed decode per configuration")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--modes", default="graphs,eager", help="graphs, compiled, eager (eager at batch 1 only)")
    ap.add_argument(
        "--attention",
        default="auto",
        choices=["auto", "triton", "sdpa"],
        help="the engine's attention backend (mode `compiled` always runs sdpa)",
    )
    ap.add_argument("--no-tape", action="store_true", help="do not record the NVML tape")
    ap.add_argument("--no-sampler-cost", action="store_true")
    args = ap.parse_args()
    global ATTENTION
    ATTENTION = args.attention
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict = {"about": about()}
    print(json.dumps(figures["about"]), flush=True)

    bw = copy_bandwidth()
    figures["copy_bytes_per_s"] = bw
    print(f"copy bandwidth (read + written): {bw / 1e12:.3f} TB/s", flush=True)

    prompt_len, max_tokens = 128, 512
    figures["decode"] = []
    for batch in [int(b) for b in args.batches.split(",")]:
        for mode in args.modes.split(","):
            if mode == "eager" and batch != 1:
                continue
            eager = mode == "eager"
            t0 = time.perf_counter()
            engine = make_engine(batch, mode, max_tokens, prompt_len)
            build_s = time.perf_counter() - t0
            decode(engine, batch, 0.3, prompt_len, 32)  # warm-up (cuBLAS, allocator)
            engine.runner.graph_steps = 0
            sink = ListSink()
            sampler = GpuSampler(every_s=0.1, sink=sink, flush_every_s=0.5)
            tape = None
            if batch == 8 and not args.no_tape and "tape" not in figures:  # the NVML tape fixture, during decode
                figures["tape"] = True
                from budgetscope.instrument.nvml_tape import NvmlTape

                holder = {}

                def rec():
                    import pynvml

                    holder["tape"] = NvmlTape.record(pynvml, ticks=30, every_s=0.1, about=figures["about"])

                tape = threading.Thread(target=rec)
            sampler.start()
            if tape is not None:
                tape.start()
            r = decode(engine, batch, args.seconds, prompt_len, max_tokens)
            if tape is not None:
                tape.join()
                holder["tape"].save(str(out / "nvml_tape.json"))
            sampler.stop()
            r.update(
                mode=mode,
                eager=eager,
                build_s=build_s,
                fraction_of_copy=r["estimated_bytes_per_s"] / bw,
                graphs=engine.runner.graphs.num_graphs if engine.runner.graphs else 0,
                capture_s=engine.runner.graphs.capture_s if engine.runner.graphs else 0.0,
            )
            r["gpm"] = gpm_over(sink.points, r.pop("windows"))
            g = r["gpm"]
            if g["gpm_bytes_per_s"]:
                r["gpm_over_estimate"] = g["gpm_bytes_per_s"] / r["estimated_bytes_per_s"]
            figures["decode"].append(r)
            print(
                f"1b batch {batch:>2} {mode:>8}: {r['tokens_per_s']:,.0f} tok/s, step "
                f"{r['step_ms_median']:.3f} ms (p99 {r['step_ms_p99']:.3f}), {r['bytes_per_step_mean'] / 1e9:.3f} GB "
                f"a step -> {r['estimated_bytes_per_s'] / 1e12:.3f} TB/s = {100 * r['fraction_of_copy']:.1f}% of copy; "
                f"GPM DRAM {g['dram_util_mean']} of peak {g['peak_bytes_per_s']} over {g['samples']} samples "
                f"-> GPM/estimate {r.get('gpm_over_estimate')}; graphs {r['graphs']} in {r['capture_s']:.1f} s",
                flush=True,
            )
            del engine
            torch.cuda.empty_cache()

    figures["cuda_call_costs_us"] = cuda_call_costs()
    print(f"CUDA call host costs (us): {figures['cuda_call_costs_us']}", flush=True)
    first = args.modes.split(",")[0]
    engine = make_engine(1, first, 600, prompt_len)
    figures["step_phases_ms"] = step_phases(engine, prompt_len)
    print(
        "batch-1 step phases (ms a step): " + ", ".join(f"{k} {v:.3f}" for k, v in figures["step_phases_ms"].items()),
        flush=True,
    )
    del engine
    torch.cuda.empty_cache()

    if args.no_sampler_cost:
        (out / "gpu_figures.json").write_text(json.dumps(figures, indent=2, default=str))
        return
    # the sampler's effect on batch-1 decode, and its own CPU time (real NVML calls included)
    engine = make_engine(1, first, 256, prompt_len)
    decode(engine, 1, 0.3, prompt_len, 32)
    arms = {}
    for arm in ("off", "on", "off", "on"):
        sampler = None
        if arm == "on":
            sampler = GpuSampler(every_s=0.1, sink=ListSink(), flush_every_s=1.0)
            sampler.start()
        r = decode(engine, 1, 1.5, prompt_len, 256)
        if sampler is not None:
            sampler.stop()
        arms.setdefault(arm, []).append(r["tokens_per_s"])
    figures["sampler_effect_batch1_tok_s"] = {k: statistics.mean(v) for k, v in arms.items()}
    print(f"batch-1 decode with the sampler off / on: {figures['sampler_effect_batch1_tok_s']}", flush=True)
    del engine
    torch.cuda.empty_cache()
    figures["sampler_cost"] = [sampler_cost(10.0, gpm=True), sampler_cost(10.0, gpm=False)]
    for c in figures["sampler_cost"]:
        print(
            f"sampler 10 Hz {'with' if c['gpm'] else 'without'} GPM: {c['ticks']} ticks, CPU {c['cpu_ms']:.1f} ms = "
            f"{100 * c['share_of_one_core']:.3f}% of one core ({c['us_per_tick']:.0f} us CPU, "
            f"{c['wall_us_per_tick']:.0f} us wall a tick)",
            flush=True,
        )
    if (out / "nvml_tape.json").exists():  # what each NVML call cost on this machine
        from budgetscope.instrument.nvml_tape import NvmlTape

        calls: dict[str, list[int]] = {}
        for c in NvmlTape.load(str(out / "nvml_tape.json")).calls:
            calls.setdefault(c["fn"], []).append(c.get("us", 0))
        figures["nvml_call_us_median"] = {k: statistics.median(v) for k, v in calls.items()}
        print(f"NVML call times (us, median): {figures['nvml_call_us_median']}", flush=True)
    (out / "gpu_figures.json").write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    main()
