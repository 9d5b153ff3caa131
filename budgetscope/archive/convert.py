"""`convert`: a single-file `.duckdb` archive into a new folder archive, rows and batch ids unchanged."""

from __future__ import annotations

import os
import time
from pathlib import Path

from budgetscope import schema
from budgetscope.archive import manifest as mf
from budgetscope.archive import segments
from budgetscope.archive.directory import WriterLock
from budgetscope.archive.duckdb_archive import DuckDBArchive
from budgetscope.archive.errors import ArchiveError


def convert(source: str | os.PathLike, dest: str | os.PathLike) -> mf.Manifest:
    """Write every table of the DuckDB archive `source` as segments of a new folder archive `dest` (which must
    not exist, or be empty), in one commit; return its manifest. The source is only read."""
    src, root = Path(source), Path(dest)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ArchiveError(f"{root} already exists; convert writes a new archive")
    with DuckDBArchive(src, read_only=True, create=False) as old:
        if old.pending_traces():
            raise ArchiveError(
                f"{src} has {old.pending_traces():,} traces not yet derived; finish them first "
                f"(`budgetscope ingest` of any file into it derives them)"
            )
        tables = {t for (t,) in old.con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        if not root.parent.exists():
            raise ArchiveError(f"cannot create {root}: folder {root.parent} does not exist")
        root.mkdir(exist_ok=True)
        lock = WriterLock(root)
        try:
            written = []
            for t in (schema.SPANS, schema.INGEST_BATCHES, schema.GPU_SAMPLES, schema.SERVER_METRICS):
                if t.name in tables:
                    cols = ", ".join(c.name for c in t.columns)
                    written += segments.write(old.con, root, t.name, f"SELECT {cols} FROM {t.name}", 1)
            cols = ", ".join(c.name for c in schema.REQUESTS.columns)
            written += segments.write(old.con, root, "requests", f"SELECT {cols}, 1::BIGINT AS _seq FROM requests", 1)
            (top,) = old.con.execute("SELECT coalesce(max(batch_id), 0) FROM ingest_batches").fetchone()
            added = segments.place(root, written)
            m = mf.Manifest(committed_ns=time.time_ns()).commit(added=added, published_batch=top)
            mf.write(root, m)
        finally:
            lock.release()
    return m
