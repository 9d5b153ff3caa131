"""What an archive holds, for choosing filters and for saying what is missing and why; and the one-sentence
headline of a tier ("p99 TTFT 2.41 s vs 800 ms: 71% of the tail's excess is queueing")."""

from __future__ import annotations

from budgetscope.analysis import coverage
from budgetscope.analysis.verdict import LABEL, STAGE_WORD, ms

NO_REQUESTS = (
    "the archive holds no requests yet: ingest traces (`budgetscope ingest`) or point a collector "
    "(`budgetscope collect`) at it"
)
NO_CLIENT_SPANS = (
    "no request has a client span (kind CLIENT, parent of the server root: budgetscope's own, or an "
    "OpenTelemetry HTTP client span): network time and client-side figures are "
    "unknown, and server-side figures are used — run the load generator with `--spans otlp`, or "
    "instrument the client"
)
SOME_CLIENT_SPANS = (
    "{missing:,} of {n:,} requests have no client span: a tier uses client figures only when "
    "every one of its requests has one"
)


def client_note(requests: int, with_client: int) -> str | None:
    """What the requests' client spans leave unknown (none, or some of them without one), else None."""
    if not requests or with_client == requests:
        return None
    return NO_CLIENT_SPANS if not with_client else SOME_CLIENT_SPANS.format(missing=requests - with_client, n=requests)


def overview(con) -> dict:
    """Counts, time bounds (ns), the distinct tier/model/tenant/instance values (None = absent tenant) and the
    notes on missing data and misreads, in one pass over `requests` plus cheap probes."""
    n, lo, hi, n_client = con.execute(
        "SELECT count(*), min(arrival_ns), max(arrival_ns), count(*) FILTER (WHERE has_client_span) FROM requests"
    ).fetchone()
    values = {}
    for col in ("tier", "model", "tenant", "service_name"):
        values[col] = [
            v for (v,) in con.execute(f"SELECT DISTINCT {col} FROM requests ORDER BY {col} NULLS LAST").fetchall()
        ]
    has_steps = bool(con.execute("SELECT count(*) FROM (SELECT 1 FROM engine_steps LIMIT 1)").fetchone()[0])
    has_gpu = bool(con.execute("SELECT count(*) FROM (SELECT 1 FROM gpu_samples LIMIT 1)").fetchone()[0])
    notes = []
    if not n:
        spans = coverage.span_count(con)  # spans but no request: say which spans no adapter read
        notes.append(
            coverage.nothing_derived_warning(spans, n, coverage.unclaimed_spans(con)) if spans else NO_REQUESTS
        )
    elif note := client_note(n, n_client):
        notes.append(note)
    if n:  # what was misread, and the span events no adapter reads (docs/metrics.md, "Invariants")
        present = coverage.contents(con)
        for k in coverage.ROW_FLAGS:
            if line := coverage.flagged_line(k, coverage.flagged(con, k, present=present)):
                notes.append(line)
    return {
        "requests": n,
        "first_arrival_ns": lo,
        "last_arrival_ns": hi,
        "client_spans": n_client,
        "values": values,
        "engine_steps": has_steps,
        "gpu_samples": has_gpu,
        "notes": notes,
    }


def _share_phrase(entry: dict, kind: str) -> str | None:
    a = entry["attribution"].get(kind)
    if not a or not a["shares"]:
        return None
    d = a["dominant"]
    return f"{100 * a['shares'][d]:.0f}% of the tail's excess is {STAGE_WORD[d]}"


def headline(entry: dict) -> str:
    """One sentence for the top of a tier: the worst broken budget and where the tail's excess went, or that
    the budgets hold."""
    if not entry["requests"] or not entry["ok_requests"] or entry["status"] == "UNKNOWN":
        return entry["verdict"]
    key = f"p{entry['percentile']:g}"
    broken = [b for b in entry["breaches"] if b["kind"] == "metric"]
    failed = [b for b in entry["breaches"] if b["kind"] == "error_rate"]
    if failed:
        return (
            f"error rate {100 * failed[0]['value']:.1f}% vs {100 * failed[0]['budget']:g}% allowed: "
            "failed requests miss every SLO"
        )
    if broken:
        b = max(broken, key=lambda b: b["value"] / b["budget"])
        why = _share_phrase(entry, "ttft" if b["name"] == "ttft_ms" else "e2e")
        return f"{key} {LABEL[b['name']]} {ms(b['value'])} vs {ms(b['budget'])}" + (f": {why}" if why else "")
    if any(b["kind"] == "attainment" for b in entry["breaches"]):
        return "No request met every SLO (attainment 0%), though each percentile is within its budget"
    m = entry["metrics"]
    budgeted = [k for k, v in m.items() if v["budget"] is not None]
    figures = ", ".join(f"{key} {LABEL[k]} {ms(m[k][key])} ≤ {ms(m[k]['budget'])}" for k in budgeted)
    if figures:
        stage = [b for b in entry["breaches"] if b["kind"] == "stage"]
        tail = f" (stage budget broken: {', '.join(b['name'] for b in stage)})" if stage else ""
        return f"Budgets kept: {figures}{tail}"
    return f"{key} TTFT {ms(m['ttft_ms'][key])}, {key} E2E {ms(m['e2e_ms'][key])} (no budget declared)"
