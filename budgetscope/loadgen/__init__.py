"""Open-loop load generator for any OpenAI-compatible endpoint, with client spans and honest schedule lag.

    from budgetscope.loadgen import Arrivals, Workload, Distribution, Target, build_plan, run_load

    plan = build_plan(Arrivals.parse("gamma:cv=2", rate=20), Workload(
        prompt_tokens=Distribution.parse("lognormal:median=512,sigma=0.6"),
        output_tokens=Distribution.parse("uniform:32,256")), seed=7, num_requests=1000)
    result = run_load(plan, Target("http://127.0.0.1:8000/v1/completions"), concurrency=64)
    print(result.table()); result.write_json("results.json")

Importing this package loads no OpenTelemetry SDK; see docs/loadgen.md.
"""

from budgetscope._lazy import lazy_exports
from budgetscope.gil import short_switch_interval

_EXPORTS = {
    "Arrivals": "arrivals",
    "Distribution": "distributions",
    "Mix": "distributions",
    "LoadgenError": "errors",
    "Plan": "plan",
    "PlannedRequest": "plan",
    "build_plan": "plan",
    "Prompts": "prompts",
    "RequestRecord": "records",
    "read_replay": "replay",
    "FIGURES": "result",
    "LoadResult": "result",
    "LoadRunner": "runner",
    "Target": "target",
    "SharedPrefix": "workload",
    "Workload": "workload",
}


# Lazy: `budgetscope load` is registered on every CLI start, and asyncio/ssl cost ~80 ms to import.
__getattr__ = lazy_exports(__name__, _EXPORTS, globals())


def run_load(plan, target, **options):
    """Run `plan` against `target` in a new event loop with precise timers; `options` go to `LoadRunner`.

    Returns the LoadResult.
    """
    # imported on use: concurrent.futures 92 ms, asyncio 89 ms, orjson 28 ms to import
    from budgetscope.loadgen.event_loop import new_event_loop
    from budgetscope.loadgen.runner import LoadRunner

    # The span export thread is CPU-bound in bursts: keep them out of the schedule lag (budgetscope.gil).
    loop = new_event_loop()
    with short_switch_interval():
        try:
            return loop.run_until_complete(LoadRunner(plan, target, **options).run())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


__all__ = [
    "FIGURES",
    "Arrivals",
    "Distribution",
    "LoadResult",
    "LoadRunner",
    "LoadgenError",
    "Mix",
    "Plan",
    "PlannedRequest",
    "Prompts",
    "RequestRecord",
    "SharedPrefix",
    "Target",
    "Workload",
    "build_plan",
    "read_replay",
    "run_load",
]
