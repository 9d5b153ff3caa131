"""The columns every adapter's server rows carry, and a helper that fills the ones a source cannot tell with NULL.

An adapter states what its source measures; every other column is NULL (unknown), never a guess. It gives the
request's instants it saw (`INSTANT_COLUMNS`, derive/instants.py) and the stage durations it measured; a stage it
leaves NULL is taken from the two instants that bound it where both were seen (instants.filled), and every row
is checked against the invariants of derive/invariants.py. An adapter never computes a stage from an instant that
merely stands in for the one that bounds it (a model span's end is not the last token).
"""

from __future__ import annotations

SERVER_COLUMNS = {
    "trace_id": "VARCHAR",
    "server_span_id": "VARCHAR",
    "parent_span_id": "VARCHAR",
    "source": "VARCHAR",
    "request_id": "VARCHAR",
    "service_name": "VARCHAR",
    "model": "VARCHAR",
    "tier": "VARCHAR",
    "tenant": "VARCHAR",
    "outcome": "VARCHAR",
    "arrival_ns": "BIGINT",
    "first_token_ns": "BIGINT",
    "end_ns": "BIGINT",
    "queue_start_ns": "BIGINT",
    "scheduled_ns": "BIGINT",
    "last_token_ns": "BIGINT",
    "input_tokens": "BIGINT",
    "cached_tokens": "BIGINT",
    "output_tokens": "BIGINT",
    "frontend_ms": "DOUBLE",
    "queue_ms": "DOUBLE",
    "prefill_ms": "DOUBLE",
    "decode_ms": "DOUBLE",
    "postprocess_ms": "DOUBLE",
    "ttft_frontend_ms": "DOUBLE",
    "ttft_queue_ms": "DOUBLE",
    "ttft_prefill_ms": "DOUBLE",
    "ttft_ms": "DOUBLE",
    "e2e_ms": "DOUBLE",
    "itl_ms": "DOUBLE[]",
    "queue_entries": "INTEGER",
}
"""Name → type of a server row (the `requests` columns an adapter supplies; requests.py derives the rest)."""


def select_list(**exprs: str) -> str:
    """`expr AS col, ...` for every server column, in order: the given SQL expressions, NULL for the others."""
    unknown = set(exprs) - set(SERVER_COLUMNS)
    if unknown:
        raise ValueError(f"not server-row columns: {sorted(unknown)}")
    return ",\n  ".join(
        f"CAST({exprs[c]} AS {t}) AS {c}" if c in exprs else f"CAST(NULL AS {t}) AS {c}"
        for c, t in SERVER_COLUMNS.items()
    )
