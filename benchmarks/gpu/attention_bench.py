"""On a CUDA GPU: one `1b` layer's attention over the paged KV cache, three ways. Prints a table (not a test).

The layer: 32 query heads, 8 KV heads, head_dim 64, bfloat16, 16-token pages drawn at random from the cache.
Two steps: (a) 56 decode rows with ~1k tokens of context each; (b) the same plus one 256-token prefill chunk.
Each variant writes the step's K/V into the cache and computes the attention:

- `gather+SDPA`: the engine's "sdpa" backend (LlamaAttention._paged on the sdpa Batch: gather into padded
  tensors, SDPA for the decode rows, one SDPA per prefill chunk);
- `triton`: the engine's "triton" backend (`paged_attention.py`, one kernel over the block tables);
- `flex`: FlexAttention (compiled) with a block mask over the page table (query token i may see cache slot j when
  slot j belongs to i's sequence at a position <= i's); the mask is built per step, timed apart.

GPU time: CUDA events around each call, median of many after a warm-up. Host time: what the call costs the host
to enqueue (median), i.e. the cost the engine's step pays before the GPU runs. `max err`: against a float64
reference. A variant that fails prints its error and the others go on.

    python benchmarks/gpu/attention_bench.py [--iters 100]
    TRITON_INTERPRET=1 python benchmarks/gpu/attention_bench.py --device cpu --dtype float32 \
        --decode 3 --context 40 --chunk 20 --iters 1      # a dry run of the script on a CPU
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from budgetscope.engine.batch import StepBuffer, StepShape
from budgetscope.engine.model import LlamaAttention
from budgetscope.engine.model_config import named_config
from budgetscope.engine.model_runner import ModelRunner
from budgetscope.engine.paged_attention import paged_attention_reference
from budgetscope.engine.scheduler import ScheduledBatch

BLOCK = 16


class FakeSeq:
    """Only what the runner's metadata builders read: tokens, cached count, block table."""

    def __init__(self, num_tokens: int, computed: int, table: list[int]):
        self.token_ids = [1] * num_tokens
        self.num_computed_tokens = computed
        self.block_table = table


