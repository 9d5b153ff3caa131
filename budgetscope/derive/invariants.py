"""What every derived `requests` row must satisfy, whatever its format: a row that does not was misread, and says so.

Checked on every row, once, for every adapter (derive/requests.py); the names of those a row breaks are its
`violations`, and `report`, the dashboard and `budgetscope.analysis.coverage` count them per format (`source`) and
name them, as they do the spans no adapter claimed. Durations are compared within `TOLERANCE_MS` (0.1 ms), instants
exactly: two stages a server measures at different points may overlap by a few µs (TGI's first `infer` span opens
~5 µs before its `queue_time` ends), and a misread worth flagging is larger than that.

| violation | the row |
| --- | --- |
| `negative_<stage>` | a stage (or its TTFT-window part) is below zero |
| `<stage>_longer_than_request` | a stage is longer than the server's E2E |
| `parts_exceed_e2e` | the server stages add up to more than the server's E2E (`unaccounted_ms` < 0) |
| `parts_exceed_ttft` | the TTFT stages add up to more than the server's TTFT (`ttft_unaccounted_ms` < 0) |
| `ttft_longer_than_e2e` | the server's TTFT is longer than its E2E |
| `first_token_outside_request` | the first token lies before the arrival or after the end |
| `instants_out_of_order` | two other instants of the server's clock are out of order (derive/instants.py) |
| `client_end_before_server_end` | the client's E2E is shorter than the server's: its span did not time the response's end (an HTTP client span of a streamed response times the headers only) |
| `client_first_token_before_server` | the client's TTFT (to its first stream event) is shorter than the server's |

Two of them change a row that has a server span, because the figure they concern cannot be: a client end that
comes before the server's is no client end (`client_end_ns`, `client_e2e_ms`, `client_tpot_ms` and `network_ms` are
NULL), and a client first event before the server's first token gives no TTFT network (`ttft_network_ms` NULL). A
server's reported timings (TGI's headers) are no clock: those rows, and every other violation, keep the figures
as measured and are flagged. Client and server clocks are compared by durations (client E2E against server E2E), which
an offset between the two machines' clocks does not move.
"""

from __future__ import annotations

from budgetscope.derive.instants import SERVER_INSTANTS, STAGE_BOUNDS, TTFT_STAGES, seen

TOLERANCE_MS = 0.1
"""How far a duration may stray before it breaks an invariant, ms."""


def client_view_ok(client_ms: str, server_ms: str) -> str:
    """SQL: a client figure (`client_ms`) is not shorter than the server's (`server_ms`) — true when either is
    unknown, since nothing contradicts it then."""
    return f"coalesce(NOT ({client_ms} < {server_ms} - {TOLERANCE_MS}), true)"


def _out_of_order() -> str:
    """Two server instants out of order, the first token against arrival and end left to its own check."""
    names = list(SERVER_INSTANTS)
    own = {("arrival", "first_token"), ("first_token", "end")}
    pairs = [
        f"({seen(a)} AND {seen(b)} AND {SERVER_INSTANTS[a]} > {SERVER_INSTANTS[b]})"
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if (a, b) not in own
    ]
    return f"coalesce({' OR '.join(pairs)}, false)"


def checks(client_e2e_raw: str, client_ttft_raw: str) -> dict[str, str]:
    """Violation name → SQL condition over a `requests` row (its columns by name), in the order they are listed.
    `client_e2e_raw` / `client_ttft_raw`: the client's E2E and TTFT (to its first stream event) as its span gave
    them, before the rules above set them NULL."""
    tol = TOLERANCE_MS
    out = {}
    for stage in STAGE_BOUNDS:
        ttft = f" OR ttft_{stage}_ms < -{tol}" if stage in TTFT_STAGES else ""
        out[f"negative_{stage}"] = f"{stage}_ms < -{tol}{ttft}"
    for stage in STAGE_BOUNDS:
        out[f"{stage}_longer_than_request"] = f"{stage}_ms > e2e_ms + {tol}"
    out["parts_exceed_e2e"] = f"unaccounted_ms < -{tol}"
    out["parts_exceed_ttft"] = f"ttft_unaccounted_ms < -{tol}"
    out["ttft_longer_than_e2e"] = f"ttft_ms > e2e_ms + {tol}"
    out["first_token_outside_request"] = (
        f"{seen('first_token')} AND (first_token_ns < arrival_ns OR ({seen('end')} AND first_token_ns > end_ns))"
    )
    out["instants_out_of_order"] = _out_of_order()
    out["client_end_before_server_end"] = f"NOT {client_view_ok(client_e2e_raw, 'e2e_ms')}"
    out["client_first_token_before_server"] = f"NOT {client_view_ok(client_ttft_raw, 'ttft_ms')}"
    return out


VIOLATIONS = tuple(checks("x", "y"))
"""Every violation name, in order (docs/metrics.md, "Invariants")."""


def violations_sql(client_e2e_raw: str, client_ttft_raw: str) -> str:
    """SQL over a `requests` row: the list of the violations it breaks (empty when none)."""
    cases = [f"CASE WHEN {cond} THEN '{name}' END" for name, cond in checks(client_e2e_raw, client_ttft_raw).items()]
    return f"list_filter([{', '.join(cases)}], lambda x: x IS NOT NULL)"
