"""Opening an archive, whichever its format: a directory of Parquet segments (`prod/`, the default) or a
single DuckDB file (`prod.duckdb`, budgetscope 0.1's format, still read and written).

    Archive("prod/")                  the writer (one process at a time; `collect` passes durable=True)
    Archive("prod/", read_only=True)  a reader of the last commit; any number, while the writer runs
    open("prod/")                     the same reader, for notebooks (`.requests`, `.spans`, `.lazy(table)`)

A path names a single-file archive when it is a file, or ends in `.duckdb` or `.db`; anything else is a folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from budgetscope.archive.duckdb_archive import (  # noqa: F401 - re-exported: the ingest vocabulary
    DuckDBArchive, IngestReport, RawBatch, Rejected)
from budgetscope.archive.errors import ArchiveError

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


def Archive(path: str | os.PathLike, *, read_only: bool = False, create: bool = True, sandbox: bool = False,
            durable: bool = False, since_ns: int | None = None, until_ns: int | None = None,
            retention_ns: int | None = None, reader_grace_s: float | None = None, recover: bool = True):  # noqa: N802
    """The writer of the archive at `path` (created if missing and `create`), or with `read_only` (or
    `sandbox`: no file access but the archive's own, for `budgetscope query`) a reader.

    `durable` (directory writer): spool what `ingest(derive=False)` landed, so that it survives a crash before
    `commit()` (the collector). `since_ns`/`until_ns` (directory reader): read only the segments
    that can hold that window. `retention_ns` (directory writer): drop the hour partitions older than this as
    it goes (`retention.py`). `reader_grace_s` (directory writer): keep replaced segments this long for readers
    of older commits from now on, recorded in the archive (`manifest.Manifest.grace_s`). `recover=False`
    (directory writer): land what a collector left in the spool when the caller calls `recover()`, not now."""
    if is_single_file(path):
        for given, what in ((retention_ns, "retention"), (reader_grace_s, "a readers' grace")):
            if given and not (read_only or sandbox):
                raise ArchiveError(f"{path}: {what} applies to folder archives (convert this one with "
                                   "`budgetscope convert`)")
        return DuckDBArchive(path, read_only=read_only, create=create, sandbox=sandbox)
    if read_only or sandbox:
        from budgetscope.archive.reader import ArchiveReader

        return ArchiveReader(path, since_ns=since_ns, until_ns=until_ns, sandbox=sandbox)
    from budgetscope.archive.directory import DirectoryArchive

    return DirectoryArchive(path, create=create, durable=durable, retention_ns=retention_ns,
                            reader_grace_s=reader_grace_s, recover=recover)


def open(path: str | os.PathLike, since_ns: int | None = None, until_ns: int | None = None):  # noqa: A001
    """A reader of the archive at `path`: `.con` (DuckDB, the tables of docs/archive.md), `.requests` and
    `.spans` (DuckDB relations), `.lazy(table)` (a polars LazyFrame). Raises ArchiveError (one line)."""
    return Archive(path, read_only=True, create=False, since_ns=since_ns, until_ns=until_ns)
