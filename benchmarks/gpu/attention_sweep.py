"""On a CUDA GPU: sweep the paged-attention kernel's launch configuration on a long-context decode step.

One `1b` layer (32 query heads, 8 KV heads, head_dim 64, bfloat16, 16-token pages): a K/V cache sized for 256
sequences x 3,456 tokens with its pages shuffled at random, and a decode-only step of 256 rows, each over a context
of ~3,400 tokens (3,344..3,456). Every combination of tile_n x num_warps x num_stages is timed with CUDA events
(median of --iters calls after --warmup), and its bandwidth computed as the bytes the step must read at least —
K and V of every context once, plus q, plus out written — over that time. The table is sorted by bandwidth; the
best three are checked against the float64 reference on the first 8 sequences (max abs error). Then the best
configuration and today's default (`DEFAULT_LAUNCH`: 128-key tiles, 4 warps, 2 stages) are timed on the engine's short steps:
56 decode rows at ~1k context, and those plus one 256-token prompt chunk, so a config that wins at long context
is seen not to lose there. For each binary the table adds its registers, spills and shared memory a program,
and from them an estimate of the programs resident on an SM and of the waves the step's programs make (a step
of 1.1 waves runs its last wave nearly empty: a reason a configuration loses that is not its inner loop).

A configuration that fails (e.g. out of shared memory) prints its reason and the sweep goes on; configurations
not reached within --budget-s are listed as skipped. Compiling (~1 s a configuration) is done first by
--compile-workers processes at once, into Triton's on-disk cache. The last line
is machine-readable, for the environment variables `paged_attention` reads:

    BEST tile_n=.. num_warps=.. num_stages=.. GBps=.. fraction_of_4.25TBps=..

    python benchmarks/gpu/attention_sweep.py                  # on the GPU, < 60 s
    python benchmarks/gpu/attention_sweep.py --tiny           # a dry run on a CPU (TRITON_INTERPRET=1, float32,
                                                              # tiny sizes): the figures mean nothing
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
import traceback
from pathlib import Path

if "--tiny" in sys.argv:  # Triton reads this when it is first imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from attention_bench import time_it

from budgetscope.engine.paged_attention import (
    DEFAULT_LAUNCH,
    check_launch,
    paged_attention,
    paged_attention_reference,
)

BLOCK = 16
HEADS, KV_HEADS, DIM = 32, 8, 64  # the `1b` model's attention
COPY_TBPS = 4.25  # measured device-to-device copy bandwidth of the H200 the engine runs on, TB/s
TILES, WARPS, STAGES = (16, 32, 64, 128), (2, 4, 8), (1, 2, 3, 4)
DEFAULT = (DEFAULT_LAUNCH["tile_n"], DEFAULT_LAUNCH["num_warps"], DEFAULT_LAUNCH["num_stages"])  # today's launch
CHECK_SEQS = 8
RESOURCES: dict[tuple, tuple[str, str, str]] = {}  # config -> resources() of its binary, as first loaded


def sizes(tiny: bool) -> dict:
    """The scenario's sizes: the real ones, or a few pages for the CPU dry run."""
    if tiny:
        return {
            "seqs": 4,
            "max_context": 96,
            "context": (60, 96),
            "short_rows": 3,
            "short_context": (30, 40),
            "chunk": 20,
        }
    return {
        "seqs": 256,
        "max_context": 3456,
        "context": (3344, 3456),
        "short_rows": 56,
        "short_context": (900, 1100),
        "chunk": 256,
    }


