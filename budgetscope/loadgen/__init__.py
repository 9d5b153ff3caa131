"""Open-loop load generator for any OpenAI-compatible endpoint, with client spans and honest schedule lag.

    from budgetscope.loadgen import Arrivals, Workload, Distribution, Target, build_plan, run_load

    plan = build_plan(Arrivals.parse("gamma:cv=2", rate=20), Workload(
        prompt_tokens=Distribution.parse("lognormal:median=512,sigma=0.6"),
        output_tokens=Distribution.parse("uniform:32,256")), seed=7, num_requests=1000)
    result = run_load(plan, Target("http://127.0.0.1:8000/v1/completions"), concurrency=64)
    print(result.table()); result.write_json("results.json")

Importing this package loads no OpenTelemetry SDK; see docs/loadgen.md.
"""

from budgetscope.loadgen.arrivals import Arrivals
from budgetscope.loadgen.distributions import Distribution, Mix
from budgetscope.loadgen.errors import LoadgenError
from budgetscope.loadgen.plan import Plan, PlannedRequest, build_plan
from budgetscope.loadgen.prompts import Prompts
from budgetscope.loadgen.records import RequestRecord
from budgetscope.loadgen.replay import read_replay
from budgetscope.loadgen.result import FIGURES, LoadResult
from budgetscope.loadgen.runner import LoadRunner
from budgetscope.loadgen.target import Target
from budgetscope.loadgen.workload import SharedPrefix, Workload


def run_load(plan: Plan, target: Target, **options) -> LoadResult:
    """Run `plan` against `target` in a new event loop with precise timers; `options` go to `LoadRunner`."""
    from budgetscope.loadgen.event_loop import new_event_loop

    loop = new_event_loop()
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
