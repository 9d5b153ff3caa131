"""On a GPU: record demo scenarios with the `1b` engine and the GPU sampler into archives for sample_traces/.

Each scenario runs as `budgetscope demo` runs it (collector, engine subprocess, `gpu sample --otlp`, load generator,
every arrow a socket), with the engine's `1b` config on CUDA. Prints each report's `gpu` entry (the decode
diagnosis) and writes OUT/<name>/ (folder archives) and OUT/gpu_reports.json.

    python benchmarks/record_gpu_scenarios.py --out OUT [--duration 20]

`long-context` keeps ~64 sequences decoding over long contexts (a step reads ~5 GB of K/V and weights).
`kv-pressure` is long-outputs with a KV cache too small for its load (96 blocks of 16 tokens, 16 sequences,
6 req/s): sequences are preempted, and the report should say so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from budgetscope.analysis.budgets import load_budgets
from budgetscope.demo.live import run_scenario
from budgetscope.demo.offline import demo_budgets_path
from budgetscope.demo.scenarios import SCENARIOS


def scenarios() -> list:
    long = SCENARIOS["long-outputs"]
    kv = dataclasses.replace(
        long,
        name="kv-pressure",
        what="long outputs into a KV cache too small for them: preemptions",
        rate=6.0,
        engine_args=("--kv-blocks", "96", "--max-seqs", "16"),
        load_args=("--prompt-tokens", "64", "--output-tokens", "choice:48=0.7,400=0.3"),
    )
    ctx = dataclasses.replace(
        long,
        name="long-context",
        what="64 sequences decode at once over 1,500-token contexts: K/V reads dominate",
        rate=20.0,
        engine_args=("--max-seqs", "64", "--max-batched-tokens", "4096", "--kv-blocks", "8192"),
        load_args=("--prompt-tokens", "1500", "--output-tokens", "choice:40=0.7,400=0.3"),
    )
    return [long, SCENARIOS["burst"], kv, ctx]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--model", default="1b")
    ap.add_argument("--only", default=None, help="comma-separated scenario names")
    args = ap.parse_args()
    out = Path(args.out)
    budgets = load_budgets(demo_budgets_path())
    reports = {}
    for sc in scenarios():
        if args.only and sc.name not in args.only.split(","):
            continue
        run = run_scenario(sc, out, budgets, args.duration, model=args.model)
        tier = next((t for t in run.report["tiers"] if t["name"] == "interactive"), run.report["tiers"][0])
        reports[sc.name] = {
            "dominant": run.dominant,
            "expect": sc.expect,
            "seconds": run.seconds,
            "gpu": tier.get("gpu"),
            "load": run.load_summary,
        }
        print(
            f"[{sc.name}] dominant {run.dominant} (expected {sc.expect}) in {run.seconds:.0f} s; "
            f"gpu: {json.dumps(tier.get('gpu'), default=str)}",
            flush=True,
        )
    (out / "gpu_reports.json").write_text(json.dumps(reports, indent=2, default=str))


if __name__ == "__main__":
    main()
