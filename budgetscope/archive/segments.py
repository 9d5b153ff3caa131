"""Writing Parquet segments: rows of a DuckDB query, one file per UTC hour of the table's time column.

Files are written under ROOT/_tmp first and moved into their partition folder by `place`, so a file that
appears under a table's folder is always whole. Which of them count is the manifest's business.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from budgetscope.archive.manifest import HOUR_NS, TIME_COLUMN, TMP_DIR, Segment, fsync_dir, partition_dir

PARQUET_OPTIONS = "FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880"


def write(con, root: Path, table: str, select_sql: str, params: list | None, seq: int,
          level: int = 0) -> list[tuple[Path, Segment]]:
    """Write the rows of `select_sql` (the table's stored columns) as segments of `table`; return each
    temporary file with the Segment it will be once placed. No rows: no files."""
    col = TIME_COLUMN[table]
    tmp = root / TMP_DIR / uuid.uuid4().hex
    tmp.mkdir(parents=True)
    con.execute(f"""COPY (SELECT *, {col} // {HOUR_NS} AS bs_hour FROM ({select_sql}))
                    TO '{tmp}' ({PARQUET_OPTIONS}, PARTITION_BY (bs_hour), FILENAME_PATTERN 'f{{i}}')""",
                params or [])
    out = []
    for part in sorted(tmp.iterdir()):
        hour = int(part.name.split("=", 1)[1])
        for n, f in enumerate(sorted(part.iterdir())):
            ((rows, lo, hi),) = con.execute(
                f"SELECT count(*), min({col}), max({col}) FROM read_parquet(?, hive_partitioning = false)",
                [str(f)]).fetchall()
            name = f"{seq:012d}-{uuid.uuid4().hex[:8]}-{n}.parquet"
            seg = Segment(table, f"{partition_dir(table, hour)}/{name}", rows, f.stat().st_size, lo, hi, seq, level)
            out.append((f, seg))
    if not out:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


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
    for f in {f.parent.parent for f, _ in written}:  # this write's own folder under _tmp
        shutil.rmtree(f, ignore_errors=True)
    return [s for _, s in written]


def clear_tmp(root: Path) -> None:
    shutil.rmtree(root / TMP_DIR, ignore_errors=True)


def sql_list(root: Path, segs) -> str:
    """A DuckDB list literal of the segments' absolute paths."""
    return "[" + ", ".join("'" + str(root / s.path).replace("'", "''") + "'" for s in segs) + "]"
