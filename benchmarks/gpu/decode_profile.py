"""Where a batch-1 decode step's GPU time goes, kernel by kernel: the step's CUDA graph replayed, and the same
step launched eagerly, each under torch.profiler with CUDA activity.

    python benchmarks/gpu/decode_profile.py [--config 1b] [--attention auto] [--steps 50] [--eager-steps 10]
    python benchmarks/gpu/decode_profile.py --config tiny --device cpu     # anywhere: CPU ops, no graphs

One sequence (a 128-token prompt, greedy; --prompt-tokens) decodes. After its prefill and a warm-up (--warmup-steps,
10), --steps decode steps run under
the profiler as the engine runs them on CUDA (graph replay), then --eager-steps with the engine's graphs set aside
(each kernel launched from Python; a few unprofiled steps first, which compile what eager shapes need). Each step
makes one token. Every device activity (kernels, memcpy, memset) is put in a group by its name (`GROUPS`, first
match wins; the fused Triton kernels have names of their own, the torch ops of the unfused path partly share
theirs, and what no pattern claims is "other") and printed per token: count, µs, share of the device time, the
groups and the kernels that cost most. Beside it, the floor: the weights' bytes over the device-to-device copy
bandwidth (bytes read + written, as benchmarks/bench_gpu.py measures it), and the graph's GPU time a token without
the profiler (CUDA events around back-to-back replays of the batch-1 bucket).

On a machine without CUDA there is no device activity: each op's self CPU time is grouped the same way, there is
no graph pass and no floor (both reported as null with the reason) — the mode benchmarks/gpu/session.py --smoke
runs to check this script.

Prints a table per pass and one line `RESULT {json}` per pass (session.py's `decodeprof` phase keeps them in
figures.json). With PYTHONPATH naming an older checkout, that engine is profiled (session.py --baseline).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

if "budgetscope" not in sys.modules and not os.environ.get("PYTHONPATH"):  # PYTHONPATH may name an older engine
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # bench_gpu: copy bandwidth, weight bytes

import torch
from torch.profiler import ProfilerActivity, profile

from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.sampling_params import SamplingParams

PROMPT_TOKENS = 128
WARMUP_STEPS = 10

# (group, pattern over the kernel or op name, case-insensitive); the first match wins, so the specific go first.
GROUPS = (
    ("rope+kv write", r"rope_write_kv"),  # the fused Triton kernel (fused_rope.py): rotary and the cache write
    ("attention", r"paged_attention|flash|fmha|attention|sdpa"),
    ("norm", r"rms_?norm|layer_?norm"),
    ("kv write", r"index_copy|indexcopy|index_put|scatter"),
    ("activation", r"silu|gelu|swiglu"),
    ("sampler", r"argmax|softmax|sort|multinomial|topk|cumsum|scan|distribution"),
    ("rope", r"catarray|aten::cat\b|neg_kernel|aten::neg\b"),  # unfused: in a decode step only _rope cats, negates
    ("gemm", r"gemm|gemv|cutlass|xmma|nvjet|cublas|splitk|aten::(mm|addmm|bmm|linear|matmul)\b"),
    ("copies", r"memcpy|memset|copy|index|gather|embedding|fill"),
)
_COMPILED = [(group, re.compile(pattern, re.IGNORECASE)) for group, pattern in GROUPS]


def group_of(name: str) -> str:
    """The GROUPS entry whose pattern first matches `name`; "other" when none does."""
    return next((group for group, rx in _COMPILED if rx.search(name)), "other")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def activities(prof, on_cuda: bool) -> list[tuple[str, float]]:
    """(name, µs) of every device activity (CUDA), or of every CPU op's self time (elsewhere)."""
    out = []
    for e in prof.events():
        if on_cuda and e.device_type.name == "CUDA":
            out.append((e.name, e.time_range.elapsed_us()))
        elif not on_cuda and e.device_type.name == "CPU" and not e.name.startswith("["):
            out.append((e.name, e.self_cpu_time_total))
    return out


def summarize(acts: list[tuple[str, float]], tokens: int, top: int = 15) -> dict:
    """Per-token count and µs of every group and of the costliest names; shares of the summed time."""
    by_name: dict[str, list[float]] = defaultdict(list)
    for name, us in acts:
        by_name[name].append(us)
    total = sum(us for _, us in acts) or 1.0
    groups: dict[str, dict] = {}
    for name, times in by_name.items():
        g = groups.setdefault(group_of(name), {"count_per_token": 0.0, "us_per_token": 0.0})
        g["count_per_token"] += len(times) / tokens
        g["us_per_token"] += sum(times) / tokens
    for g in groups.values():
        g["share"] = g["us_per_token"] * tokens / total
    names = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {
        "tokens": tokens,
        "count_per_token": len(acts) / tokens,
        "us_per_token": total / tokens,
        "groups": dict(sorted(groups.items(), key=lambda kv: -kv[1]["us_per_token"])),
        "top": [
            {
                "name": name[:140],
                "group": group_of(name),
                "count_per_token": len(times) / tokens,
                "us_per_token": sum(times) / tokens,
                "median_us": statistics.median(times),
            }
            for name, times in names
        ],
    }


def profiled(engine: LLMEngine, steps: int) -> tuple[dict, float]:
    """(summary of `steps` decode steps under the profiler, their wall ms a token with the profiler on)."""
    on_cuda = engine.device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    sync(engine.device)
    with profile(activities=acts) as prof:
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            engine.step()
        sync(engine.device)
        wall_ns = time.perf_counter_ns() - t0
    return summarize(activities(prof, on_cuda), steps), wall_ns / 1e6 / steps


