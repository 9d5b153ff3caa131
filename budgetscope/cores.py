"""How many cores a pool of worker threads should take when the process has threads of its own to run."""

from __future__ import annotations

import os


def all_but_one() -> int:
    """One fewer than the cores this process may run on (its CPU affinity where the platform tells it), at least
    one: for a pool whose process keeps another thread busy (torch's intra-op threads beside the engine's API
    process, DuckDB's beside the collector's receivers and acceptor), which would otherwise wait for, or take
    the core from, that thread."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)
