"""A request's instants: which ones its source saw, and the stages that lie between two of them.

Every adapter states, per row, the instants of the request it saw (ns since the epoch; NULL where its format does
not tell):

    arrival → queue_start → scheduled → first_token → last_token → end          (the server's clock)
    client_send → client_first_token → client_end                               (the client's clock)

and the stage durations it measured itself (a sum of spans, a server's own latency field). A stage bounded by two
instants (`STAGE_BOUNDS`) that the adapter left NULL is taken here, once for every adapter, from those two instants
when both were seen; when one of them is missing it stays NULL, and its time shows as `unaccounted`: it is never
folded into a neighbouring stage. The TTFT-window columns (`ttft_frontend_ms`, ...) are taken the same way when the
first token was seen. `ttft_ms` and `e2e_ms` are the adapter's own.

`arrival_ns` and `end_ns` are the row's anchors and never NULL, so whether they were seen is told apart: a row
without a server span (a server's reported timings, or a client span alone) has no server clock, its arrival and
end being the client's send and receive (derive/requests.py); and the end was seen only when the server's E2E is
known (`e2e_ms`): an adapter whose format keeps no finish time ends the row at its last known instant (vLLM's
offline V1 metrics, at the last token) and leaves `e2e_ms` NULL.
"""

from __future__ import annotations

from budgetscope.derive.server_row import SERVER_COLUMNS

SERVER_INSTANTS = {
    "arrival": "arrival_ns",
    "queue_start": "queue_start_ns",
    "scheduled": "scheduled_ns",
    "first_token": "first_token_ns",
    "last_token": "last_token_ns",
    "end": "end_ns",
}
"""The server's instants, in the order a request passes them → their `requests` column."""
CLIENT_INSTANTS = {
    "client_send": "client_sent_ns",
    "client_first_token": "client_first_token_ns",
    "client_end": "client_end_ns",
}
"""The client's instants, in order → their `requests` column."""

STAGE_BOUNDS = {
    "frontend": ("arrival", "queue_start"),
    "queue": ("queue_start", "scheduled"),
    "prefill": ("scheduled", "first_token"),
    "decode": ("first_token", "last_token"),
    "postprocess": ("last_token", "end"),
}
"""Each server stage and the two instants that bound it (docs/design.md, "Stages and metrics")."""
TTFT_STAGES = ("frontend", "queue", "prefill")
"""The stages inside the TTFT window, each with its `ttft_<stage>_ms` column."""

HAS_SERVER_CLOCK = "server_span_id IS NOT NULL"
"""SQL over a server row: its arrival and end are the server's own (not a client's stand-ins)."""


def seen(instant: str) -> str:
    """SQL over a server row or `requests` row: the server's instant `instant` (a SERVER_INSTANTS name) was seen."""
    col = SERVER_INSTANTS[instant]
    if instant == "arrival":
        return HAS_SERVER_CLOCK
    if instant == "end":
        return f"({HAS_SERVER_CLOCK} AND e2e_ms IS NOT NULL)"
    return f"({HAS_SERVER_CLOCK} AND {col} IS NOT NULL)"


def between(start: str, end: str) -> str:
    """SQL: the ms from instant `start` to instant `end` (names of STAGE_BOUNDS), NULL unless both were seen."""
    return f"CASE WHEN {seen(start)} AND {seen(end)} THEN ({SERVER_INSTANTS[end]} - {SERVER_INSTANTS[start]}) / 1e6 END"


def _from_instants() -> dict[str, str]:
    """Server-row column → the SQL that takes it from the instants (NULL where one of them is missing)."""
    out = {f"{stage}_ms": between(*bounds) for stage, bounds in STAGE_BOUNDS.items()}
    out.update(
        {
            f"ttft_{s}_ms": f"CASE WHEN first_token_ns IS NOT NULL THEN {between(*STAGE_BOUNDS[s])} END"
            for s in TTFT_STAGES
        }
    )
    return out


def filled(rows: str) -> str:
    """SELECT over the server rows `rows` (every SERVER_COLUMNS column): the same rows, each stage the adapter left
    NULL taken from the instants that bound it, where both were seen."""
    derived = _from_instants()

    def col(name: str) -> str:
        return f"coalesce({name}, {derived[name]}) AS {name}" if name in derived else name

    return f"SELECT {', '.join(col(c) for c in SERVER_COLUMNS)} FROM {rows}"


def seen_sql() -> str:
    """SQL over a `requests` row: the list of the instants its source saw, in order (`requests.instants`)."""
    server = [f"CASE WHEN {seen(n)} THEN '{n}' END" for n in SERVER_INSTANTS]
    client = [f"CASE WHEN {c} IS NOT NULL THEN '{n}' END" for n, c in CLIENT_INSTANTS.items()]
    return f"list_filter([{', '.join(server + client)}], lambda x: x IS NOT NULL)"
