"""Writing Parquet segments: rows of a DuckDB query, one file per UTC hour of the table's time column.

Files are written under ROOT/_tmp first and moved into their partition folder by `place`, so a file that
appears under a table's folder is always whole. Which of them count is the manifest's business.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from pathlib import Path

from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.manifest import HOUR_NS, TIME_COLUMN, TMP_DIR, Segment, fsync_dir, partition_dir
from budgetscope.cursors import on_cursors

PARQUET_OPTIONS = "FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 1, ROW_GROUP_SIZE 122880"
"""How every segment is written: zstd level 1 (docs/benchmarks.md, "PARQUET_OPTIONS")."""

PARTITIONED_FROM = 5
"""Rows of up to this many hours are written one COPY an hour (each runs on every core); more, by one COPY
with PARTITION_BY (which writes its partitions one at a time)."""

ORDER = {"requests": "tier, arrival_ns"}
"""The order rows of these tables are written in (whoever writes them: a commit, compaction, convert): a report
reads one tier, then one window, at a time (docs/benchmarks.md, "ORDER"). PARTITION_BY does not keep an order, so
these tables never use it."""


def write(
    con, root: Path, table: str, select_sql: str, seq: int, level: int = 0, workers: int = 1
) -> list[tuple[Path, Segment]]:
    """Write the rows of `select_sql` (the table's stored columns) as segments of `table`, one file per UTC hour;
    return each temporary file with the Segment it will be once placed. No rows: no files.

    `workers` > 1: the hours of an ordered table are written that many at a time, each on a cursor of `con` (which
    then sees only committed rows). DuckDB writes a file's row groups on its threads, and an hour of fewer rows
    than a row group is one thread's work: 500,000 `requests` rows over 7 hours took 2.9-3.5 s one hour after
    another and 2.0 s two at a time (docs/benchmarks.md, "Writing hours side by side")."""
    col = TIME_COLUMN[table]
    src = f"(SELECT *, {col} // {HOUR_NS} AS bs_hour FROM ({select_sql}))"
    hours = con.execute(f"SELECT bs_hour, count(*), min({col}), max({col}) FROM {src} GROUP BY 1 ORDER BY 1").fetchall()
    if not hours:
        return []
    if hours[-1][0] is None:  # NULLs sort last: a row no hour's file can hold
        raise ArchiveError(f"{table}: {hours[-1][1]} rows have no {col}; nothing was published")
    tmp = root / TMP_DIR / uuid.uuid4().hex
    tmp.mkdir(parents=True)
    files = {}
    order = f" ORDER BY {ORDER[table]}" if table in ORDER else ""
    staged = None
    workers = min(workers, len(hours)) if order else 1
    if order and len(hours) >= PARTITIONED_FROM:  # many hours, one by one: run the SELECT once, not once an hour
        staged = f"bs_write_{uuid.uuid4().hex[:12]}"  # sorted by hour: each COPY skips the others' row groups
        temp = "TEMP " if workers == 1 else ""  # the workers' cursors see no temporary table of `con`
        con.execute(f"CREATE {temp}TABLE {staged} AS SELECT * FROM {src} ORDER BY bs_hour")
        src = staged
    if len(hours) < PARTITIONED_FROM or order:
        copies = []
        for hour, _, lo, hi in hours:
            files[hour] = [tmp / f"{hour}.parquet"]
            # the hour's bounds too: DuckDB takes a range on the column itself into the scan, which skips the
            # row groups outside it (an hour's number, computed from the column, it tests on every row)
            copies.append(
                f"COPY (SELECT * EXCLUDE (bs_hour) FROM {src} WHERE bs_hour = {hour} "
                f"AND {col} BETWEEN {lo} AND {hi}{order}) TO '{files[hour][0]}' ({PARQUET_OPTIONS})"
            )
        try:
            wrote = on_cursors(con, _copy, copies, workers, "budgetscope-write")
        finally:
            if staged:
                con.execute(f"DROP TABLE {staged}")
        for (hour, rows, *_), n in zip(hours, wrote):
            if n != rows:  # a cursor sees only committed rows: a write from inside `con`'s transaction
                raise ArchiveError(f"{table}: the file of hour {hour} holds {n} rows of {rows}; nothing was published")
    else:
        con.execute(f"COPY {src} TO '{tmp}' ({PARQUET_OPTIONS}, PARTITION_BY (bs_hour), FILENAME_PATTERN 'f{{i}}')")
        files = {hour: sorted((tmp / f"bs_hour={hour}").glob("*.parquet")) for hour, *_ in hours}
    out = []
    for hour, rows, lo, hi in hours:
        for f in files[hour]:
            if len(files[hour]) > 1:  # a partition written as several files: each its own segment
                rows, lo, hi = con.execute(
                    f"SELECT count(*), min({col}), max({col}) FROM read_parquet('{f}')"
                ).fetchone()
            name = f"{seq:012d}-{uuid.uuid4().hex[:8]}.parquet"
            out.append(
                (f, Segment(table, f"{partition_dir(table, hour)}/{name}", rows, f.stat().st_size, lo, hi, seq, level))
            )
    return out


def _copy(con, sql: str) -> int:
    """Run a COPY; the rows it wrote."""
    return con.execute(sql).fetchone()[0]


def place(root: Path, written: list[tuple[Path, Segment]]) -> list[Segment]:
    """Make each written file durable and move it to its partition folder; return the Segments."""
    dirs = set()
    for f, seg in written:
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
        dest = root / seg.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(f, dest)
        dirs.add(dest.parent)
    for d in dirs:
        fsync_dir(d)
    discard(written)  # the write's own folders under _tmp, empty now
    return [s for _, s in written]


def discard(written: list[tuple[Path, Segment]]) -> None:
    """Delete the folders under _tmp of files `write` returned (what they still hold is never published)."""
    for f in {f.parent if f.parent.parent.name == TMP_DIR else f.parent.parent for f, _ in written}:
        shutil.rmtree(f, ignore_errors=True)


class WriteBehind:
    """`write` of several tables' rows on a thread of its own (over a cursor of `con`: DuckDB runs it beside
    whatever `con` runs meanwhile), started now and taken with `result`. A commit writes the rows that landed
    since the last one this way while it derives the `requests` rows, which they do not depend on."""

    def __init__(self, con, root: Path, queries: dict[str, str], seq: int):
        self.seq = seq
        self._written: list[tuple[Path, Segment]] = []
        self._error: BaseException | None = None
        cursor = con.cursor()
        self._thread = threading.Thread(
            target=self._run, args=(cursor, root, queries), name="budgetscope-write-behind", daemon=True
        )
        self._thread.start()

    def _run(self, cursor, root: Path, queries: dict[str, str]) -> None:
        try:
            for table, sql in queries.items():
                self._written += write(cursor, root, table, sql, self.seq)
        except BaseException as e:  # noqa: BLE001 - raised where the commit takes the result
            self._error = e
        finally:
            cursor.close()

    def result(self) -> list[tuple[Path, Segment]]:
        """The files written (as `write` returns them), once written; the write's exception if it failed."""
        self._thread.join()
        if self._error is not None:
            discard(self._written)
            raise self._error
        return self._written

    def discard(self) -> None:
        """Wait for the write, and delete what it wrote: the commit it was for did not happen."""
        self._thread.join()
        discard(self._written)


def clear_tmp(root: Path) -> None:
    shutil.rmtree(root / TMP_DIR, ignore_errors=True)


def sql_list(root: Path, segs) -> str:
    """A DuckDB list literal of the segments' absolute paths."""
    return "[" + ", ".join("'" + str(root / s.path).replace("'", "''") + "'" for s in segs) + "]"
