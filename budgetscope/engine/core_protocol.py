"""The messages between the API server process and the engine process of `engine serve` (docs/engine.md).

Each message is one msgpack array whose first item is its kind, framed by `multiprocessing.Connection`
(`send_bytes`: a 4-byte length, then the payload, in one write up to 16 KiB). Ints, floats, strings, lists,
nil: nothing is pickled. Times: `*_ns` Unix-epoch ns (`time.time_ns()`), event times `perf_counter_ns()` readings,
which every process of a host shares (CLOCK_MONOTONIC on Linux).

API → engine:
    [ADD, handle, request_id, prompt_ids, [max_tokens, temperature, top_p, top_k, seed, ignore_eos], tier,
     priority, arrival_ns, deadline_ns|nil, traceparent|nil, [submitted monotonic ns, forecast wait s]|nil]
    [ABORT, handle, outcome, reason]
    [STOP]

engine → API:
    [READY, pid, device, num_kv_blocks]
    [STEP, token_ns, [entry, ...], step|nil, state]     one per step (or per change while idle)
        entry: [handle, new token ids, events, finish_reason|nil, outcome|nil, cached tokens]
        events: flat [code, perf_counter ns, code, ns, ...]; code: index in MARKABLE_STAGES, or TOKEN
        step:   the fields of an `engine.step` span, in `STEP_FIELDS` order
        state:  [adds received, running, waiting, [[priority, waiting], ...], free slots, KV blocks used, KV blocks
                 total, preemptions, steps, [service rate/s|nil, run s, wait factor]]
    [FATAL, message]                                      the engine could not start (then it exits)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgpack

from budgetscope.engine.admission import RateSnapshot
from budgetscope.engine.engine_metrics import EngineGauges
from budgetscope.instrument.attributes import MARKABLE_STAGES

ADD, ABORT, STOP = 0, 1, 2
READY, STEP, FATAL = 10, 11, 12

TOKEN = -1
"""Event code of an output token (the others index MARKABLE_STAGES)."""
STAGE_CODES = {stage: i for i, stage in enumerate(MARKABLE_STAGES)}
STEP_FIELDS = (
    "start_ns",
    "end_ns",
    "batch_size",
    "prefill_tokens",
    "decode_seqs",
    "kv_blocks_used",
    "kv_blocks_total",
    "queue_depth",
    "preempted",
    "max_seqs",
    "token_budget",
)
"""The keywords of `Telemetry.step`, in the order a STEP message carries them."""

_packer = msgpack.Packer(use_bin_type=True)


def pack(message: list) -> bytes:
    """One message's bytes."""
    return _packer.pack(message)


def unpack(data: bytes) -> list:
    """One message from its bytes (arrays as lists, strings as str)."""
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)


@dataclass(slots=True)
class CoreState:
    """The engine process's state after its last step: admission and /metrics read it in the API process."""

    received: int = 0  # ADD messages the engine has taken into its scheduler, in all
    gauges: EngineGauges = field(default_factory=EngineGauges)
    waiting_by_priority: dict[int, int] = field(default_factory=dict)
    free_slots: int = 0
    rate: RateSnapshot = field(default_factory=RateSnapshot)

    def as_list(self) -> list:
        g = self.gauges
        return [
            self.received,
            g.num_running,
            g.num_waiting,
            list(self.waiting_by_priority.items()),
            self.free_slots,
            g.kv_blocks_used,
            g.kv_blocks_total,
            g.num_preemptions,
            g.num_steps,
            self.rate.as_list(),
        ]

    @classmethod
    def from_list(cls, v: list) -> CoreState:
        received, running, waiting, by_priority, free, used, total, preemptions, steps, rate = v
        return cls(
            received,
            EngineGauges(running, waiting, used, total, preemptions, steps),
            {p: n for p, n in by_priority},
            free,
            RateSnapshot(*rate),
        )
