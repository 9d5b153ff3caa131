"""How a durable writer (the collector's) holds what it published in its working set: `Holding`, and the
collector's figures with the reasons for them (measured in docs/benchmarks.md).

Here, beside the store that reads them, so that `budgetscope.opener` can default to them without importing the
collector (which imports the opener).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Holding:
    """How a durable writer's working set holds what it published (HOLDING below: the collector's)."""

    hold_s: float  # spans stay this long after they landed (exact deduplication, no read-back for late spans)
    max_spans: int  # ... but no more than this many: each commit's cost grows with what it holds
    dropped_max: int  # traces let go of, remembered by a 64-bit hash: a late span of one reads the trace back
    seed_spans: int  # an opening writer remembers the traces of its newest segments, up to this many spans


HOLD_S = 3600.0
"""How long the collector's working set keeps spans after they landed, at most HOT_SPANS of them
(deduplication against them is exact, and a late span of such a trace is derived without reading segments
back)."""
HOT_SPANS = 300_000
"""The collector's working set is emptied of published rows once it holds this many spans: each commit (about
every second) derives and publishes from it, and that cost grows with what it holds (with 2M spans held, the
collector stored 66,000-80,000 spans/s over gRPC; with 300,000, 105,000, docs/benchmarks.md). Published traces
of which a span arrives later are read back."""
DROPPED_MAX = 2_000_000
"""The collector's working set remembers (by a 64-bit hash, with where their spans lie: 32 bytes each) this many
of the traces it dropped most recently: a new span of one of them brings the trace's published spans back
whatever its timestamps say, read from where they lie.
A trace dropped before those is looked for only if its new spans started before it was forgotten."""
SEED_SPANS = 2_000_000
"""A collector opening an archive remembers the traces of its newest span segments, up to this many spans, as
dropped (a restart must not derive the rest of a trace without its first spans)."""

HOLDING = Holding(hold_s=HOLD_S, max_spans=HOT_SPANS, dropped_max=DROPPED_MAX, seed_spans=SEED_SPANS)
