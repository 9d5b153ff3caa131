"""Deadline-aware admission: refuse at once what the engine's measured service rate says it cannot start in time.

A request that carries a deadline (`budgetscope_deadline_ms` in the body, `x-budgetscope-deadline-ms` as a header,
or the server's `--request-timeout`) is refused with 429 and `Retry-After` when

    requests ahead of it / measured service rate  >  its deadline - the measured run time of a request

- *ahead of it*: requests waiting for their first schedule at its tier's priority or a more important one (the
  scheduler takes those first);
- *measured service rate*: requests that finished `ok` in the last `window_s` seconds, over the time the engine
  was busy (had work) within that window: an idle engine's rate is its arrival rate, not its capacity;
- *run time*: the mean first-schedule → finish time of the last `num_runs` ok requests.

Without evidence (fewer than `min_finishes` finishes in the window) every request is admitted, and a request with
nobody ahead of it is always admitted. Updated on the engine thread (`observe_*`), read on the server's (`check`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque


class ServiceRate:
    """Finishes and run times of recent ok requests, and the engine's busy periods. Times are monotonic ns."""

    def __init__(self, window_s: float = 10.0, num_runs: int = 64, min_finishes: int = 4):
        self.window_ns = int(window_s * 1e9)
        self.min_finishes = min_finishes
        self._lock = threading.Lock()
        self._finishes: deque[int] = deque()
        self._runs: deque[int] = deque(maxlen=num_runs)
        self._busy: deque[list[int | None]] = deque()  # [start, end] of busy periods; end None while busy

    def observe_busy(self, is_busy: bool, now_ns: int | None = None) -> None:
        """The engine has work (or not) after a step."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        with self._lock:
            is_open = bool(self._busy) and self._busy[-1][1] is None
            if is_busy and not is_open:
                self._busy.append([now_ns, None])
            elif not is_busy and is_open:
                self._busy[-1][1] = now_ns
            self._trim(now_ns)

    def observe_finish(self, run_ns: int, now_ns: int | None = None) -> None:
        """An ok request finished, `run_ns` after it was first scheduled."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        with self._lock:
            self._finishes.append(now_ns)
            self._runs.append(max(run_ns, 0))
            self._trim(now_ns)

    def _trim(self, now_ns: int) -> None:
        since = now_ns - self.window_ns
        while self._finishes and self._finishes[0] < since:
            self._finishes.popleft()
        while self._busy and self._busy[0][1] is not None and self._busy[0][1] < since:
            self._busy.popleft()

    def _busy_ns(self, since: int, now_ns: int) -> int:
        return sum(max(0, min(end if end is not None else now_ns, now_ns) - max(start, since))
                   for start, end in self._busy)

    def rate_per_s(self, now_ns: int | None = None) -> float | None:
        """Ok finishes per second of busy time in the window; None without enough evidence."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        with self._lock:
            self._trim(now_ns)
            if len(self._finishes) < self.min_finishes:
                return None
            busy_ns = self._busy_ns(now_ns - self.window_ns, now_ns)
            return len(self._finishes) / (busy_ns / 1e9) if busy_ns > 0 else None

    def run_s(self) -> float:
        """Mean first-schedule → finish time of recent ok requests, seconds (0 when none yet)."""
        with self._lock:
            return sum(self._runs) / len(self._runs) / 1e9 if self._runs else 0.0


def refusal(rate: ServiceRate, deadline_s: float | None, num_ahead: int, now_ns: int | None = None) -> int | None:
    """Retry-After seconds (1-60) if a request with `deadline_s` and `num_ahead` requests ahead of it cannot start
    in time by the measured rate; None to admit it."""
    if deadline_s is None or deadline_s <= 0 or num_ahead <= 0:
        return None
    per_s = rate.rate_per_s(now_ns)
    if per_s is None:
        return None
    wait_s = num_ahead / per_s if per_s > 0 else math.inf
    slack_s = deadline_s - rate.run_s()
    if wait_s <= slack_s:
        return None
    # when enough of the queue ahead will have drained for a request like this one to fit
    excess_s = wait_s - max(slack_s, 0.0)
    return int(min(60, max(1, math.ceil(excess_s if math.isfinite(excess_s) else 60))))
