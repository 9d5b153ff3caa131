"""Deadline-aware admission: refuse at once what the engine's measured service rate says it cannot start in time.

A request that carries a deadline (`budgetscope_deadline_ms` in the body, `x-budgetscope-deadline-ms` as a header,
or the server's `--request-timeout`) is refused with 429 and `Retry-After` when

    finishes it waits for / measured service rate  >  its deadline - the measured run time of a request

- *finishes it waits for*: the requests waiting for their first schedule at its tier's priority or a more
  important one (the scheduler takes those first), plus itself, less the free sequence slots: with every slot
  taken, a request with nobody ahead still waits for one finish;
- *measured service rate*: requests that finished `ok` in the last `window_s` seconds, over the time the engine
  was busy (had work) within that window: an idle engine's rate is its arrival rate, not its capacity;
- *run time*: the 90th percentile of the first-schedule → finish times of the last `num_runs` ok requests (the
  mean admitted the requests at the edge whose runs were longer than average, and they timed out);
- *calibrated*: the wait is multiplied by the 90th percentile of actual / forecast wait over the last `num_waits`
  admitted requests whose forecast was at least `MIN_FORECAST_S` (1 to 4; 1 until `min_waits` of them). Past
  capacity the queue settles where admission stops it, so every request admitted sits at the edge, and a forecast
  that is right on average times out the ones it underestimated.

Without evidence (fewer than `min_finishes` finishes in the window) every request is admitted, and so is one that
waits for no finish (a slot is free for it). Few finishes while the engine had work for the whole window are
evidence, not its absence: they are the rate (0 when none), so an engine that stalls under overload (every admitted
request abandoned by its client before it ran) refuses what would wait instead of admitting everything.

Updated on the engine thread (`observe_*`), read on the server's (`refusal`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque

from budgetscope.engine.errors import RequestError
from budgetscope.stats import quantile_nearest_rank

MIN_FORECAST_S = 0.2
"""Shorter forecast waits do not calibrate: a step or two of scheduling granularity would swamp their ratio."""


class ServiceRate:
    """Finishes and run times of recent ok requests, and the engine's busy periods. Times are monotonic ns."""

    def __init__(
        self, window_s: float = 10.0, num_runs: int = 64, min_finishes: int = 4, num_waits: int = 64, min_waits: int = 8
    ):
        self.window_ns = int(window_s * 1e9)
        self.min_finishes = min_finishes
        self.min_waits = min_waits
        self._lock = threading.Lock()
        self._finishes: deque[int] = deque()
        self._runs: deque[int] = deque(maxlen=num_runs)
        self._wait_ratios: deque[float] = deque(maxlen=num_waits)  # actual / forecast wait of admitted requests
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

    def observe_wait(self, forecast_s: float, actual_s: float) -> None:
        """An admitted request forecast to wait `forecast_s` (uncalibrated) was first scheduled `actual_s` after
        it was submitted (or left the queue unscheduled then: a lower bound)."""
        if forecast_s >= MIN_FORECAST_S:
            with self._lock:
                self._wait_ratios.append(max(actual_s, 0.0) / forecast_s)

    def wait_factor(self, q: float = 0.9) -> float:
        """The `q` quantile (nearest rank) of actual / forecast wait, within [1, 4]; 1 with too few waits."""
        with self._lock:
            ratios = list(self._wait_ratios)
        return min(max(quantile_nearest_rank(sorted(ratios), q), 1.0), 4.0) if len(ratios) >= self.min_waits else 1.0

    def _trim(self, now_ns: int) -> None:
        since = now_ns - self.window_ns
        while self._finishes and self._finishes[0] < since:
            self._finishes.popleft()
        while self._busy and self._busy[0][1] is not None and self._busy[0][1] < since:
            self._busy.popleft()

    def _busy_ns(self, since: int, now_ns: int) -> int:
        return sum(
            max(0, min(end if end is not None else now_ns, now_ns) - max(start, since)) for start, end in self._busy
        )

    def rate_per_s(self, now_ns: int | None = None) -> float | None:
        """Ok finishes per second of busy time in the window; None without enough evidence (fewer than
        `min_finishes`, unless the engine was busy for the whole window)."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        with self._lock:
            self._trim(now_ns)
            busy_ns = self._busy_ns(now_ns - self.window_ns, now_ns)
            if len(self._finishes) < self.min_finishes and busy_ns < self.window_ns:
                return None
            return len(self._finishes) / (busy_ns / 1e9) if busy_ns > 0 else None

    def run_s(self, q: float = 0.9) -> float:
        """The `q` quantile (nearest rank) of the first-schedule → finish times of recent ok requests, seconds (0
        when none yet)."""
        with self._lock:
            runs = list(self._runs)
        return quantile_nearest_rank(sorted(runs), q) / 1e9 if runs else 0.0


def finishes_to_wait(num_ahead: int, free_slots: int) -> int:
    """Finishes a new request waits for before its first schedule: those ahead of it and itself, less the free
    slots (a free slot takes the first of them at once)."""
    return max(num_ahead + 1 - max(free_slots, 0), 0)


def expected_wait_s(rate: ServiceRate, num_finishes: int, now_ns: int | None = None) -> float | None:
    """Seconds until the first schedule of a request that waits for `num_finishes` finishes (`finishes_to_wait`)
    at the measured service rate, uncalibrated: 0 when it waits for none, None without evidence."""
    if num_finishes <= 0:
        return 0.0
    per_s = rate.rate_per_s(now_ns)
    if per_s is None:
        return None
    return num_finishes / per_s if per_s > 0 else math.inf


def refusal(rate: ServiceRate, deadline_s: float | None, wait_s: float | None) -> int | None:
    """Retry-After seconds (1-60) if a request with `deadline_s`, forecast to wait `wait_s` (`expected_wait_s`)
    for its first schedule, cannot start in time once the forecast is calibrated; None to admit it."""
    if deadline_s is None or deadline_s <= 0 or not wait_s:
        return None
    wait_s *= rate.wait_factor()
    slack_s = deadline_s - rate.run_s()
    if wait_s <= slack_s:
        return None
    # when enough of the queue ahead will have drained for a request like this one to fit
    excess_s = wait_s - max(slack_s, 0.0)
    return int(min(60, max(1, math.ceil(excess_s if math.isfinite(excess_s) else 60))))


def admit(seq, config, metrics, rate, *, num_waiting: int, ahead, free_slots: int) -> None:
    """Admit `seq` (a Sequence) or raise RequestError(429) with Retry-After: the waiting queue (`num_waiting` requests
    waiting for their first schedule, handed over or not) is full, or, with deadline-aware admission, `seq` waits for
    more finishes than its deadline allows. `ahead(priority)`: requests waiting at that priority or a more important
    one; `free_slots`: sequence slots the running batch leaves free; `rate`: a ServiceRate (or a snapshot of one).
    An admitted request forecast to wait gets `seq.wait_forecast` (its real wait calibrates later forecasts)."""
    limit = config.max_waiting
    if limit and num_waiting >= limit:
        raise RequestError(
            429,
            f"the engine is overloaded: {limit} requests already waiting",
            type="rate_limit_exceeded",
            retry_after_s=retry_after_s(metrics, num_waiting, config.max_num_seqs),
        )
    if not config.deadline_admission or seq.deadline_ns is None:
        return
    num_ahead = ahead(seq.priority)
    deadline_s = (seq.deadline_ns - time.time_ns()) / 1e9
    wait_s = expected_wait_s(rate, finishes_to_wait(num_ahead, free_slots))
    retry = refusal(rate, deadline_s, wait_s)
    if retry is not None:
        metrics.deadline_refusals += 1
        per_s = rate.rate_per_s() or 0.0
        raise RequestError(
            429,
            f"the engine cannot start this request within its deadline of {deadline_s:.2f} s: "
            f"{num_ahead} requests ahead at {per_s:.1f} requests/s",
            type="rate_limit_exceeded",
            retry_after_s=retry,
        )
    if wait_s:  # how long it really waits calibrates the next forecasts
        seq.wait_forecast = (time.monotonic_ns(), wait_s)


def retry_after_s(metrics, num_waiting: int, max_seqs: int) -> int:
    """Seconds a rejected client should wait: the waiting queue drained at the observed request latency (1-60)."""
    e2e = metrics.e2e
    mean_s = e2e.sum / e2e.count if e2e.count else 1.0
    per_slot = num_waiting / max(max_seqs, 1)
    return int(min(60, max(1, math.ceil(per_slot * mean_s))))


def observe_step(rate: ServiceRate, touched) -> None:
    """Feed `rate` with the requests of a step (Sequences) that finished ok, and the calibration with the waits of
    those first scheduled (or timed out unscheduled)."""
    now = time.monotonic_ns()
    for seq in touched:
        observe_wait(rate, seq, now)
        if seq.is_finished and seq.outcome == "ok" and seq.admitted_mono_ns is not None:
            rate.observe_finish(now - seq.admitted_mono_ns, now)


def observe_wait(rate: ServiceRate, seq, now: int | None = None) -> None:
    """Once: how long seq waited for its first schedule against its forecast; one that left the queue
    unscheduled (aborted, timed out) waited at least until now."""
    if seq.wait_forecast is None or not (seq.admitted_mono_ns is not None or seq.is_finished):
        return
    submitted, forecast_s = seq.wait_forecast
    seq.wait_forecast = None
    end = seq.admitted_mono_ns if seq.admitted_mono_ns is not None else (now or time.monotonic_ns())
    rate.observe_wait(forecast_s, (end - submitted) / 1e9)


class RateSnapshot:
    """What `admit` reads of a ServiceRate, as measured in another process (the engine process of `engine serve`)
    at its last step: an idle engine sends none, and then nobody waits, so nothing is refused on a stale rate."""

    __slots__ = ("_rate", "_run_s", "_factor")

    def __init__(self, rate_per_s: float | None = None, run_s: float = 0.0, wait_factor: float = 1.0):
        self._rate, self._run_s, self._factor = rate_per_s, run_s, wait_factor

    @classmethod
    def of(cls, rate: ServiceRate) -> RateSnapshot:
        return cls(rate.rate_per_s(), rate.run_s(), rate.wait_factor())

    def as_list(self) -> list:
        return [self._rate, self._run_s, self._factor]

    def rate_per_s(self, now_ns: int | None = None) -> float | None:
        return self._rate

    def run_s(self, q: float = 0.9) -> float:
        return self._run_s

    def wait_factor(self, q: float = 0.9) -> float:
        return self._factor
