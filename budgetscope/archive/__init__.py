"""The archive: one DuckDB file of spans, requests and what came in.

    from budgetscope.archive import Archive, read_batches
    with Archive("prod.duckdb") as a:
        report = a.ingest(read_batches("traces.jsonl"))

Exports load on first use, so that `budgetscope collect --help` does not import DuckDB.
"""

import importlib

_EXPORTS = {
    "Archive": "archive", "ArchiveError": "archive", "IngestReport": "archive", "RawBatch": "archive",
    "Rejected": "archive", "read_batches": "files", "run_query": "query", "QueryError": "query",
    "QueryResult": "query",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = list(_EXPORTS)
