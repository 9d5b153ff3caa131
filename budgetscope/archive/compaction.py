"""Compaction: small segments are merged in a background thread, so that a day of one-second commits leaves a
few files per hour, not 86,400.

Tiered, as log-structured stores do: segments of one table, one hour and one level (how often their rows were
merged) are merged into one segment of the next level once FANIN of them are small. An hour that has ended
and has had no new segment for COLD_AFTER_S is merged whole, levels aside, and its `requests` lose the rows
re-derived since (the `requests_deletes` of that hour are applied and retired with them). A byte is rewritten
about log_FANIN of the hour's size times. (An ended hour still receiving segments — a backfill, an import of
old traces, late spans — is merged by level: merged whole at each of its commits, it cost the collector half
a core rewriting the same hours.)

A merge reads committed segments and writes a new one; only its manifest commit takes the writer's lock, for the
time of a JSON write. Replaced segments stay on disk for readers of older manifests for the archive's grace
(`Manifest.grace_s`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from budgetscope.archive import manifest as mf
from budgetscope.archive import segments
from budgetscope.archive.retention import delete_retired, expire

log = logging.getLogger("budgetscope.archive")

FANIN = 8
SMALL_BYTES = 64 << 20
"""Segments from this size up are left as they are."""
COLD_AFTER_S = 600.0
"""An hour partition is merged whole once its hour ended, and its newest segment was committed, this long ago."""
NICE = 10
"""The merging thread's nice value (Linux): merges use what CPU the writer leaves them."""

_ORDER = {"spans": "trace_id, start_ns"}
"""Merged rows are sorted by the table's time column; spans by trace, so that a trace's spans share row groups
(a lookup by trace id skips the rest by their statistics)."""


def plan(m: mf.Manifest, now_ns: int, cold_after_s: float | None = None) -> list[list[mf.Segment]]:
    """Groups of segments to merge, each of one table and one hour."""
    cold_after_s = COLD_AFTER_S if cold_after_s is None else cold_after_s
    by_hour: dict[tuple[str, int], list[mf.Segment]] = defaultdict(list)
    newest: dict[tuple[str, int], int] = defaultdict(int)  # (table, hour) -> its last commit's time
    for s in m.segments:
        if s.bytes < SMALL_BYTES:
            by_hour[(s.table, s.hour)].append(s)
        newest[(s.table, s.hour)] = max(newest[(s.table, s.hour)], s.committed_ns)
    jobs = []
    cold_before = now_ns - int(cold_after_s * 1e9)
    for (table, hour), segs in sorted(by_hour.items()):
        if table == "requests_deletes":
            continue  # merged with their hour's requests, or by level below
        quiet = max(newest[(table, hour)], newest[("requests_deletes", hour)] if table == "requests" else 0)
        cold = (hour + 1) * mf.HOUR_NS <= cold_before and quiet <= cold_before
        dels = by_hour.get(("requests_deletes", hour), []) if table == "requests" else []
        if cold and dels:  # every requests segment of the hour, large too: the deletes are retired with them
            jobs.append([x for x in m.segments if x.table == "requests" and x.hour == hour] + dels)
            continue
        if cold and len(segs) >= 2:
            jobs.append(segs)
            continue
        by_level: dict[int, list[mf.Segment]] = defaultdict(list)
        for s in segs:
            by_level[s.level].append(s)
        jobs += [group for group in by_level.values() if len(group) >= FANIN]
    for (hour, _), segs in _deletes_by_level(by_hour).items():
        if len(segs) >= FANIN and (hour + 1) * mf.HOUR_NS > cold_before:  # a cold hour's go with its requests
            jobs.append(segs)
    return jobs


def _deletes_by_level(by_hour) -> dict:
    out = defaultdict(list)
    for (table, hour), segs in by_hour.items():
        if table == "requests_deletes":
            for s in segs:
                out[(hour, s.level)].append(s)
    return out


def merge_sql(root: Path, job: list[mf.Segment]) -> tuple[str, str]:
    """(table, SELECT of the merged rows) for one job."""
    table = job[0].table
    rows = [s for s in job if s.table == table]
    # by name: segments written before a column was added merge with newer ones, the column NULL in their rows
    src = f"read_parquet({segments.sql_list(root, rows)}, hive_partitioning = false, union_by_name = true)"
    order = _ORDER.get(table, mf.TIME_COLUMN[table])
    dels = [s for s in job if s.table == "requests_deletes" and table == "requests"]
    if not dels:
        return table, f"SELECT * FROM {src} ORDER BY {order}"
    return (
        table,
        f"""SELECT r.* FROM {src} r
LEFT JOIN (SELECT trace_id, max(_seq) AS _seq FROM read_parquet({segments.sql_list(root, dels)},
           hive_partitioning = false) GROUP BY trace_id) d ON d.trace_id = r.trace_id
WHERE d._seq IS NULL OR r._seq >= d._seq ORDER BY {order}""",
    )


