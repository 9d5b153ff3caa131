"""In-process, on a GPU: what a step that carries a prefill chunk costs beside decode-only steps, and the engine's
output tokens/s at a full batch with no server in the way.

    python benchmarks/gpu/step_mix.py mixed [--config 1b] [--attention triton] [--profile-steps 100]
    python benchmarks/gpu/step_mix.py saturate [--config 1b] [--max-seqs 64] [--seconds 15]

`mixed`: ~56 sequences decode (256-token prompts, long outputs) and every tenth step a new 256-token prompt arrives,
so one step in ten carries a prefill chunk. Each step is timed on the wall clock between two synchronizes (the step's
whole cost: host work and kernels). With --profile-steps, that many more steps run under the PyTorch profiler and
the kernels' share of the wall time is printed.

`saturate`: --max-seqs sequences always running, 256-token prompts and 256 output tokens each (a new request
replaces each finished one), the same mix a served load at saturation gives; output tokens/s over --seconds after a
warm-up. docs/engine.md compares it with the served figure at the same batch.

Prints one JSON line per result (prefixed `RESULT `). Runs against any budgetscope engine that has LLMEngine and
EngineConfig (options the engine does not know are left out, so older engines can be measured by the same script).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

if "budgetscope" not in sys.modules:  # run from a checkout: the project on the path unless PYTHONPATH names one
    import os

    if not os.environ.get("PYTHONPATH"):
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.sampling_params import SamplingParams


def engine_for(args, **knobs) -> LLMEngine:
    """An engine with the knobs this engine's EngineConfig knows (an older engine lacks `attention_backend`)."""
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    if args.attention:
        if "attention_backend" not in fields:
            sys.exit(f"this engine has no attention_backend option ({EngineConfig.__module__})")
        knobs["attention_backend"] = args.attention
    return LLMEngine(EngineConfig(model=args.config, **{k: v for k, v in knobs.items() if k in fields}))


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def mixed(args) -> dict:
    cuda = torch.cuda.is_available()
    n_dec, steps = (56, args.steps) if cuda else (8, 40)
    eng = engine_for(
        args,
        max_model_len=2048,
        max_num_seqs=64,
        max_num_batched_tokens=512,
        num_kv_blocks=64 * 2048 // 16 + 16,
        enable_prefix_caching=False,
    )
    gen = torch.Generator().manual_seed(0)
    vocab = eng.model_config.vocab_size

    def prompt(n):
        return [1] + torch.randint(2, vocab, (n - 1,), generator=gen).tolist()

    seqs = []
    for _ in range(n_dec):
        s = eng.make_sequence(prompt(256), SamplingParams(max_tokens=1700, temperature=0, ignore_eos=True))
        eng.add(s)
        seqs.append(s)
    while any(s.num_computed_tokens < s.num_prompt_tokens for s in seqs):
        eng.step()
    for _ in range(20):
        eng.step()

    def run(n):
        out = {"mixed": [], "decode": []}
        for k in range(n):
            if k % 10 == 0:
                s = eng.make_sequence(prompt(256), SamplingParams(max_tokens=40, temperature=0, ignore_eos=True))
                eng.add(s)
                seqs.append(s)
            pre = any((not s.is_finished) and s.num_computed_tokens < s.num_prompt_tokens for s in seqs)
            sync()
            t0 = time.perf_counter()
            eng.step()
            sync()
            out["mixed" if pre else "decode"].append(time.perf_counter() - t0)
        return out

    run(30)  # warm-up: compiles, graph buckets, allocator
    r = run(steps)
    result = {
        "what": "mixed",
        "config": args.config,
        "attention": args.attention or "default",
        "running": sum(1 for s in seqs if not s.is_finished),
    }
    for k, v in r.items():
        if v:
            result[k] = {"steps": len(v), "median_ms": 1e3 * statistics.median(v), "p90_ms": 1e3 * percentile(v, 0.9)}
    if "mixed" in result and "decode" in result:
        result["mixed_over_decode"] = result["mixed"]["median_ms"] / result["decode"]["median_ms"]
    if cuda and args.profile_steps:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            run(args.profile_steps)
            wall = time.perf_counter() - t0
        events = prof.key_averages()
        kernel_s = sum(e.self_device_time_total for e in events) / 1e6
        result["profiled"] = {
            "steps": args.profile_steps,
            "wall_s": wall,
            "kernel_s": kernel_s,
            "kernel_share": kernel_s / wall,
        }
        print(events.table(sort_by="self_device_time_total", row_limit=10), flush=True)
        print(events.table(sort_by="cpu_time_total", row_limit=10), flush=True)
    return result


def saturate(args) -> dict:
    batch, prompt_len, out_len = args.max_seqs, 256, 256
    eng = engine_for(
        args,
        max_model_len=2048,
        max_num_seqs=batch,
        max_num_batched_tokens=512,
        num_kv_blocks=batch * (prompt_len + out_len) // 16 + 64,
        enable_prefix_caching=False,
    )
    gen = torch.Generator().manual_seed(1)
    vocab = eng.model_config.vocab_size
    params = SamplingParams(max_tokens=out_len, temperature=0, ignore_eos=True)

    def add(n):
        for _ in range(n):
            eng.add(eng.make_sequence([1] + torch.randint(2, vocab, (prompt_len - 1,), generator=gen).tolist(), params))

    add(batch + 8)
    tokens, t_start, warm_until = 0, None, time.perf_counter() + args.warmup
    while True:
        touched = eng.step()
        now = time.perf_counter()
        finished = sum(1 for s in touched if s.is_finished)
        if finished:
            add(finished)
        if now < warm_until:
            continue
        if t_start is None:
            t_start = now
            continue
        tokens += len(touched)
        if now - t_start >= args.seconds:
            break
    sync()
    wall = time.perf_counter() - t_start
    return {
        "what": "saturate",
        "config": args.config,
        "attention": args.attention or "default",
        "max_seqs": batch,
        "prompt_tokens": prompt_len,
        "output_tokens": out_len,
        "seconds": wall,
        "output_tokens_per_s": tokens / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["mixed", "saturate"])
    ap.add_argument("--config", default="1b")
    ap.add_argument("--attention", default=None, help="attention_backend (new engines only)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--profile-steps", type=int, default=0)
    ap.add_argument("--max-seqs", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    args = ap.parse_args()
    result = mixed(args) if args.what == "mixed" else saturate(args)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