class Cache:
    """A shuffled paged K/V cache of one layer, from which steps take their sequences' pages."""

    def __init__(self, seqs: int, max_context: int, dtype, device, gen: torch.Generator):
        self.width = -(-max_context // BLOCK)
        self.num_blocks = seqs * self.width
        shape = (self.num_blocks * BLOCK, KV_HEADS, DIM)
        self.k = torch.randn(shape, generator=gen, device=device).to(dtype)
        self.v = torch.randn(shape, generator=gen, device=device).to(dtype)
        self.free = torch.randperm(self.num_blocks, generator=gen, device=device).view(seqs, self.width)
        self.device, self.dtype, self.gen = device, dtype, gen

    def step(self, q_lens: list[int], seq_lens: list[int]) -> tuple:
        """(q, query_start_loc, seq_lens, block_tables) for sequences with these query counts and contexts."""
        n = len(q_lens)
        starts = torch.tensor([0] + list(itertools.accumulate(q_lens)), device=self.device)
        q = torch.randn(int(starts[-1]), HEADS, DIM, generator=self.gen, device=self.device).to(self.dtype)
        tables = self.free[:n].to(torch.int32).contiguous()
        return q, starts, torch.tensor(seq_lens, device=self.device), tables


def contexts(n: int, bounds: tuple[int, int], gen: torch.Generator) -> list[int]:
    return torch.randint(bounds[0], bounds[1] + 1, (n,), generator=gen).tolist()


def bytes_read(q: torch.Tensor, seq_lens: torch.Tensor) -> int:
    """K and V of every context once, q read and out written: the least the step must move, in bytes."""
    kv = int(seq_lens.sum()) * KV_HEADS * DIM * 2
    return (kv + 2 * q.numel()) * q.element_size()


def compiled_kernels() -> dict:
    """The paged-attention binaries this process has loaded, by Triton's cache key (empty if Triton hides them)."""
    from budgetscope.engine.paged_attention import _paged_attention_kernel
    from budgetscope.engine.triton_support import kernel

    try:
        caches = kernel(_paged_attention_kernel, ("num_seqs",)).device_caches.values()
        return {key: binary for cache in caches for key, binary in cache[0].items()}
    except (AttributeError, IndexError, TypeError):  # another Triton version: no resources column
        return {}


def resources(binary, num_warps: int, working: int) -> tuple[str, str, str]:
    """(regs/spills/shared KB, est. CTAs an SM, est. waves) of one binary, as text (CUDA only; '-' where unknown).

    The estimate takes the tightest of Hopper's limits (32 CTAs, 64 warps, 64 K registers, 227 KB shared memory
    an SM, 1 KB of it reserved a CTA), ignoring allocation granularity; waves: working programs / (SMs x CTAs)."""
    try:
        binary._init_handles()  # loads the binary if the launch has not (it sets n_regs, n_spills)
        regs, spills, shared = binary.n_regs, binary.n_spills, binary.metadata.shared
        per_sm = min(32, 64 // num_warps, 65536 // max(1, regs * 32 * num_warps), 227 * 1024 // (shared + 1024))
        waves = working / (torch.cuda.get_device_properties(0).multi_processor_count * max(per_sm, 1))
        return f"{regs}/{spills}/{shared / 1024:.0f}", str(per_sm), f"{waves:.2f}"
    except Exception:  # noqa: BLE001 - a column of context, never a reason to fail the configuration
        return "-", "-", "-"


def run_config(cache: Cache, step: tuple, config: tuple, args) -> tuple[float, torch.Tensor]:
    """(median GPU ms, output) of paged_attention on `step` with (tile_n, num_warps, num_stages)."""
    q, starts, lens, tables = step
    out = torch.empty_like(q)
    tile_n, num_warps, num_stages = config

    def fn():
        return paged_attention(
            q,
            cache.k,
            cache.v,
            starts,
            lens,
            tables,
            BLOCK,
            out=out,
            tile_n=tile_n,
            num_warps=num_warps,
            num_stages=num_stages,
        )

    before = compiled_kernels().keys()
    fn()  # compiles, or loads the binary compiled ahead
    added = [b for key, b in compiled_kernels().items() if key not in before]
    ms, _ = time_it(fn, args.iters, warmup=args.warmup)
    working = KV_HEADS * int((starts[1:] > starts[:-1]).sum())  # a decode row's program per KV head
    RESOURCES[config] = resources(added[0], num_warps, working) if len(added) == 1 else ("-", "-", "-")
    return ms, out


def reference_error(cache: Cache, step: tuple, out: torch.Tensor) -> float:
    """Max abs error of out's first CHECK_SEQS sequences (one query each) against the float64 reference.

    Their pages are copied into a compact cache first, so the reference does not copy the whole cache to the host."""
    q, starts, lens, tables = step
    n = min(CHECK_SEQS, lens.shape[0])
    pages = tables[:n].reshape(-1).long()
    compact_k = cache.k.view(-1, BLOCK, KV_HEADS, DIM)[pages].reshape(-1, KV_HEADS, DIM)
    compact_v = cache.v.view(-1, BLOCK, KV_HEADS, DIM)[pages].reshape(-1, KV_HEADS, DIM)
    compact_tables = torch.arange(pages.numel(), dtype=torch.int32).view(n, -1)
    rows = int(starts[n])
    want = paged_attention_reference(
        q[:rows], compact_k, compact_v, starts[: n + 1].cpu(), lens[:n].cpu(), compact_tables, BLOCK
    )
    return (out[:rows].double().cpu() - want).abs().max().item()


def failure(e: Exception) -> str:
    text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:140]
    if "--verbose" in sys.argv:
        traceback.print_exc()
    return text


def sweep(cache: Cache, step: tuple, configs: list[tuple], args, deadline: float) -> tuple[list, dict]:
    """Rows (config, ms, GB/s) that ran, and {config: output}; prints each failure or skip with its reason."""
    total = bytes_read(step[0], step[2])
    rows, outputs = [], {}
    for config in configs:
        label = "tile_n={} num_warps={} num_stages={}".format(*config)
        try:
            check_launch(*config)
        except ValueError as e:
            print(f"skip {label}: {e}")
            continue
        if time.perf_counter() > deadline and config != DEFAULT:  # the baseline always runs
            print(f"skip {label}: past the time budget (--budget-s)")
            continue
        try:
            ms, out = run_config(cache, step, config, args)
        except Exception as e:  # noqa: BLE001 - one configuration failing must not stop the sweep
            print(f"fail {label}: {failure(e)}")
            continue
        rows.append((config, ms, total / ms / 1e6))
        outputs[config] = out.clone()
    return rows, outputs


def print_table(header: tuple, rows: list[tuple]) -> None:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header, tuple("-" * w for w in widths)] + rows:
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))


