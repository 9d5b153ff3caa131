"""How one request wants its tokens drawn and when it stops."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class SamplingParams:
    """temperature 0 is greedy; top_p/top_k filter before drawing; seed makes a request reproducible."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int | None = None
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)  # matched on text by the server's detokenizer

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1
