"""One request, as a Gantt of its client and server spans and its token gaps.

Times in the view are ms since the request's earliest span start (`t0_ns`): the client send when there is a
client span, else the server receive. The client and server clocks are not corrected for skew; network
segments are shown as measured (see docs/metrics.md).
"""

from __future__ import annotations

from budgetscope.analysis.selection import Selection, ok_where

REQUEST_COLUMNS = (
    "request_id",
    "trace_id",
    "source",
    "service_name",
    "model",
    "tier",
    "tenant",
    "outcome",
    "server_span_id",
    "client_span_id",
    "arrival_ns",
    "first_token_ns",
    "end_ns",
    "client_sent_ns",
    "client_first_token_ns",
    "client_end_ns",
    "input_tokens",
    "cached_tokens",
    "output_tokens",
    "network_ms",
    "gateway_ms",
    "frontend_ms",
    "queue_ms",
    "prefill_ms",
    "kv_handoff_ms",
    "decode_ms",
    "postprocess_ms",
    "unaccounted_ms",
    "ttft_ms",
    "client_ttft_ms",
    "e2e_ms",
    "client_e2e_ms",
    "tpot_ms",
    "client_tpot_ms",
    "queue_entries",
    "schedule_lag_ms",
    "http_status",
    "itl_ms",
    "client_itl_ms",
)


def find_request(con, key: str) -> dict | None:
    """The `requests` row whose request_id or trace_id is `key`, as a dict; None when there is none."""
    row = con.execute(
        f"SELECT {', '.join(REQUEST_COLUMNS)} FROM requests WHERE request_id = ? OR trace_id = ? "
        "ORDER BY arrival_ns LIMIT 1",
        [key, key],
    ).fetchone()
    return dict(zip(REQUEST_COLUMNS, row)) if row else None


def slowest_requests(con, sel: Selection, column: str = "e2e_ms", limit: int = 50) -> list[tuple[str, float]]:
    """(request_id, value) of the slowest ok requests of a selection by `column` (a `requests` column)."""
    if column not in REQUEST_COLUMNS:
        raise ValueError(f"cannot rank by {column!r}")
    where = ok_where(sel, column)
    return con.execute(
        f"SELECT request_id, {column} FROM requests {where} ORDER BY {column} DESC LIMIT {int(limit)}", sel.params
    ).fetchall()


def _lane(name: str, kind: str, stage: str | None) -> str:
    if kind == "CLIENT":
        return "client"
    if stage:
        return f"stage: {stage}"
    return "server" if kind == "SERVER" else name


def request_view(con, key: str) -> dict | None:
    """The Gantt of one request (by request_id or trace_id); None when the archive has no such request.

    Returns {"request": row, "t0_ns", "bars": [{lane, name, kind, start_ms, end_ms, duration_ms}], "tokens":
    [{"side": "server" | "client", "index", "t_ms", "gap_ms"}], "missing": [what is not known and why]}.
    Bars hold the client span, the server root, every stage span (several per stage after preemption or
    chunked prefill) and, with a client span, the derived uplink and downlink network segments."""
    r = find_request(con, key)
    if r is None:
        return None
    ids = [s for s in (r["server_span_id"], r["client_span_id"]) if s]
    spans = con.execute(
        f"""
        SELECT name, kind, start_ns, end_ns, (attributes->>'budgetscope.stage') FROM spans
        WHERE trace_id = ? AND (span_id IN ({", ".join("?" * len(ids))}) OR parent_span_id = ?)
        ORDER BY start_ns, end_ns DESC""",
        [r["trace_id"], *ids, r["server_span_id"]],
    ).fetchall()
    t0 = min([s[2] for s in spans] + [r["arrival_ns"]] + ([r["client_sent_ns"]] if r["client_sent_ns"] else []))

    def ms(ns: int | None) -> float | None:
        return None if ns is None else (ns - t0) / 1e6

    bars = [
        {
            "lane": _lane(n, k, st),
            "name": n,
            "kind": k,
            "start_ms": ms(s),
            "end_ms": ms(e),
            "duration_ms": (e - s) / 1e6,
        }
        for n, k, s, e, st in spans
    ]
    missing = []
    if r["client_span_id"] and r["client_sent_ns"] is not None and r["client_end_ns"] is not None:
        bars += [
            {
                "lane": "network",
                "name": "uplink",
                "kind": "DERIVED",
                "start_ms": ms(r["client_sent_ns"]),
                "end_ms": ms(r["arrival_ns"]),
                "duration_ms": (r["arrival_ns"] - r["client_sent_ns"]) / 1e6,
            },
            {
                "lane": "network",
                "name": "downlink",
                "kind": "DERIVED",
                "start_ms": ms(r["end_ns"]),
                "end_ms": ms(r["client_end_ns"]),
                "duration_ms": (r["client_end_ns"] - r["end_ns"]) / 1e6,
            },
        ]
    else:
        missing.append("no client span: network time and client-side figures are unknown for this request")
    tokens = []
    for side, first, gaps in (
        ("server", r["first_token_ns"], r["itl_ms"]),
        ("client", r["client_first_token_ns"], r["client_itl_ms"]),
    ):
        if first is None:
            continue
        t = ms(first)
        tokens.append({"side": side, "index": 0, "t_ms": t, "gap_ms": None})
        for i, g in enumerate(gaps or [], start=1):
            t += g
            tokens.append({"side": side, "index": i, "t_ms": t, "gap_ms": g})
        if not gaps:
            missing.append(f"no {side} inter-token gaps recorded: only the first token's time is known")
    if r["first_token_ns"] is None:
        missing.append("no first token: the request produced no output")
    return {"request": r, "t0_ns": t0, "bars": bars, "tokens": tokens, "missing": missing}
