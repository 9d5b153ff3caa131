"""What a plan's requests look like: prompt and output lengths, tier and tenant mixes, shared prefixes."""

from __future__ import annotations

from dataclasses import dataclass, field

from budgetscope.loadgen.distributions import Distribution, Mix
from budgetscope.loadgen.errors import LoadgenError


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    """A `fraction` of requests start with one of `count` shared prefix texts of `tokens` tokens each.

    The prefix comes before the request's own prompt (whose length the workload's prompt distribution
    gives), so a prefix cache can hit on it. Which prefix: uniform among the `count`.
    """

    fraction: float
    count: int = 1
    tokens: int = 256

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction <= 1.0:
            raise LoadgenError(f"shared-prefix fraction must be in [0, 1], got {self.fraction:g}")
        if self.count < 1 or self.tokens < 1:
            raise LoadgenError("shared-prefix count and tokens must be >= 1")

    @classmethod
    def parse(cls, spec: str | None) -> SharedPrefix | None:
        """`"fraction=0.5,count=4,tokens=256"` (count and tokens optional); None or "" means none."""
        if not spec:
            return None
        values: dict[str, float] = {}
        for part in spec.split(","):
            key, eq, value = part.strip().partition("=")
            if not eq or key not in ("fraction", "count", "tokens"):
                raise LoadgenError(f"bad shared prefix {spec!r}; use fraction=F,count=K,tokens=T")
            try:
                values[key] = float(value)
            except ValueError:
                raise LoadgenError(f"bad number {value!r} in shared prefix {spec!r}") from None
        if "fraction" not in values:
            raise LoadgenError(f"shared prefix {spec!r} needs fraction=F")
        return cls(values["fraction"], int(values.get("count", 1)), int(values.get("tokens", 256)))


@dataclass(frozen=True, slots=True)
class Workload:
    """The request mix of a synthetic plan. Lengths are in tokens (see `Prompts` for what a token is)."""

    prompt_tokens: Distribution = field(default_factory=lambda: Distribution("fixed", 128))
    output_tokens: Distribution = field(default_factory=lambda: Distribution("fixed", 64))
    tiers: Mix = field(default_factory=Mix)
    tenants: Mix = field(default_factory=Mix)
    shared_prefix: SharedPrefix | None = None

    def describe(self) -> str:
        """One line for the run header."""
        parts = [f"prompt {self.prompt_tokens}", f"output {self.output_tokens}"]
        if self.tiers.names:
            parts.append(f"tiers {self.tiers}")
        if self.tenants.names:
            parts.append(f"tenants {self.tenants}")
        if self.shared_prefix is not None:
            sp = self.shared_prefix
            parts.append(f"shared prefix {sp.fraction:g} x {sp.count} of {sp.tokens} tokens")
        return ", ".join(parts)
