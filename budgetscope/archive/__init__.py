"""The archive: one DuckDB file of spans, requests and what came in.

    from budgetscope.archive import Archive, read_batches
    with Archive("prod.duckdb") as a:
        report = a.ingest(read_batches("traces.jsonl"))

Exports load on first use, so that `budgetscope collect --help` does not import DuckDB.
"""

from budgetscope._lazy import lazy_exports

_EXPORTS = {
    "Archive": "archive", "ArchiveError": "archive", "IngestReport": "archive", "RawBatch": "archive",
    "Rejected": "archive", "read_batches": "files", "run_query": "query", "QueryError": "query",
    "QueryResult": "query",
}

__getattr__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = list(_EXPORTS)
