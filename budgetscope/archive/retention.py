"""Retention: the writer drops the hour partitions older than a retention period, in one manifest commit.

Segments are never deleted behind the manifest's back (a reader of a manifest whose file is gone fails), so
an object-store lifecycle rule on `date=` prefixes is not the way. Instead the writer's compactor thread — which
already commits merges and deletes retired files after their grace — drops every segment whose whole hour
partition ended more than the retention period ago, by each table's own time column (`manifest.TIME_COLUMN`),
against this machine's clock; the files follow after the archive's readers' grace (`Manifest.grace_s`, 60 s
unless `collect --reader-grace` set another), so readers that opened the older manifest finish. Run as a merge
is, expiry never races one.

    budgetscope collect --archive prod/ --retention 30d     # the running writer expires as it goes
    budgetscope expire  --archive prod/ --retention 30d     # once, on an archive no one is writing
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from budgetscope.archive import manifest as mf

_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*")


def _seconds(text: str, units: str) -> float | None:
    """'36h' → seconds, when its unit is one of `units`; None for anything else."""
    m = _DURATION.fullmatch(text or "")
    return float(m.group(1)) * _UNITS[m.group(2)] if m and m.group(2) in units else None


def parse_retention(text: str) -> int:
    """'30d' or '12h' → nanoseconds; ValueError (one line) for anything else, or less than an hour."""
    seconds = _seconds(text, "dh")
    if seconds is None:
        raise ValueError(f"retention {text!r}: write a number of days or hours, like 30d or 36h")
    ns = int(seconds * 1_000_000_000)
    if ns < mf.HOUR_NS:
        raise ValueError(f"retention {text!r}: at least 1h (partitions are hours)")
    return ns


def parse_grace(text: str) -> float:
    """'90s', '10m', '2h' or '1d' → seconds, for how long replaced segments stay on disk for readers of older
    commits; ValueError (one line) for anything else, 0, or more than manifest.MAX_GRACE_S."""
    seconds = _seconds(text, "smhd")
    try:
        if seconds is not None:
            return mf.check_grace(seconds)
    except ValueError:
        pass
    raise ValueError(
        f"reader grace {text!r}: write a duration like 90s, 10m or 2h, more than 0 and at most "
        f"{mf.MAX_GRACE_S / 86_400:.0f}d"
    )


@dataclass(frozen=True, slots=True)
class Expired:
    """What one expiry dropped from the manifest (the files go after the retire grace)."""

    segments: int = 0
    rows: dict | None = None  # table -> rows dropped
    bytes: int = 0
    before_ns: int = 0  # every hour partition that ended at or before this was dropped

    def summary(self, dry_run: bool = False) -> str:
        if not self.segments:
            return "nothing to expire"
        when = time.strftime("%Y-%m-%dT%H:00Z", time.gmtime(self.before_ns / 1e9))
        rows = ", ".join(f"{n:,} {t}" for t, n in sorted((self.rows or {}).items()))
        return (
            f"{'would expire' if dry_run else 'expired'} {self.segments:,} segments ({rows}; "
            f"{self.bytes / 1e6:,.1f} MB) of the hours before {when}"
        )


def due(m: mf.Manifest, retention_ns: int, now_ns: int) -> tuple[list[mf.Segment], int]:
    """The segments whose hour partition ended at or before `now_ns - retention_ns` (rounded down to the hour),
    and that boundary."""
    before = (now_ns - retention_ns) // mf.HOUR_NS * mf.HOUR_NS
    return [s for s in m.segments if (s.hour + 1) * mf.HOUR_NS <= before], before


def delete_retired(writer, now_ns: int) -> None:
    """Delete the segments that a commit replaced (a merge) or dropped (an expiry) once readers have had the
    archive's grace (`Manifest.grace_s`) since."""
    cutoff = now_ns - int(writer.manifest.grace_s * 1e9)
    old = [p for p, at in writer.manifest.retired if at < cutoff]
    if not old:
        return
    with writer._mlock:
        new = writer.manifest.without_retired(old)
        mf.write(writer.path, new)
        writer.manifest = new
    for p in old:
        (writer.path / p).unlink(missing_ok=True)


def expire(writer, retention_ns: int, now_ns: int) -> Expired:
    """Drop the writer's segments older than the retention in one commit (under its manifest lock). Call it where
    no merge runs at the same time (the compactor's thread, or a writer whose compactor is off)."""
    with writer._mlock:
        old, before = due(writer.manifest, retention_ns, now_ns)
        if not old:
            return Expired(before_ns=before)
        new = writer.manifest.commit(removed=old)
        mf.write(writer.path, new)
        writer.manifest = new
    rows: dict[str, int] = {}
    for s in old:
        rows[s.table] = rows.get(s.table, 0) + s.rows
    return Expired(len(old), rows, sum(s.bytes for s in old), before)
