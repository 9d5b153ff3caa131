"""The manifest of a directory archive: which Parquet segments are committed, one JSON file replaced atomically.

A directory archive is

    ROOT/manifest.json                                   the commit: every live segment, with its row count
    ROOT/<table>/date=YYYY-MM-DD/hour=HH/<seq>-<n>.parquet   immutable segments, by UTC hour of the table's time
    ROOT/_writer/                                        the writer's private state (lock, hot store)
    ROOT/_tmp/                                           segments being written (never read)

A commit writes its segments, moves them into place, then replaces `manifest.json` (write to a temporary file,
fsync, rename, fsync the folder). A reader reads the manifest once and sees exactly the segments it lists: never a
file being written, never one commit's spans without its requests. Segments replaced by compaction are listed
as `retired` and deleted only after the readers' grace (`Manifest.grace_s`: `RETIRE_GRACE_S` unless the archive
was given another, `collect --reader-grace`), so a reader that opened an older manifest can finish.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from budgetscope.archive.errors import ArchiveError

FORMAT = "budgetscope-archive"
VERSION = 2
MANIFEST = "manifest.json"
WRITER_DIR = "_writer"
TMP_DIR = "_tmp"

HOUR_NS = 3_600_000_000_000
RETIRE_GRACE_S = 60.0
"""How long a segment replaced by compaction stays on disk for readers that opened an older manifest, unless the
archive's manifest says otherwise (`reader_grace_s`)."""

MAX_GRACE_S = 7 * 86_400.0
"""The longest readers' grace an archive may be given (a week: replaced segments then cost a week of disk)."""


def check_grace(seconds) -> float:
    """`seconds` as an archive's readers' grace, or ValueError (one line)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_GRACE_S:
        raise ValueError(
            f"a readers' grace of {seconds!r} s: give more than 0 and at most {MAX_GRACE_S / 86_400:.0f} days"
        )
    return float(seconds)


TIME_COLUMN = {
    "spans": "start_ns",
    "requests": "arrival_ns",
    "requests_deletes": "arrival_ns",
    "ingest_batches": "received_ns",
    "gpu_samples": "ts_ns",
    "server_metrics": "ts_ns",
}
"""Each stored table and the column its segments are partitioned by (UTC date and hour)."""

TABLES = tuple(TIME_COLUMN)


class ManifestError(ArchiveError):
    """The archive's manifest is missing, torn or of another format. The message is one line."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One immutable Parquet file of one table, within one hour partition."""

    table: str
    path: str  # relative to the archive root, '/'-separated
    rows: int
    bytes: int
    min_ns: int  # of the table's time column
    max_ns: int
    seq: int  # the commit that wrote it (a compacted segment: the newest commit it holds)
    level: int = 0  # 0: written by a commit; n: merged n times by compaction
    committed_ns: int = 0  # when the commit that listed it was made (0: by a budgetscope before this field)

    @property
    def hour(self) -> int:
        return self.min_ns // HOUR_NS


@dataclass(frozen=True, slots=True)
class Manifest:
    seq: int = 0
    committed_ns: int = 0
    published_batch: int = 0  # every ingest batch up to this id is in the segments (with its requests derived)
    publish_seq: int = 0  # the last commit made by the writer's publish (compaction commits do not count)
    segments: tuple[Segment, ...] = ()
    retired: tuple[tuple[str, int], ...] = ()  # (path, retired at ns) awaiting deletion
    created_ns: int = field(default_factory=time.time_ns)
    reader_grace_s: float | None = None  # the archive's own readers' grace; None: RETIRE_GRACE_S

    @property
    def grace_s(self) -> float:
        """How long a retired segment stays on disk for readers of an older manifest."""
        return RETIRE_GRACE_S if self.reader_grace_s is None else self.reader_grace_s

    def files(self, table: str, since_ns: int | None = None, until_ns: int | None = None) -> list[Segment]:
        """The segments of `table`, those whose time range meets [since_ns, until_ns) when given."""
        return [
            s
            for s in self.segments
            if s.table == table
            and (since_ns is None or s.max_ns >= since_ns)
            and (until_ns is None or s.min_ns < until_ns)
        ]

    def rows(self, table: str) -> int:
        return sum(s.rows for s in self.segments if s.table == table)

    def without_retired(self, paths) -> Manifest:
        gone = set(paths)
        return replace(self, retired=tuple(r for r in self.retired if r[0] not in gone))

    def to_json(self) -> bytes:
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "seq": self.seq,
            "committed_ns": self.committed_ns,
            "created_ns": self.created_ns,
            "published_batch": self.published_batch,
            "publish_seq": self.publish_seq,
            "segments": [asdict(s) for s in self.segments],
            "retired": [list(r) for r in self.retired],
        }
        if self.reader_grace_s is not None:
            doc["reader_grace_s"] = self.reader_grace_s
        return json.dumps(doc, separators=(",", ":")).encode()

    def commit(self, added=(), removed=(), published_batch: int | None = None) -> Manifest:
        """The next manifest: `added` segments in, `removed` out (and retired), seq + 1. A commit that gives
        `published_batch` is the writer's publish; one without, compaction's."""
        now = time.time_ns()
        gone = {s.path for s in removed}
        added = [s if s.committed_ns else replace(s, committed_ns=now) for s in added]
        return replace(
            self,
            seq=self.seq + 1,
            committed_ns=now,
            published_batch=self.published_batch if published_batch is None else published_batch,
            publish_seq=self.publish_seq if published_batch is None else self.seq + 1,
            segments=tuple(s for s in self.segments if s.path not in gone) + tuple(added),
            retired=self.retired + tuple((p, now) for p in sorted(gone)),
        )


def partition_dir(table: str, hour: int) -> str:
    """`table/date=YYYY-MM-DD/hour=HH` for the UTC hour `hour` (hours since the epoch)."""
    t = time.gmtime(hour * 3600)
    return f"{table}/date={t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}/hour={t.tm_hour:02d}"


def is_directory_archive(path: Path) -> bool:
    return path.is_dir() and (path / MANIFEST).is_file()


def read(root: Path) -> Manifest:
    """The committed manifest of the archive at `root`; ManifestError (one line) if it is missing or not ours."""
    p = root / MANIFEST
    try:
        doc = json.loads(p.read_bytes())
    except FileNotFoundError:
        raise ManifestError(f"{root} is not a budgetscope archive (no {MANIFEST})") from None
    except (OSError, ValueError) as e:
        raise ManifestError(f"{p} cannot be read ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ManifestError(f"{p} is not a budgetscope manifest")
    if doc.get("version") != VERSION:
        raise ManifestError(f"{root} has archive format {doc.get('version')}; this budgetscope reads {VERSION}")
    try:
        grace = doc.get("reader_grace_s")
        return Manifest(
            seq=doc["seq"],
            committed_ns=doc["committed_ns"],
            created_ns=doc["created_ns"],
            published_batch=doc["published_batch"],
            publish_seq=doc["publish_seq"],
            segments=tuple(Segment(**s) for s in doc["segments"]),
            retired=tuple((p, t) for p, t in doc["retired"]),
            reader_grace_s=None if grace is None else check_grace(grace),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ManifestError(f"{p} is malformed ({e})") from None


def write(root: Path, m: Manifest) -> None:
    """Replace the manifest atomically and durably: a crash leaves the old one or the new one, whole."""
    tmp = root / f".{MANIFEST}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(m.to_json())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, root / MANIFEST)
    except BaseException:  # a full disk, say: no torn temporary file left beside the manifest
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(root)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
