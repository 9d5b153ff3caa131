"""Which format an archive path names: a single DuckDB file when it is a file, or ends in `.duckdb` or `.db`;
anything else is a folder of Parquet segments. Opening one is `budgetscope.opener.Archive`'s.
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_SUFFIXES = (".duckdb", ".db")


def is_single_file(path: str | os.PathLike) -> bool:
    p = Path(path)
    return p.is_file() or (not p.is_dir() and p.suffix.lower() in FILE_SUFFIXES)


def holds(archive: str | os.PathLike, path: str | os.PathLike) -> bool:
    """True when writing `path` would write inside the archive at `archive` (its folder, or its single file and
    that file's WAL), links and `..` resolved: a command's output must never land there."""
    a, p = Path(archive).resolve(), Path(path).resolve()
    if is_single_file(archive):
        return p in (a, a.with_name(a.name + ".wal"))
    return p == a or a in p.parents
