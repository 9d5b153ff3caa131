"""`Plan`: the open-loop schedule, fixed before the first request is sent and reproducible from its seed."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from budgetscope.loadgen.arrivals import Arrivals
from budgetscope.loadgen.workload import Workload


@dataclass(slots=True)
class PlannedRequest:
    """One request of the plan. `offset_ns`: when it is due, from the start of the run."""

    index: int
    offset_ns: int
    prompt_tokens: int
    """Total prompt length in tokens: shared prefix plus the request's own part."""
    output_tokens: int
    """Sent as `max_tokens`."""
    tier: str | None = None
    tenant: str | None = None
    prefix_id: int = -1
    """Which shared prefix the prompt starts with; -1 for none."""
    prefix_tokens: int = 0
    seed: int = 0
    """Seed of the request's own prompt text."""
    prompt: str | list[int] | None = None
    """An explicit prompt (from a replay file); None means synthetic."""


@dataclass(slots=True)
class Plan:
    """The requests in due order, and what made them (for the run header and results.json)."""

    requests: list[PlannedRequest]
    seed: int
    description: str = ""
    planned_rate: float | None = None
    """Mean requests/s the plan was drawn for (None for a replay: see `rate_of`)."""
    meta: dict = field(default_factory=dict)
    more: Callable[[int], list[PlannedRequest]] | None = None
    """Closed loop without a request count: draws the next `k` requests when the run needs them."""

    @property
    def is_closed_loop(self) -> bool:
        """Each request is sent when a slot frees (offsets unused), not when the plan says."""
        return bool(self.meta.get("closed_loop"))

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def span_s(self) -> float:
        """Seconds from the first due time to the last."""
        if len(self.requests) < 2:
            return 0.0
        return (self.requests[-1].offset_ns - self.requests[0].offset_ns) / 1e9

    @property
    def rate(self) -> float | None:
        """Requests/s of the plan as drawn: (n - 1) / span; None with fewer than two requests."""
        span = self.span_s
        return (len(self.requests) - 1) / span if span > 0 else None


def build_plan(
    arrivals: Arrivals,
    workload: Workload,
    *,
    seed: int = 0,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> Plan:
    """Draw a synthetic plan: due times from `arrivals`, request shapes from `workload`.

    The same seed, arrivals and workload give the same plan (due times, lengths, tiers, prompts).
    Arrivals and shapes use separate random streams, so changing the workload keeps the due times.
    """
    offsets = arrivals.offsets_ns(random.Random(f"{seed}/arrivals"), num_requests=num_requests, duration_s=duration_s)
    rng = random.Random(f"{seed}/workload")
    requests = [_draw(workload, rng, index, offset) for index, offset in enumerate(offsets)]
    return Plan(requests, seed, f"{arrivals}; {workload.describe()}", planned_rate=arrivals.rate)


def build_closed_plan(workload: Workload, concurrency: int, *, seed: int = 0, num_requests: int | None = None) -> Plan:
    """A closed-loop plan: `concurrency` requests in flight, each sent as soon as one finishes.

    Request shapes come from the same random stream as `build_plan`'s, so a closed and an open run of one seed
    send the same prompts in the same order. Without `num_requests` the plan grows on demand (`Plan.more`) and
    the run's duration ends it.
    """
    rng = random.Random(f"{seed}/workload")
    drawn = 0

    def more(k: int) -> list[PlannedRequest]:
        nonlocal drawn
        out = [_draw(workload, rng, drawn + j, 0) for j in range(k)]
        drawn += k
        return out

    requests = more(num_requests) if num_requests is not None else more(concurrency)
    return Plan(
        requests,
        seed,
        f"closed loop of {concurrency}; {workload.describe()}",
        meta={"closed_loop": True, "concurrency": concurrency},
        more=None if num_requests is not None else more,
    )


def _draw(workload: Workload, rng: random.Random, index: int, offset_ns: int) -> PlannedRequest:
    """One request's shape from the workload (shared prefix, lengths, tier, tenant, prompt seed)."""
    sp = workload.shared_prefix
    prefix_id, prefix_tokens = -1, 0
    if sp is not None and rng.random() < sp.fraction:
        prefix_id, prefix_tokens = rng.randrange(sp.count), sp.tokens
    own = workload.prompt_tokens.sample(rng)
    return PlannedRequest(
        index=index,
        offset_ns=offset_ns,
        prompt_tokens=prefix_tokens + own,
        output_tokens=workload.output_tokens.sample(rng),
        tier=workload.tiers.sample(rng),
        tenant=workload.tenants.sample(rng),
        prefix_id=prefix_id,
        prefix_tokens=prefix_tokens,
        seed=rng.getrandbits(63),
    )
