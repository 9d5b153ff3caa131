"""Length distributions and weighted mixes, parsed from short specs.

Distribution.parse("128")                           # fixed
Distribution.parse("uniform:64,512")                # integers, both ends included
Distribution.parse("lognormal:median=512,sigma=0.6,max=4096")
Distribution.parse("choice:32=0.9,1800=0.1")        # lengths drawn with these weights
Mix.parse("interactive=0.7,batch=0.3")              # weights need not sum to 1
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from budgetscope.loadgen.errors import LoadgenError

_KINDS = "fixed:N, uniform:LO,HI, lognormal:median=M,sigma=S[,min=A][,max=B], choice:LEN=W,LEN=W..."


@dataclass(frozen=True, slots=True)
class Distribution:
    """A distribution of positive integers (token counts). `a`, `b`: the parameters of `kind`."""

    kind: str
    a: float
    b: float = 0.0
    min: int = 1
    max: int | None = None
    choices: tuple[tuple[int, float], ...] = ()  # (length, weight) of a "choice" distribution

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "uniform", "lognormal", "choice"):
            raise LoadgenError(f"unknown distribution {self.kind!r}; valid: {_KINDS}")
        if self.kind == "fixed" and self.a < 1:
            raise LoadgenError(f"fixed length must be >= 1, got {self.a:g}")
        if self.kind == "uniform" and not 1 <= self.a <= self.b:
            raise LoadgenError(f"uniform needs 1 <= LO <= HI, got {self.a:g},{self.b:g}")
        if self.kind == "lognormal" and (self.a <= 0 or self.b < 0):
            raise LoadgenError(f"lognormal needs median > 0 and sigma >= 0, got {self.a:g},{self.b:g}")
        if self.kind == "choice" and (
            not self.choices or any(n < 1 or w < 0 for n, w in self.choices) or sum(w for _, w in self.choices) <= 0
        ):
            raise LoadgenError("choice needs LEN=W pairs with LEN >= 1, W >= 0 and some W > 0")
        if self.max is not None and self.max < self.min:
            raise LoadgenError(f"max {self.max} is below min {self.min}")

    @classmethod
    def parse(cls, spec: str | int) -> Distribution:
        """A distribution from a spec string (see the module docstring) or a plain int (fixed)."""
        if isinstance(spec, int):
            return cls("fixed", spec)
        text = spec.strip()
        kind, _, params = text.partition(":")
        try:
            if not params:
                return cls("fixed", int(kind))
            if kind == "fixed":
                return cls("fixed", int(params))
            if kind == "uniform":
                lo, hi = (int(p) for p in params.split(","))
                return cls("uniform", lo, hi)
            if kind == "choice":
                pairs = [p.partition("=") for p in params.split(",")]
                return cls("choice", 0, choices=tuple((int(n), float(w)) for n, _, w in pairs))
            if kind == "lognormal":
                kv = _key_values(params)
                unknown = set(kv) - {"median", "sigma", "min", "max"}
                if unknown or "median" not in kv or "sigma" not in kv:
                    raise ValueError
                return cls(
                    "lognormal",
                    kv["median"],
                    kv["sigma"],
                    int(kv.get("min", 1)),
                    int(kv["max"]) if "max" in kv else None,
                )
        except ValueError:
            pass
        raise LoadgenError(f"bad length distribution {spec!r}; valid: {_KINDS}")

    def sample(self, rng: random.Random) -> int:
        """One draw, clipped to [min, max]."""
        if self.kind == "fixed":
            value = int(self.a)
        elif self.kind == "uniform":
            value = rng.randint(int(self.a), int(self.b))
        elif self.kind == "choice":
            value = rng.choices([n for n, _ in self.choices], [w for _, w in self.choices])[0]
        else:
            value = round(rng.lognormvariate(math.log(self.a), self.b))
        value = max(value, self.min)
        return value if self.max is None else min(value, self.max)

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        if self.kind == "uniform":
            return f"uniform:{int(self.a)},{int(self.b)}"
        if self.kind == "choice":
            return "choice:" + ",".join(f"{n}={w:g}" for n, w in self.choices)
        extra = f",max={self.max}" if self.max is not None else ""
        return f"lognormal:median={self.a:g},sigma={self.b:g}{extra}"


@dataclass(frozen=True, slots=True)
class Mix:
    """A weighted choice among names (tiers, tenants). An empty mix always gives None."""

    names: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()

    @classmethod
    def parse(cls, spec: str | None) -> Mix:
        """`"a=0.7,b=0.3"`, or `"a"` for one name with weight 1. None or "" is the empty mix."""
        if not spec:
            return cls()
        names, weights = [], []
        for part in spec.split(","):
            name, _, weight = part.strip().partition("=")
            try:
                value = float(weight) if weight else 1.0
            except ValueError:
                raise LoadgenError(f"bad weight {weight!r} for {name!r} in {spec!r}; use name=weight,...") from None
            if not name or value < 0:
                raise LoadgenError(f"bad mix {spec!r}; use name=weight,... with weights >= 0")
            names.append(name)
            weights.append(value)
        if sum(weights) <= 0:
            raise LoadgenError(f"mix {spec!r} has no positive weight")
        return cls(tuple(names), tuple(weights))

    def sample(self, rng: random.Random) -> str | None:
        """One name, drawn with probability proportional to its weight; None for the empty mix."""
        if not self.names:
            return None
        if len(self.names) == 1:
            return self.names[0]
        return rng.choices(self.names, self.weights)[0]

    def __str__(self) -> str:
        return ",".join(f"{n}={w:g}" for n, w in zip(self.names, self.weights))


def _key_values(params: str) -> dict[str, float]:
    out = {}
    for part in params.split(","):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(part)
        out[key.strip()] = float(value)
    return out