def graph_gpu_ms(engine: LLMEngine, reps: int = 50) -> float | None:
    """GPU ms of one replay of the batch-1 bucket's graph, back to back with CUDA events (no profiler)."""
    graphs = engine.runner.graphs
    if graphs is None or not graphs.num_graphs:
        return None
    graph = graphs._get(1).graph if hasattr(graphs, "sizes") else next(iter(graphs._static.values())).graph
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def floor(engine: LLMEngine) -> dict:
    """The weights' bytes, the copy bandwidth and the step's floor (weights at copy speed); null off CUDA."""
    if engine.device.type != "cuda":
        return {"floor_ms": None, "why_no_floor": "no CUDA device: no copy bandwidth to compare with"}
    from bench_gpu import copy_bandwidth, weight_bytes

    wbytes, bw = weight_bytes(engine.model), copy_bandwidth(gib=1.0)
    return {"weight_bytes": wbytes, "copy_bytes_per_s": bw, "floor_ms": 1e3 * wbytes / bw}


def print_pass(what: str, result: dict) -> None:
    unit = "device" if result["device"] == "cuda" else "CPU op self"
    print(
        f"\n== {what}: {result['count_per_token']:.0f} activities, {result['us_per_token']:.1f} µs of {unit} time "
        f"a token; wall {result['wall_ms_per_token']:.3f} ms a token under the profiler",
        flush=True,
    )
    if result.get("floor_ms"):
        print(f"   floor (weights at copy speed) {result['floor_ms']:.3f} ms a token", flush=True)
    print(f"   {'group':<14} {'count':>7} {'µs':>9} {'share':>6}")
    for name, g in result["groups"].items():
        print(f"   {name:<14} {g['count_per_token']:>7.1f} {g['us_per_token']:>9.1f} {g['share']:>6.1%}")
    print(f"   {'costliest':<60} {'group':<13} {'count':>6} {'µs':>8} {'median':>7}")
    for k in result["top"]:
        print(
            f"   {k['name'][:60]:<60} {k['group']:<13} {k['count_per_token']:>6.1f} {k['us_per_token']:>8.1f} "
            f"{k['median_us']:>7.1f}"
        )


def make_engine(args) -> LLMEngine:
    """A batch-1 engine and the tokens its one sequence needs; knobs an older EngineConfig lacks are left out."""
    need = args.prompt_tokens + args.warmup_steps + args.steps + 2 * args.eager_steps + 16
    knobs = dict(
        model=args.config,
        device=args.device,
        max_model_len=2048,
        max_num_seqs=1,
        max_num_batched_tokens=512,
        num_kv_blocks=-(-need // 16) + 16,
        enable_prefix_caching=False,
        attention_backend=args.attention,
    )
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    return LLMEngine(EngineConfig(**{k: v for k, v in knobs.items() if k in fields})), need


def attention_splits(engine) -> dict | None:
    """The split-KV setting the Triton attention ran with, and the splits of a batch-1 decode step (None: sdpa, or an
    engine from before split-KV)."""
    module = sys.modules.get("budgetscope.engine.paged_attention")
    if getattr(engine, "attention_backend", "sdpa") != "triton" or not hasattr(module, "kv_splits"):
        return None
    return {**module.SPLIT, "batch1": module.kv_splits(1, engine.model_config.num_key_value_heads)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="1b")
    ap.add_argument("--device", default="auto", help="auto: cuda when there is one")
    ap.add_argument("--attention", default="auto", choices=["auto", "triton", "sdpa"])
    ap.add_argument("--steps", type=int, default=50, help="decode steps profiled as the engine runs them")
    ap.add_argument("--eager-steps", type=int, default=10, help="decode steps profiled with the graphs set aside")
    ap.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS, help="the sequence's prompt")
    ap.add_argument("--warmup-steps", type=int, default=WARMUP_STEPS, help="decode steps run before any is profiled")
    args = ap.parse_args()
    engine, need = make_engine(args)
    vocab = engine.model_config.vocab_size
    prompt = [1] + torch.randint(
        2, vocab, (args.prompt_tokens - 1,), generator=torch.Generator().manual_seed(0)
    ).tolist()
    seq = engine.make_sequence(
        prompt, SamplingParams(max_tokens=need - args.prompt_tokens, temperature=0, ignore_eos=True)
    )
    engine.add(seq)
    while seq.num_computed_tokens < seq.num_prompt_tokens:
        engine.step()
    for _ in range(args.warmup_steps):
        engine.step()
    common = {
        "engine": str(Path(sys.modules["budgetscope"].__file__).parent),  # which checkout was profiled
        "config": args.config,
        "attention": getattr(engine, "attention_backend", "sdpa"),
        "device": engine.device.type,
        "dtype": str(engine.dtype),
        "kv_splits": attention_splits(engine),
        **floor(engine),
    }
    graphs = engine.runner.graphs
    passes = []
    if graphs is not None:
        summary, wall = profiled(engine, args.steps)
        passes.append(("graph", {**summary, "wall_ms_per_token": wall, "graph_gpu_ms": graph_gpu_ms(engine)}))
    else:
        print("RESULT " + json.dumps({**common, "pass": "graph", "why_none": "the engine has no graphs here"}))
    engine.runner.graphs = None  # the same engine, every kernel launched from Python
    for _ in range(3):
        engine.step()
    summary, wall = profiled(engine, args.eager_steps)
    passes.append(("eager", {**summary, "wall_ms_per_token": wall}))
    engine.runner.graphs = graphs
    for what, result in passes:
        result = {**common, "pass": what, **result}
        print_pass(f"{what} ({result['config']}, {result['attention']} attention, {result['dtype']})", result)
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
