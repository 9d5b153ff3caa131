"""One request's life inside the engine: its tokens, its KV blocks and where it stands."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from enum import Enum
from typing import Any

from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.engine.telemetry import NULL_TRACE


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


_ids = itertools.count()


class Sequence:
    """Prompt plus generated tokens, the block table that holds their KV, and the request's metadata.

    `num_computed_tokens` counts tokens whose KV is in the cache; the scheduler asks the model for the
    rest. `on_output(seq, new_token_ids)` is called on the engine thread after each step that adds
    tokens or finishes the sequence.
    """

    __slots__ = (
        "seq_id",
        "request_id",
        "token_ids",
        "num_prompt_tokens",
        "params",
        "tier",
        "tenant",
        "priority",
        "arrival_ns",
        "deadline_ns",
        "status",
        "block_table",
        "block_hashes",
        "num_computed_tokens",
        "num_hashed_blocks",
        "num_cached_tokens",
        "is_admitted",
        "num_preemptions",
        "finish_reason",
        "outcome",
        "trace",
        "on_output",
        "first_token_ns",
        "last_token_ns",
        "generator",
        "admitted_mono_ns",
        "wait_forecast",
        "num_inflight_tokens",
        "inflight_row",
    )

    def __init__(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams | None = None,
        *,
        request_id: str | None = None,
        tier: str = "default",
        tenant: str | None = None,
        priority: int = 1,
        arrival_ns: int | None = None,
        deadline_ns: int | None = None,
        trace: Any = None,
        on_output: Callable[[Sequence, list[int]], None] | None = None,
    ):
        if not prompt_token_ids:
            raise ValueError("a prompt needs at least one token")
        self.seq_id = next(_ids)
        self.request_id = request_id or f"seq-{self.seq_id}"
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(self.token_ids)
        self.params = params or SamplingParams()
        self.tier = tier
        self.tenant = tenant
        self.priority = priority
        self.arrival_ns = arrival_ns if arrival_ns is not None else time.time_ns()
        self.deadline_ns = deadline_ns
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # chained hashes of the full blocks of token_ids, filled lazily
        self.num_computed_tokens = 0
        self.num_hashed_blocks = 0  # leading blocks of block_table already registered in the prefix cache
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache at first admission
        self.is_admitted = False
        self.num_preemptions = 0
        self.finish_reason: str | None = None  # stop | length | abort | timeout
        self.outcome: str | None = None  # ok | cancelled | timeout | error
        self.trace = trace if trace is not None else NULL_TRACE
        self.on_output = on_output
        self.first_token_ns: int | None = None
        self.last_token_ns: int | None = None
        self.generator = None  # a torch.Generator when params.seed is set (made by the sampler)
        self.admitted_mono_ns: int | None = None  # monotonic ns of the first schedule (deadline-aware admission)
        self.wait_forecast: tuple[int, float] | None = None  # (monotonic ns submitted, forecast wait s) till observed
        # async scheduling: tokens sampled by launched steps, not yet read back (not in token_ids), and the row of
        # the latest one among its step's sampled ids (where the next step's input gathers it from on the device)
        self.num_inflight_tokens = 0
        self.inflight_row = -1

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_total_tokens(self) -> int:
        """num_tokens plus the tokens sampled on the device and not yet read back (what the scheduler plans with)."""
        return len(self.token_ids) + self.num_inflight_tokens

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def is_prefilling(self) -> bool:
        """True while the prompt (or a recompute after preemption) is not fully in the cache."""
        return self.num_tokens - self.num_computed_tokens > 1 or self.num_output_tokens == 0

    def sort_key(self) -> tuple[int, int, int]:
        """Scheduling order: priority first, then arrival."""
        return (self.priority, self.arrival_ns, self.seq_id)

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id}, {self.status.value}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens}, blocks={len(self.block_table)})"
        )