class Compactor:
    """The background thread of one writer (`DirectoryArchive`). `poke()` after each commit."""

    def __init__(self, writer, cold_after_s: float | None = None):
        self.writer = writer
        self.root: Path = writer.path
        self.cold_after_s = COLD_AFTER_S if cold_after_s is None else cold_after_s
        self.merges = 0
        self.expired: list = []  # retention.Expired of each expiry that dropped something
        self._wake = threading.Event()
        self._busy = threading.Lock()
        self._stop = False
        self._finish = True  # close(finish=...): whether the merges due are done before the thread ends
        self._con = None  # the thread's DuckDB connection, while it runs
        self._is_merging = False  # a merge's queries run on it now
        self._thread = threading.Thread(target=self._run, name="budgetscope-compactor", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def close(self, finish: bool = True) -> None:
        """Stop. `finish`: after the merges due now. Else at once: a merge under way is interrupted (its files
        stay under _tmp, which the next writer clears) and none other starts; the next writer merges what is
        left. A collector stops so: its merges run at nice NICE, behind every other process on the machine, and
        a stop that waited for them took minutes on two busy cores."""
        self._stop = True
        self._finish = finish
        self._wake.set()
        if finish:
            self._thread.join()
            return
        # An interrupt reaches the statement running then, if any: one sent as a merge begins, or between two of
        # its statements, is lost. Sent again until the thread has stopped (a merge tells it to between jobs).
        while self._thread.is_alive():
            if self._is_merging and self._con is not None:
                self._con.interrupt()
            self._thread.join(0.05)

    def _run(self) -> None:
        # imported on use: duckdb 153 ms to import
        import duckdb

        # One thread: merging is background work, and the writer keeps the other cores (on 2 cores the
        # collector's writer lost a third of its time to merges that took both).
        con = duckdb.connect(config={"threads": 1})  # which runs each query on this thread
        if sys.platform == "linux":  # a thread's own nice value (elsewhere it would be the whole process's)
            try:  # merges take the CPU the writer leaves: under a sustained stream they wait, not the writer
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
            except OSError:
                pass
        con.execute("SET enable_progress_bar = false")
        self._con = con
        try:
            while True:
                self._wake.wait(timeout=30.0)
                self._wake.clear()
                try:
                    self.run_once(con)
                except Exception as e:  # noqa: BLE001 - compaction is an optimisation: log, retry later
                    if self._stop and not self._finish:  # interrupted by close(finish=False)
                        log.debug("a merge interrupted by the writer's close: %s", e)
                        return
                    log.error("compaction failed (will retry): %s", (str(e).splitlines() or [type(e).__name__])[0])
                if self._stop:
                    return
        finally:
            self._con = None
            con.close()

    def run_once(self, con) -> int:
        """Merge every job due now; return how many merges were committed."""
        with self._busy:  # one compaction at a time (the thread, or a caller's)
            return self._run_jobs(con)

    def _run_jobs(self, con) -> int:
        done = 0
        if self.writer.retention_ns:  # first: no merge is spent on hours about to go
            gone = expire(self.writer, self.writer.retention_ns, time.time_ns())
            if gone.segments:
                log.info("%s", gone.summary())
                self.expired.append(gone)
        while True:
            jobs = plan(self.writer.manifest, time.time_ns(), self.cold_after_s)
            if not jobs:
                break
            for job in jobs:
                if self._stop and not self._finish:
                    break
                live = {s.path for s in self.writer.manifest.segments}
                if all(s.path in live for s in job):
                    self._is_merging = True
                    try:
                        self._merge(con, job)
                    finally:
                        self._is_merging = False
                    done += 1
            if self._stop and not self._finish:
                break
        self._sweep()
        self.merges += done
        return done

    def _merge(self, con, job: list[mf.Segment]) -> None:
        table, sql = merge_sql(self.root, job)
        seq = max(s.seq for s in job)
        level = max(s.level for s in job if s.table == table) + 1
        written = segments.write(con, self.root, table, sql, seq, level)
        added = segments.place(self.root, written)
        with self.writer._mlock:
            new = self.writer.manifest.commit(added=added, removed=job)
            mf.write(self.root, new)
            self.writer.manifest = new

    def _sweep(self) -> None:
        delete_retired(self.writer, time.time_ns())