def precompile(configs: list[tuple], size: dict, workers: int, device: torch.device, dtype) -> None:
    """Compile every configuration in `workers` processes at once, into Triton's on-disk cache.

    A compile takes ~1 s of the host, one at a time in one process: 48 of them would use up the run's minute.
    Each worker runs the kernel on a small step with the sweep's shapes and strides (so the same specialisation,
    hence the same cache entry); the sweep then loads the binaries. A failure here is left to the sweep to report."""
    import multiprocessing

    chunks = [configs[i::workers] for i in range(workers)]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.starmap(_compile_some, [(chunk, size["max_context"], str(device), dtype) for chunk in chunks if chunk])


def _compile_some(configs: list[tuple], max_context: int, device: str, dtype) -> None:
    gen = torch.Generator(device=device).manual_seed(0)
    cache = Cache(2, max_context, dtype, torch.device(device), gen)
    q, starts, lens, tables = cache.step([1, 1], [max_context - 1, max_context - 2])
    for tile_n, num_warps, num_stages in configs:
        try:
            paged_attention(
                q,
                cache.k,
                cache.v,
                starts,
                lens,
                tables,
                BLOCK,
                tile_n=tile_n,
                num_warps=num_warps,
                num_stages=num_stages,
            )
        except Exception:  # noqa: BLE001, S112 - the sweep reports it when it runs the configuration
            continue
    if device == "cuda":
        torch.cuda.synchronize()


def configs_in_order() -> list[tuple]:
    """Today's default first (the baseline), then the rest; an invalid value would be printed as skipped."""
    rest = [c for c in itertools.product(TILES, WARPS, STAGES) if c != DEFAULT]
    return [DEFAULT] + rest


