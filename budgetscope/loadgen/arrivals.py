"""Open-loop arrival processes: when each request of a plan is due, as ns offsets from the start.

    Arrivals.parse("poisson", rate=50)        # exponential gaps, CV 1
    Arrivals.parse("gamma:cv=3", rate=50)     # gamma gaps: same mean rate, burstier (CV 3)
    Arrivals.parse("constant", rate=50)       # evenly spaced, CV 0

The gaps never depend on how the server responds: that is what makes the load open-loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from budgetscope.loadgen.errors import LoadgenError

_KINDS = "poisson, gamma:cv=C, constant"


@dataclass(frozen=True, slots=True)
class Arrivals:
    """An arrival process with mean `rate` requests/s; `cv` is the coefficient of variation of the gaps."""

    kind: str
    rate: float
    cv: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ("poisson", "gamma", "constant"):
            raise LoadgenError(f"unknown arrival process {self.kind!r}; valid: {_KINDS}")
        if not self.rate > 0:
            raise LoadgenError(f"rate must be > 0 requests/s, got {self.rate:g}")
        if self.kind == "gamma" and not self.cv > 0:
            raise LoadgenError(f"gamma cv must be > 0, got {self.cv:g}")

    @classmethod
    def parse(cls, spec: str, rate: float) -> Arrivals:
        """`poisson`, `constant`, `gamma:cv=C` (or `gamma:C`), at `rate` requests/s."""
        kind, _, params = spec.strip().partition(":")
        if kind == "gamma":
            value = params.split("=", 1)[-1] if params else ""
            try:
                return cls("gamma", rate, float(value))
            except ValueError:
                raise LoadgenError(f"gamma needs a burstiness, e.g. gamma:cv=2; got {spec!r}") from None
        if params:
            raise LoadgenError(f"{kind} takes no parameters; got {spec!r}")
        return cls(kind, rate, 0.0 if kind == "constant" else 1.0)

    def offsets_ns(
        self, rng: random.Random, *, num_requests: int | None = None, duration_s: float | None = None
    ) -> list[int]:
        """Due times in ns from the start: `num_requests` of them, or all before `duration_s`.

        The first request is due at 0; each later one after a gap drawn from the process.
        """
        if num_requests is None and duration_s is None:
            raise LoadgenError("give a number of requests or a duration")
        limit_ns = None if duration_s is None else int(duration_s * 1e9)
        gap = self._gap_sampler(rng)
        offsets: list[int] = []
        t = 0.0
        while num_requests is None or len(offsets) < num_requests:
            t_ns = int(t * 1e9)
            if limit_ns is not None and t_ns >= limit_ns:
                break
            offsets.append(t_ns)
            t += gap()
        return offsets

    def _gap_sampler(self, rng: random.Random):
        mean = 1.0 / self.rate
        if self.kind == "constant":
            return lambda: mean
        if self.kind == "poisson":
            return lambda: rng.expovariate(self.rate)
        shape = 1.0 / (self.cv * self.cv)  # gamma with shape k has CV 1/sqrt(k); scale keeps the mean
        scale = mean / shape
        return lambda: rng.gammavariate(shape, scale)

    def __str__(self) -> str:
        if self.kind == "gamma":
            return f"gamma:cv={self.cv:g} at {self.rate:g}/s"
        return f"{self.kind} at {self.rate:g}/s"