def make_step(decode: int, context: int, chunk: int, gen: torch.Generator, num_blocks: int) -> ScheduledBatch:
    """decode rows with context ~`context` (+-10 %), then one prefill chunk of `chunk` tokens (none if 0)."""
    free = torch.randperm(num_blocks, generator=gen).tolist()
    step = ScheduledBatch()
    lengths = torch.randint(int(context * 0.9), int(context * 1.1), (decode,), generator=gen).tolist()
    for n in lengths:  # n cached tokens + one new
        pages = -(-(n + 1) // BLOCK)
        step.seqs.append(FakeSeq(n + 1, n, [free.pop() for _ in range(pages)]))
        step.num_new_tokens.append(1)
        step.is_sampled.append(True)
        step.inflight_src.append(-1)  # every input on the host
    if chunk:
        step.seqs.append(FakeSeq(chunk, 0, [free.pop() for _ in range(-(-chunk // BLOCK))]))
        step.num_new_tokens.append(chunk)
        step.is_sampled.append(True)
        step.inflight_src.append(-1)
    return step


def time_it(fn, iters: int, warmup: int = 5) -> tuple[float, float]:
    """(median GPU ms by CUDA events, median host ms to enqueue) over iters calls."""
    for _ in range(warmup):
        fn()
    if not torch.cuda.is_available():  # --device cpu (a dry run of this script): wall time only
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times), statistics.median(times)
    torch.cuda.synchronize()
    gpu, host = [], []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        host.append((time.perf_counter() - t0) * 1e3)
        end.synchronize()
        gpu.append(start.elapsed_time(end))
    return statistics.median(gpu), statistics.median(host)


_FLEX = {}


def flex_variant(q, k, v, k_cache, v_cache, paged, q_rows: int):
    """A callable running FlexAttention for this step, and the ms its block mask took to build.

    Queries are padded to q_rows (rows no sequence owns: fully masked, their blocks skipped), so that both steps
    share one compiled kernel: compiling costs tens of seconds a shape."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    dev = q.device
    tokens, slots = q.shape[0], k_cache.shape[0]
    qsl, lens, tables = paged.query_start_loc, paged.seq_lens, paged.block_tables
    q_lens = qsl[1:] - qsl[:-1]
    seq_of_token = torch.full((q_rows,), -2, dtype=torch.long, device=dev)
    seq_of_token[:tokens] = torch.repeat_interleave(torch.arange(lens.shape[0], device=dev), q_lens)
    pos_of_token = torch.full((q_rows,), -1, dtype=torch.long, device=dev)
    pos_of_token[:tokens] = paged.positions
    # slot -> (owner sequence, logical position); -1 where no sequence owns it
    owner = torch.full((slots,), -1, dtype=torch.long, device=dev)
    logical = torch.zeros(slots, dtype=torch.long, device=dev)
    for s in range(lens.shape[0]):
        n = int(lens[s])
        pos = torch.arange(n, device=dev)
        slot = tables[s, pos // BLOCK] * BLOCK + pos % BLOCK
        owner[slot], logical[slot] = s, pos

    def mask_mod(b, h, q_idx, kv_idx):
        return (owner[kv_idx] == seq_of_token[q_idx]) & (logical[kv_idx] <= pos_of_token[q_idx])

    sync()
    t0 = time.perf_counter()
    block_mask = create_block_mask(mask_mod, None, None, q_rows, slots, device=dev)
    sync()
    mask_ms = (time.perf_counter() - t0) * 1e3
    compiled = _FLEX.setdefault("fn", torch.compile(flex_attention, dynamic=False))
    kc, vc = k_cache.permute(1, 0, 2)[None], v_cache.permute(1, 0, 2)[None]
    padded_q = torch.zeros(q_rows, *q.shape[1:], dtype=q.dtype, device=dev)
    padded_q[:tokens] = q

    def run():
        k_cache.index_copy_(0, paged.slot_mapping, k)
        v_cache.index_copy_(0, paged.slot_mapping, v)
        out = compiled(padded_q.permute(1, 0, 2)[None], kc, vc, block_mask=block_mask, enable_gqa=True)
        return out[0, :, :tokens].permute(1, 0, 2)

    return run, mask_ms


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def scenario(name: str, step: ScheduledBatch, num_blocks: int, args, rows: list, deadline: float) -> None:
    cfg = named_config("1b")
    heads, kv_heads, dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    dev, dtype, iters = torch.device(args.device), getattr(torch, args.dtype), args.iters
    gen = torch.Generator(device=dev).manual_seed(1)
    shape = ((num_blocks + 1) * BLOCK, kv_heads, dim)
    k_cache = torch.randn(shape, generator=gen, device=dev).to(dtype)
    v_cache = torch.randn(shape, generator=gen, device=dev).to(dtype)
    tokens = step.num_tokens
    q = torch.randn(tokens, heads, dim, generator=gen, device=dev).to(dtype)
    k = torch.randn(tokens, kv_heads, dim, generator=gen, device=dev).to(dtype)
    v = torch.randn(tokens, kv_heads, dim, generator=gen, device=dev).to(dtype)
    kv = SimpleNamespace(block_size=BLOCK, scratch_block=num_blocks, layers=[(k_cache, v_cache)])
    sdpa_runner = ModelRunner(None, kv, dev, attention="sdpa")
    width = max(len(s.block_table) for s in step.seqs)
    paged_shape = StepShape(tokens, len(step.seqs), width, sum(step.is_sampled))
    paged = StepBuffer(paged_shape.size, dev).pack(
        paged_shape, step.seqs, step.num_new_tokens, step.is_sampled, BLOCK, num_blocks
    )
    k_cache.index_copy_(0, paged.slot_mapping, k)
    v_cache.index_copy_(0, paged.slot_mapping, v)
    want = paged_attention_reference(
        q, k_cache, v_cache, paged.query_start_loc, paged.seq_lens, paged.block_tables, BLOCK
    )
    with torch.device("meta"):
        layer = LlamaAttention(cfg)  # no weights needed: _paged only reads the cache

    def sdpa_fn():
        batch = sdpa_runner.prepare(step)  # part of today's per-step host cost; shared by a step's 16 layers
        return layer._paged(q, k, v, batch, (k_cache, v_cache))

    sdpa_batch = sdpa_runner.prepare(step)
    variants = [
        ("gather+SDPA", lambda: layer._paged(q, k, v, sdpa_batch, (k_cache, v_cache))),
        ("gather+SDPA +prepare", sdpa_fn),
        ("triton", lambda: layer._paged(q, k, v, paged, (k_cache, v_cache))),
        ("flex", None),
    ]
    for label, fn in variants:
        note = ""
        try:
            if label == "flex":
                if time.perf_counter() > deadline:
                    raise RuntimeError("skipped: the run is past its time budget")
                t0 = time.perf_counter()
                fn, mask_ms = flex_variant(q, k, v, k_cache, v_cache, paged, args.decode + args.chunk)
                fn()
                note = f"block mask {mask_ms:.2f} ms/step; compile {time.perf_counter() - t0:.1f} s"
            with torch.inference_mode():
                out = fn()
                err = (out.double().cpu() - want).abs().max().item()
                gpu_ms, host_ms = time_it(fn, iters)
            rows.append((name, label, f"{gpu_ms:.3f}", f"{host_ms:.3f}", f"{err:.2e}", note))
        except Exception as e:  # noqa: BLE001 - one variant failing must not stop the others
            line = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160]
            rows.append((name, label, "-", "-", "-", line))
            print(f"{name} / {label} failed: {line}", file=sys.stderr)
            if "--verbose" in sys.argv:
                traceback.print_exc()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--decode", type=int, default=56)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--budget-s", type=float, default=45.0, help="skip FlexAttention once this has passed")
    parser.add_argument("--verbose", action="store_true", help="tracebacks of failed variants")
    parser.add_argument(
        "--device",
        default="cuda",
        help="cpu: a dry run of the script (TRITON_INTERPRET=1, --dtype float32, small sizes); figures mean nothing",
    )
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("attention_bench: needs a CUDA GPU (or --device cpu for a dry run)")
    deadline = time.perf_counter() + args.budget_s
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu (dry run)"
    print(f"device: {name}, torch {torch.__version__}, {args.dtype}")
    gen = torch.Generator().manual_seed(0)
    num_blocks = (args.decode + 1) * (-(-int(args.context * 1.1 + args.chunk) // BLOCK) + 1)
    rows: list[tuple] = []
    scenario(
        f"(a) {args.decode} decode @~{args.context}",
        make_step(args.decode, args.context, 0, gen, num_blocks),
        num_blocks,
        args,
        rows,
        deadline,
    )
    scenario(
        f"(b) (a) + {args.chunk}-token chunk",
        make_step(args.decode, args.context, args.chunk, gen, num_blocks),
        num_blocks,
        args,
        rows,
        deadline,
    )
    header = ("step", "variant", "GPU ms", "host ms", "max err", "note")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header, tuple("-" * w for w in widths)] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


if __name__ == "__main__":
    main()
