"""Opening an archive, whichever its format: a directory of Parquet segments (`prod/`, the default) or a
single DuckDB file (`prod.duckdb`, budgetscope 0.1's format, still read and written).

    Archive("prod/")                  the writer (one process at a time; `collect` passes durable=True)
    Archive("prod/", read_only=True)  a reader of the last commit; any number, while the writer runs
    open("prod/")                     the same reader, for notebooks (`.requests`, `.spans`, `.lazy(table)`)

A path names a single-file archive when it is a file, or ends in `.duckdb` or `.db`; anything else is a folder.
This is where the layers meet: the store (`budgetscope.archive`) is handed its lander (`budgetscope.ingest`)
and its derivation (`budgetscope.derive`), neither of which it imports.
"""

from __future__ import annotations

import os

from budgetscope.archive.archive import is_single_file
from budgetscope.archive.directory import DirectoryArchive, Holding
from budgetscope.archive.duckdb_archive import DuckDBArchive
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.reader import ArchiveReader
from budgetscope.collector.tuning import HOLDING
from budgetscope.derive.requests import requests_sql
from budgetscope.ingest.lander import Lander


def Archive(
    path: str | os.PathLike,
    *,
    read_only: bool = False,
    create: bool = True,
    sandbox: bool = False,
    settings: dict | None = None,
    durable: bool = False,
    since_ns: int | None = None,
    until_ns: int | None = None,
    retention_ns: int | None = None,
    reader_grace_s: float | None = None,
    recover: bool = True,
    compact: bool = True,
    holding: Holding | None = None,
):  # noqa: N802 - a factory named like the classes it returns (Archive(path))
    """The writer of the archive at `path` (created if missing and `create`), or with `read_only` (or
    `sandbox`: no file access but the archive's own, DuckDB's configuration locked with `settings` in it, for
    `budgetscope query`) a reader.

    `durable` (directory writer): spool what `ingest(derive=False)` landed, so that it survives a crash before
    `commit()` (the collector), holding what it published as `holding` says (default: the collector's,
    collector/tuning.py). `since_ns`/`until_ns` (directory reader): read only the segments that can hold that
    window. `retention_ns` (directory writer): drop the hour partitions older than this as it goes
    (`retention.py`). `reader_grace_s` (directory writer): keep replaced segments this long for readers of older
    commits from now on, recorded in the archive (`manifest.Manifest.grace_s`). `recover=False` (directory
    writer): land what a collector left in the spool when the caller calls `recover()`, not now. `compact`
    (directory writer): merge small segments in a background thread."""
    if is_single_file(path):
        for given, what in ((retention_ns, "retention"), (reader_grace_s, "a readers' grace")):
            if given and not (read_only or sandbox):
                raise ArchiveError(
                    f"{path}: {what} applies to folder archives (convert this one with `budgetscope convert`)"
                )
        store = DuckDBArchive(path, read_only=read_only, create=create, sandbox=sandbox, settings=settings)
        if not store.read_only:
            _attach(store)
            try:
                store.commit()  # finish what a crashed writer left
            except BaseException:
                store.close()
                raise
        return store
    if read_only or sandbox:
        return ArchiveReader(
            path, since_ns=since_ns, until_ns=until_ns, sandbox=sandbox, settings=settings, derive_sql=requests_sql
        )
    store = DirectoryArchive(
        path,
        create=create,
        durable=durable,
        compact=compact,
        retention_ns=retention_ns,
        reader_grace_s=reader_grace_s,
        holding=(holding or HOLDING) if durable else None,
    )
    try:
        _attach(store)
        if recover:
            store.recover()
    except BaseException:  # nothing opened stays open: a writer that failed to open holds no lock
        store.abandon()
        raise
    return store


def _attach(store) -> None:
    store.lander = Lander(store)


def open(path: str | os.PathLike, since_ns: int | None = None, until_ns: int | None = None):  # noqa: A001 - shadows the builtin on purpose: budgetscope.archive.open, as builtins.open
    """A reader of the archive at `path`: `.con` (DuckDB, the tables of docs/archive.md), `.requests` and
    `.spans` (DuckDB relations), `.lazy(table)` (a polars LazyFrame). Raises ArchiveError (one line)."""
    return Archive(path, read_only=True, create=False, since_ns=since_ns, until_ns=until_ns)
