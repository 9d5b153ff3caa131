"""On a CUDA GPU: a step that carries a 256-token prefill chunk next to ~56 decoding sequences, against a
decode-only step, for each attention backend in one run. Prints figures (not a test).

In-process (no HTTP), `1b` in bfloat16, random weights: 56 sequences decode (256-token prompts, greedy,
ignore_eos) while a new 256-token prompt arrives every tenth step. Step time = wall time of `LLMEngine.step()`
with the GPU synchronised before and after (host work included). The target of issue 25: mixed <= 2x decode.

    python benchmarks/gpu/mixed_step_bench.py [--attention sdpa,triton] [--steps 200]
    python benchmarks/gpu/mixed_step_bench.py --device cpu --config tiny --attention sdpa --decode 4 --steps 20
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from budgetscope.engine.engine_config import EngineConfig  # noqa: E402
from budgetscope.engine.llm_engine import LLMEngine  # noqa: E402
from budgetscope.engine.sampling_params import SamplingParams  # noqa: E402


def measure(attention: str, args) -> dict:
    t0 = time.perf_counter()
    engine = LLMEngine(EngineConfig(model=args.config, max_model_len=2048, max_num_seqs=64,
                                    max_num_batched_tokens=512, num_kv_blocks=64 * 2048 // 16 + 16,
                                    enable_prefix_caching=False, attention_backend=attention, device=args.device))
    start_s = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(0)
    vocab = engine.model_config.vocab_size

    def add(max_tokens: int):
        prompt = [1] + torch.randint(2, vocab, (255,), generator=gen).tolist()
        seq = engine.make_sequence(prompt, SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
        engine.add(seq)
        return seq

    seqs = [add(1700) for _ in range(args.decode)]
    while any(s.num_computed_tokens < s.num_prompt_tokens for s in seqs):
        engine.step()
    for _ in range(20):
        engine.step()
    times = {"decode": [], "mixed": []}
    for k in range(args.steps):
        if k % 10 == 0:
            seqs.append(add(40))
        prefill = any(not s.is_finished and s.num_computed_tokens < s.num_prompt_tokens for s in seqs)
        sync()
        t0 = time.perf_counter()
        engine.step()
        sync()
        times["mixed" if prefill else "decode"].append((time.perf_counter() - t0) * 1e3)
    out = {"attention": engine.attention_backend, "start_s": start_s,
           "graphs": getattr(engine.runner.graphs, "num_graphs", 0), "graph_steps": engine.runner.graph_steps}
    for kind, values in times.items():
        out[kind] = statistics.median(values) if values else float("nan")
        out[kind + "_n"] = len(values)
    del engine, seqs
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attention", default="sdpa,triton", help="backends, comma-separated, in this order")
    parser.add_argument("--config", default="1b")
    parser.add_argument("--decode", type=int, default=56)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script (--config tiny)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("mixed_step_bench: needs a CUDA GPU (or --device cpu --config tiny for a dry run)")
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu (dry run)"
    print(f"device: {name}, torch {torch.__version__}, config {args.config}, "
          f"{args.decode} decoding + a 256-token prompt every 10th step")
    print(f"{'attention':<10} {'start s':>8} {'graphs':>6} {'decode ms':>10} {'mixed ms':>9} {'mixed/decode':>12}  steps")
    for attention in args.attention.split(","):
        try:
            r = measure(attention.strip(), args)
        except Exception as e:  # noqa: BLE001 - one backend failing must not hide the other's figures
            print(f"{attention:<10} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        print(f"{r['attention']:<10} {r['start_s']:>8.1f} {r['graphs']:>6} {r['decode']:>10.2f} {r['mixed']:>9.2f} "
              f"{r['mixed'] / r['decode']:>11.1f}x  {r['decode_n']} decode, {r['mixed_n']} mixed, "
              f"{r['graph_steps']} as graphs", flush=True)


if __name__ == "__main__":
    main()
