"""`TableAccess`: what every open archive offers over its DuckDB connection `con`, whatever its format."""

from __future__ import annotations

from budgetscope.archive.errors import ArchiveError


class TableAccess:
    """Relations, counts and the polars import of an archive whose public tables are on `self.con`."""

    con = None
    split_traces: int | None = None
    """Of a sharded root's reader: the traces with spans on more than one shard, each derived from all its spans
    (archive/split_traces.py); None for one archive's."""

    def relation(self, table: str):
        """A public table or view as a DuckDB relation."""
        return self.con.table(table)

    @property
    def requests(self):
        return self.relation("requests")

    @property
    def spans(self):
        return self.relation("spans")

    def stale(self) -> bool:
        """True once this read can no longer be answered: a file it reads was deleted. A single-file archive
        never is; a folder reader is when a newer commit's compaction or expiry replaced its segments longer ago than
        the archive's readers' grace (`Manifest.grace_s`). Open the archive again to read its last commit."""
        return False

    def counts(self) -> dict[str, int]:
        """Row counts of the public tables."""
        return {
            t: self.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
            for t in ("spans", "requests", "ingest_batches", "gpu_samples")
        }


def polars():
    """The polars module, or ArchiveError naming the extra that installs it."""
    try:
        # imported on use: polars 132 ms to import
        import polars as pl
    except ImportError:
        raise ArchiveError("polars is not installed (pip install 'budgetscope[polars]')") from None
    return pl