def short_steps(cache: Cache, size: dict, gen: torch.Generator) -> list[tuple[str, tuple]]:
    """The engine's short steps: decode rows at ~1k context, and the same plus one prompt chunk."""
    lens = contexts(size["short_rows"], size["short_context"], gen)
    rows = size["short_rows"]
    decode = cache.step([1] * rows, lens)
    mixed = cache.step([1] * rows + [size["chunk"]], lens + [size["chunk"]])
    return [(f"{rows} decode @~{sum(lens) // rows}", decode), (f"{rows} decode + {size['chunk']}-token chunk", mixed)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="a dry run on a CPU (Triton's interpreter, float32)")
    parser.add_argument("--iters", type=int, default=30, help="timed calls a configuration (median)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=40.0, help="stop starting new configurations after this")
    parser.add_argument(
        "--compile-workers",
        type=int,
        default=8,
        help="processes compiling the configurations first (0: compile each as the sweep reaches it)",
    )
    parser.add_argument("--verbose", action="store_true", help="tracebacks of failed configurations")
    args = parser.parse_args()
    t_start = time.perf_counter()
    if args.tiny:
        device, dtype = torch.device("cpu"), torch.float32
        args.iters, args.warmup = min(args.iters, 1), 0
    elif torch.cuda.is_available():
        device, dtype = torch.device("cuda"), torch.bfloat16
    else:
        sys.exit("attention_sweep: needs a CUDA GPU (or --tiny for a dry run on the CPU)")
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (dry run, figures mean nothing)"
    print(f"device: {name}, torch {torch.__version__}, {dtype}")
    size = sizes(args.tiny)
    gen = torch.Generator(device=device).manual_seed(0)
    host_gen = torch.Generator().manual_seed(0)
    cache = Cache(size["seqs"], size["max_context"], dtype, device, gen)
    lens = contexts(size["seqs"], size["context"], host_gen)
    step = cache.step([1] * size["seqs"], lens)
    total = bytes_read(step[0], step[2])
    print(
        f"long decode step: {size['seqs']} rows, context {min(lens)}..{max(lens)} (mean {sum(lens) / len(lens):.0f}),"
        f" cache {2 * cache.k.numel() * cache.k.element_size() / 1e9:.2f} GB, {total / 1e6:.1f} MB read a call"
    )

    configs = configs_in_order()
    # the interpreter compiles nothing: in a dry run two workers run two configurations, to try the machinery
    ahead = configs[:2] if args.tiny else configs
    args.compile_workers = min(args.compile_workers, len(ahead))
    if args.compile_workers > 0:
        t0 = time.perf_counter()
        try:
            precompile(ahead, size, args.compile_workers, device, dtype)
            print(
                f"compiled {len(ahead)} configurations in {args.compile_workers} processes: "
                f"{time.perf_counter() - t0:.1f} s"
            )
        except Exception as e:  # noqa: BLE001 - the sweep compiles what is missing itself
            print(f"precompile failed ({failure(e)}); the sweep compiles as it goes")
    rows, outputs = sweep(cache, step, configs, args, t_start + args.budget_s)
    if not rows:
        print("BEST none: no configuration ran")
        sys.exit(1)
    rows.sort(key=lambda r: -r[2])
    base = next((r for r in rows if r[0] == DEFAULT), None)
    print_table(
        (
            "tile_n",
            "warps",
            "stages",
            "GPU ms",
            "GB/s",
            f"of {COPY_TBPS} TB/s",
            "vs default",
            "regs/spills/smem KB",
            "est CTAs/SM",
            "est waves",
        ),
        [
            (
                *c,
                f"{ms:.4f}",
                f"{gbps:.0f}",
                f"{gbps / COPY_TBPS / 1e3:.1%}",
                f"{base[1] / ms:.2f}x" if base else "-",
                *RESOURCES.get(c, ("-", "-", "-")),
            )
            for c, ms, gbps in rows
        ],
    )

    for config, ms, gbps in rows[:3]:
        try:
            err = reference_error(cache, step, outputs[config])
            verdict = "ok" if err < 2e-2 else "WRONG"
            print(
                "check tile_n={} num_warps={} num_stages={}: ".format(*config)
                + f"max abs err {err:.2e} vs float64 on the first {CHECK_SEQS} sequences ({verdict})"
            )
        except Exception as e:  # noqa: BLE001 - one failing case is reported and the run goes on
            print("check tile_n={} num_warps={} num_stages={} failed: ".format(*config) + failure(e))

    best = rows[0]
    short = []
    for label, short_step in short_steps(cache, size, host_gen):
        for which, config in (("best", best[0]), ("default", DEFAULT)):
            try:
                ms, _ = run_config(cache, short_step, config, args)
                gbps = bytes_read(short_step[0], short_step[2]) / ms / 1e6
                short.append((label, which, "{}/{}/{}".format(*config), f"{ms:.4f}", f"{gbps:.0f}"))
            except Exception as e:  # noqa: BLE001 - one failing case is reported and the run goes on
                short.append((label, which, "{}/{}/{}".format(*config), "-", failure(e)))
    print_table(("short step", "config", "tile/warps/stages", "GPU ms", "GB/s"), short)
    print(f"total {time.perf_counter() - t_start:.1f} s")
    config, ms, gbps = best
    print(
        "BEST tile_n={} num_warps={} num_stages={} ".format(*config)
        + f"GBps={gbps:.0f} fraction_of_{COPY_TBPS}TBps={gbps / COPY_TBPS / 1e3:.3f}"
    )


if __name__ == "__main__":
    main()
