"""The archive: spans, requests and what came in, as Parquet segments in a folder (or one DuckDB file).

    import budgetscope.archive
    from budgetscope.archive import Archive, read_batches
    with Archive("prod/") as a:                       # the one writer
        a.ingest(read_batches("traces.jsonl"))
    with budgetscope.archive.open("prod/") as r:      # any number of readers, also while a writer runs
        r.requests.aggregate("tier, quantile_cont(ttft_ms, 0.99)").show()

Exports load on first use, so that `budgetscope collect --help` does not import DuckDB.
"""

from budgetscope._lazy import lazy_exports

# `Archive`, `open`, `IngestReport`, `Rejected`, `read_batches` and the query names are the documented way in,
# kept here by name only: they live in the layers above the store (budgetscope/opener.py, budgetscope/ingest/,
# budgetscope/query.py), which this package never imports.
_EXPORTS = {
    "Archive": "budgetscope.opener",
    "open": "budgetscope.opener",
    "ArchiveError": "errors",
    "IngestReport": "budgetscope.ingest.lander",
    "RawBatch": "spool",
    "Rejected": "budgetscope.ingest.lander",
    "read_batches": "budgetscope.ingest.files",
    "run_query": "budgetscope.query",
    "QueryError": "budgetscope.query",
    "QueryResult": "budgetscope.query",
    "ArchiveReader": "reader",
    "DirectoryArchive": "directory",
    "DuckDBArchive": "duckdb_archive",
    "convert": "convert",
}

__getattr__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = list(_EXPORTS)
