"""What `budgetscope load`'s options describe, built from their text: the plan, the request headers, the output
files and the dry run's lines. Bad input raises LoadgenError naming the option."""

from __future__ import annotations

import collections
import os

from budgetscope.loadgen.errors import LoadgenError
from budgetscope.loadgen.plan import build_closed_plan
from budgetscope.loadgen.records_csv import write_csv

DEADLINE_HEADER = "x-budgetscope-deadline-ms"
"""The reference engine's deadline header (budgetscope.engine.protocol; loadgen imports nothing of the engine)."""


def parse_header(text: str) -> tuple[str, str]:
    """`"Name: value"` → (name, value)."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise LoadgenError(f"bad header {text!r}; use 'Name: value'")
    return name.strip(), value.strip()


def request_headers(headers: tuple[str, ...], *, send_deadline: bool, timeout_s: float) -> dict[str, str]:
    """The `--header`s, plus `Authorization: Bearer $OPENAI_API_KEY` when the key is set and no header gives one,
    plus the deadline header (`timeout_s` in ms) with `send_deadline`."""
    extra = dict(parse_header(h) for h in headers)
    api_key = os.environ.get("OPENAI_API_KEY", "").strip()
    if api_key and not any(k.lower() == "authorization" for k in extra):
        extra["Authorization"] = f"Bearer {api_key}"
    if send_deadline and not any(k.lower() == DEADLINE_HEADER for k in extra):
        extra[DEADLINE_HEADER] = str(int(timeout_s * 1000))
    return extra


def load_plan(
    workload,
    *,
    rate: float | None,
    arrivals: str,
    num_requests: int | None,
    duration_s: float | None,
    replay: str | None,
    time_scale: float,
    concurrency: int | None,
    seed: int,
    dataset: str | None,
    tokenizer=None,
):
    """The plan of `load`: a replayed trace, a closed loop (`concurrency` without `rate`) or an open loop at `rate`
    requests/s, its prompts from `dataset` when one is given."""
    # imported on use: orjson 28 ms to import
    from budgetscope.loadgen import Arrivals, build_plan, read_replay

    if dataset and (replay or workload.shared_prefix):
        raise LoadgenError("--dataset gives the prompts; drop --replay/--shared-prefix")
    if replay:
        if rate is not None or num_requests is not None or duration_s is not None:
            raise LoadgenError("--replay takes its times from the file; drop --rate/--requests/--duration")
        plan = read_replay(replay, workload, seed=seed, time_scale=time_scale)
    elif rate is None and concurrency is not None:
        plan = closed_plan(workload, concurrency, seed, num_requests, duration_s, arrivals)
    else:
        if rate is None:
            raise LoadgenError("give --rate (requests/s), --concurrency N (closed loop) or --replay FILE")
        if (num_requests is None) == (duration_s is None):
            raise LoadgenError("give exactly one of --requests or --duration")
        plan = build_plan(
            Arrivals.parse(arrivals, rate), workload, seed=seed, num_requests=num_requests, duration_s=duration_s
        )
    if dataset:
        # imported on use: orjson 28 ms to import
        from budgetscope.loadgen.dataset import apply_dataset, read_dataset

        plan = apply_dataset(plan, read_dataset(dataset, tokenizer))
    return plan


def closed_plan(
    workload, concurrency: int, seed: int, num_requests: int | None, duration_s: float | None, arrivals: str
):
    """The closed-loop plan of `load --concurrency N` without --rate: --requests and/or --duration end it."""
    if concurrency < 1:
        raise LoadgenError(f"--concurrency must be >= 1, got {concurrency}")
    if num_requests is None and duration_s is None:
        raise LoadgenError("a closed loop needs --requests N or --duration S (or both)")
    if arrivals != "poisson":
        raise LoadgenError("--arrivals shapes an open loop; give --rate with it, or drop it for a closed loop")
    return build_closed_plan(workload, concurrency, seed=seed, num_requests=num_requests)


def check_out_path(path: str | None) -> None:
    """`--out`'s folder must exist before anything is sent."""
    if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise LoadgenError(f"--out {path}: its folder does not exist")


def write_out(result, path: str) -> None:
    """--out: CSV records when the name ends in .csv, else the JSON of records and summary."""
    if path.lower().endswith(".csv"):
        with open(path, "w", newline="", encoding="utf-8") as f:
            write_csv(result, f)
    else:
        result.write_json(path)


def plan_lines(plan) -> list[str]:
    """What `load --dry-run` prints of a plan: its description, size, token lengths, tiers, shared prefixes."""
    reqs = plan.requests
    tiers = collections.Counter(r.tier or "default" for r in reqs)
    prompt = sorted(r.prompt_tokens for r in reqs)
    output = sorted(r.output_tokens for r in reqs)
    lines = [f"plan: {plan.description}"]
    if plan.is_closed_loop:  # no due times: the run's pace is the server's
        size = "drawn as the run goes, until --duration" if plan.more is not None else f"{len(reqs)}"
        lines.append(f"requests {size}, {plan.meta['concurrency']} in flight, seed {plan.seed}")
    else:
        lines.append(
            f"requests {len(reqs)} over {plan.span_s:.2f} s (rate as drawn {plan.rate or 0:.2f}/s), seed {plan.seed}"
        )
    if reqs:
        lines.append(
            f"prompt tokens p50 {prompt[len(prompt) // 2]} max {prompt[-1]}; "
            f"output tokens p50 {output[len(output) // 2]} max {output[-1]}"
        )
    lines.append("tiers " + ", ".join(f"{k} {v}" for k, v in tiers.most_common()))
    shared = sum(r.prefix_id >= 0 for r in reqs)
    if shared:
        lines.append(f"shared prefix on {shared} requests")
    return lines
