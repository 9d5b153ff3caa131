"""`budgetscope expire`: drop an archive's hour partitions older than a retention period, once.

A running `collect --retention` does the same as it goes; this is for archives no one is writing (an `ingest`
target, the shards of a stopped fleet). See retention.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.retention import Expired
from budgetscope.commands.options import UsageError, format_option


def _roots(archive: str) -> list[Path]:
    """The archive folders to expire: the archive itself, or every shard of a sharded root."""
    from budgetscope.archive import manifest as mf
    from budgetscope.archive.archive import is_single_file
    from budgetscope.archive.shards import shards

    root = Path(archive)
    if is_single_file(root):
        raise ArchiveError(
            f"{root}: retention applies to folder archives (convert this one with `budgetscope convert`)"
        )
    if mf.is_directory_archive(root):
        return [root]
    found = shards(root)
    if not found:
        raise ArchiveError(f"no archive at {root}")
    return found


def _free(roots: list[Path]) -> None:
    """Every folder must be free of a writer before any is changed (a sharded root changes all or none)."""
    from budgetscope.archive.directory import WriterLock

    for r in roots:
        try:
            WriterLock(r).release()
        except ArchiveError as e:
            raise ArchiveError(f"{e}; a running collector expires with `collect --retention`") from None


def _expire_once(root: Path, keep_ns: int) -> Expired:
    """Open the archive's writer (which lands what a collector left in the spool), drop what the retention says in
    one commit and delete the files readers have had their grace of, here and now: a commit that cannot be written
    (a full disk) raises, where a compactor thread's would only be logged and tried again."""
    from budgetscope.archive.retention import delete_retired, expire
    from budgetscope.opener import Archive  # the opener imports ingest/ and derive/: only when expiring

    w = Archive(root, create=False, compact=False)
    try:
        gone = expire(w, keep_ns, time.time_ns())
        delete_retired(w, time.time_ns())
    except BaseException:
        w.abandon()  # nothing more written: the last commit stays as it was
        raise
    w.close()
    return gone


@click.command()
@click.option("--archive", "-a", required=True, type=click.Path(), help="Archive folder, or a sharded root.")
@click.option(
    "--retention",
    required=True,
    metavar="AGE",
    help="Keep this much: 30d, 36h (whole UTC hours older than it are dropped, by each table's own time).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be dropped; change nothing.")
@click.option(
    "--no-wait",
    is_flag=True,
    help="Do not wait the readers' grace to delete the files (the archive's "
    "next writer, or `expire` run, deletes them).",
)
@format_option("table", "json")
def expire(archive: str, retention: str, dry_run: bool, no_wait: bool, fmt: str) -> None:
    """Drop the hour partitions of ARCHIVE older than --retention, in one commit per archive (or shard).

    Readers that opened the archive before go on reading: the files are deleted once they have had the
    archive's grace (the one compaction gives: 60 s unless `collect --reader-grace` set another), which this
    waits for unless --no-wait. Spans, requests, GPU samples, scrapes
    and batch records each go by their own time column, against this machine's clock. A collector writing the
    archive holds it: give that one `--retention` instead.

    \b
      budgetscope expire --archive prod/ --retention 30d --dry-run
      budgetscope expire --archive /shared/fleet/ --retention 14d      # every shard
    """
    from budgetscope.archive import manifest as mf
    from budgetscope.archive.retention import due, parse_retention

    try:
        keep_ns = parse_retention(retention)
        roots = _roots(archive)
        now = time.time_ns()
        results: dict[str, Expired] = {}
        if dry_run:
            for r in roots:
                segs, before = due(mf.read(r), keep_ns, now)
                rows: dict[str, int] = {}
                for s in segs:
                    rows[s.table] = rows.get(s.table, 0) + s.rows
                results[str(r)] = Expired(len(segs), rows, sum(s.bytes for s in segs), before)
        else:
            _free(roots)
            results = {str(r): _expire_once(r, keep_ns) for r in roots}
            if not no_wait and any(e.segments for e in results.values()):
                grace = max(mf.read(r).grace_s for r in roots)
                click.echo(f"budgetscope expire: deleting the files once readers have had {grace:g} s…", err=True)
                time.sleep(grace + 1)
                for r in roots:  # a writer's compactor deletes the retired files whose grace has passed
                    _expire_once(r, keep_ns)
    except (ArchiveError, ValueError) as e:
        raise UsageError(str(e)) from None
    except Exception as e:
        from budgetscope.archive.errors import write_failure

        if (line := write_failure(e, archive)) is None:
            raise
        raise UsageError(line) from None
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "dry_run": dry_run,
                    "archives": {
                        r: {"segments": e.segments, "rows": e.rows or {}, "bytes": e.bytes, "before_ns": e.before_ns}
                        for r, e in results.items()
                    },
                }
            )
        )
        return
    for r, e in results.items():
        click.echo(f"{r}: {e.summary(dry_run)}")
