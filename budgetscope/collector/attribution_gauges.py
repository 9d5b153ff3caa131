"""The tail attribution of `collect --budgets` over a sliding window, as Prometheus gauges: every `every_s` a thread
reads the archive's last commit and computes, for the requests that arrived in the last `window_s`, each tier's
attribution and contrast exactly as `report` does (`budgetscope.analysis.report.attributions`), less the requests
still in flight (below).

    budgetscope_attribution_share{tier, figure="ttft"|"e2e", stage}       each stage's share of the tail's excess
    budgetscope_attribution_info{tier, figure, dominant, verdict, contrast_dimension, contrast_value}   1
    budgetscope_attribution_tail_requests{tier, figure}                   the tail's size
    budgetscope_attribution_window_seconds                                 the window
    budgetscope_attribution_lag_seconds      how long the oldest commit they do not reflect has been waiting
    budgetscope_attribution_in_flight_requests   requests of the window left out: one side's spans only, at the edge

The requests in flight (`coverage.in_flight`: in an archive being written, those with one side's spans only that
ended, or whose spans came, within the settle time of its last commit) are left out, so that a page never names
`unaccounted` for the client-only rows of requests whose server spans are still in an exporter's batch.

A figure whose tail is no slower than its body (or a tier without an ok request in the window) has no share and
no info series: absent, never 0. The labels are bounded: tiers × 2 figures × 7 stages, and one info series a tier
and figure (its contrast value changes with the data, the series count does not).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path

from budgetscope.analysis import coverage, slo
from budgetscope.analysis.budgets import Budgets
from budgetscope.analysis.report import attributions
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.reader import ArchiveReader
from budgetscope.collector.sli import labels

log = logging.getLogger("budgetscope.collector")

WINDOW_S = 600.0
"""The sliding window's length: ten minutes of arrivals, enough requests for a p99 tail at a few req/s."""
UNREAD_KEPT = 100_000
"""Commits remembered while the gauges do not reflect them (a day of one-second commits and more: the oldest is
what the lag is measured from, and a longer outage is long past any alert's window)."""
EVERY_S = 15.0
"""How often the gauges are recomputed: a Prometheus scrape interval, so that a gauge is at most about that
(plus the computation) older than the newest commit."""


class AttributionGauges:
    """The attribution gauges of one collector, recomputed on their own thread from the archive at `path`."""

    def __init__(self, path: str | Path, budgets: Budgets, window_s: float = WINDOW_S, every_s: float = EVERY_S):
        self.path = Path(path)
        self.budgets = budgets
        self.window_s = window_s
        self.every_s = every_s
        self._lock = threading.Lock()
        self._entries: list[dict] | None = None
        self._read_ns = 0  # the wall time of the commit they were read from
        self._in_flight = 0  # the requests of the window they left out (coverage.in_flight)
        self._unread: deque[int] = deque(maxlen=UNREAD_KEPT)  # wall times of the commits published since
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="budgetscope-attribution", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def published(self, committed_ns: int) -> None:
        """The writer published a commit made at `committed_ns` (wall clock)."""
        with self._lock:
            if committed_ns > self._read_ns:
                self._unread.append(committed_ns)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.refresh()
            self._stop.wait(max(0.0, self.every_s - (time.monotonic() - started)))

    def refresh(self, now_ns: int | None = None) -> bool:
        """Recompute the gauges from the archive's last commit (the window ends at `now_ns`, wall clock); False
        when it could not be read (nothing committed yet, or an error, logged): the last gauges stay, and the lag
        says how old they are."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        since = now_ns - int(self.window_s * 1e9)
        try:
            with ArchiveReader(self.path, since_ns=since) as r:
                read_ns = r.manifest.committed_ns
                # the requests whose other side's spans may not have landed yet are left out: a tail of client-only
                # rows would read as `unaccounted` until their server's spans came (docs/report.md)
                flight = coverage.in_flight(r.con, since, None, read_ns, now_ns)
                entries = attributions(r.con, self.budgets, since, None, coverage.in_flight_rows(flight))
        except ArchiveError as e:
            log.debug("attribution gauges: %s", e)
            return False
        except Exception as e:  # noqa: BLE001 - a failed computation must not end the thread; say it once each time
            log.error("attribution gauges: %s", (str(e).splitlines() or [type(e).__name__])[0])
            return False
        with self._lock:
            self._entries, self._read_ns = entries, read_ns
            self._in_flight = flight["requests"] if flight else 0
            while self._unread and self._unread[0] <= read_ns:  # in commit order: the oldest first
                self._unread.popleft()
        return True

    def lag_s(self, now_ns: int | None = None) -> float:
        """Seconds since the oldest commit the gauges do not reflect was published; 0 when they reflect the
        newest. (Not the newest commit's time less that of the one read: after a pause in the stream that is the
        pause, though the gauges lack one commit.)"""
        now_ns = time.time_ns() if now_ns is None else now_ns
        with self._lock:
            oldest = self._unread[0] if self._unread else None
        return 0.0 if oldest is None else round(max(0, now_ns - oldest) / 1e9, 3)

    def families(self) -> list[tuple[str, str, str, list[tuple[str, float]]]]:
        """(name, type, help, [(labels, value)]) of every family, for the exposition (self_metrics.py)."""
        with self._lock:
            entries, in_flight = self._entries, self._in_flight
        shares, info, tails = [], [], []
        for e in entries or []:
            for kind, a in e["attribution"].items():
                if not a or a["shares"] is None:
                    continue
                for stage, share in a["shares"].items():
                    shares.append((labels(tier=e["name"], figure=kind, stage=stage), share))
                first = (e["contrast"].get(kind) or [None])[0]
                contrast = (
                    {"contrast_dimension": first["dimension"], "contrast_value": str(first["value"])} if first else {}
                )
                info.append(
                    (labels(tier=e["name"], figure=kind, dominant=a["dominant"], verdict=a["verdict"], **contrast), 1)
                )
                tails.append((labels(tier=e["name"], figure=kind), a["tail_size"]))
        out = [
            (
                slo.ATTRIBUTION_SHARE,
                "gauge",
                "Each stage's share of the tail's excess over the median request, over the sliding window.",
                shares,
            ),
            (
                slo.ATTRIBUTION_INFO,
                "gauge",
                "The dominant stage, the verdict and the contrast's first dimension and value, over the sliding "
                "window (always 1).",
                info,
            ),
            (slo.ATTRIBUTION_TAIL, "gauge", "Requests in the tail the shares are over.", tails),
            (
                slo.ATTRIBUTION_WINDOW,
                "gauge",
                "The sliding window of arrivals the attribution is over.",
                [("", self.window_s)],
            ),
        ]
        if entries is not None:
            out.append(
                (
                    slo.ATTRIBUTION_IN_FLIGHT,
                    "gauge",
                    "Requests of the window left out of the attribution: they have one side's spans only and ended, "
                    "or their spans came, within the settle time of the last commit (the other side's may not have "
                    "landed yet).",
                    [("", in_flight)],
                )
            )
            out.append(
                (
                    slo.ATTRIBUTION_LAG,
                    "gauge",
                    "Seconds since the oldest commit the attribution does not reflect was published (0: it "
                    "reflects the newest).",
                    [("", self.lag_s())],
                )
            )
        return out


__all__ = ["AttributionGauges", "WINDOW_S", "EVERY_S"]
