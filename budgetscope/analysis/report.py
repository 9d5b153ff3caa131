"""The budget report: per tier, percentiles against budgets, stage quantiles, attainment, tail attribution,
what separates the tail from the body, and a verdict in plain English.

`build_report(con, budgets)` returns the report JSON of docs/design.md as a dict (keys are stable: add, never rename).
Latency figures and attribution use the tier's requests whose outcome is `ok` (labelled so: `percentiles_over`).
Attainment and the error rate count every request of the tier but those the client cancelled: a failed, rejected
or timed-out request misses every SLO of its tier. Each tier gets a status (`KEPT`, `BROKEN` or `UNKNOWN`, with
the reason) and the report the worst of them (docs/report.md).
"""

from __future__ import annotations

import budgetscope.analysis.attribution as attribution
import budgetscope.analysis.burn as burn
import budgetscope.analysis.contrast as contrast
import budgetscope.analysis.coverage as coverage
import budgetscope.analysis.scans as scans
from budgetscope.analysis.budgets import METRICS, Budgets, TierBudget
from budgetscope.analysis.gpu import tail_gpu
from budgetscope.analysis.judging import CLIENT_METRIC, STAGE_COLUMNS
from budgetscope.analysis.queue_wait import tail_queue_wait
from budgetscope.analysis.scans import pkey
from budgetscope.analysis.selection import FILTER_COLUMNS, Selection, slowest, widened
from budgetscope.analysis.verdict import verdict
from budgetscope.cursors import on_cursors
from budgetscope.derive.client import FIRST_TOKEN_DEFINITION, NONEMPTY_CHUNK, TOKEN_EVENT

PERCENTILES = (50.0, 90.0, 95.0, 99.0)
TIERS_PER_SCAN = 8
"""Tiers whose figures one statement computes (scans.py). DuckDB's cost of a statement grows faster than its
aggregates (~14 a tier, each with its tier's FILTER), and a row of ~32,000 of them crashed it (SIGFPE): the
report's statements stay this narrow whatever the number of tiers (docs/benchmarks.md, "Tiers at the bound")."""


def _rows(con, sql: str, params) -> list[tuple]:
    return con.execute(sql, params).fetchall()


TTFT_DEFINITIONS = {
    "first_token_event": "first token event",
    "first_nonempty_chunk": "first non-empty chunk",
    "first_chunk": "first chunk",
}
"""How a client counted its first token (client span `budgetscope.client.first_token_definition`; budgetscope's
own client writes none: the first token event, its text possibly empty). AIPerf and GuideLLM wait for non-empty
text, which comes later on a server that streams a token's bytes before they decode."""


def _ttft_definitions(con, sel: Selection, stored: dict[str | None, int]) -> dict[str, int]:
    """How the selection's ok requests' client TTFTs were measured: definition → requests. `stored` is the count
    by the rows' own column (scans.counts); rows written before it (None) read their client span's attribute."""
    found = {d: n for d, n in stored.items() if d is not None}
    if None in stored:
        # `r` is read once and the JSON parsed only for the spans joined (Spark ran a CTE read twice twice, and
        # parsed every client span's attributes)
        where = sel.where("outcome = 'ok'", "has_client_span", "client_first_token_definition IS NULL")
        for d, n in _rows(
            con,
            f"""
            WITH r AS (SELECT trace_id, client_span_id FROM requests {where})
            SELECT coalesce(c.attributes->>'{FIRST_TOKEN_DEFINITION}', '{TOKEN_EVENT}'), count(*)
            FROM r JOIN spans c ON c.trace_id = r.trace_id AND c.span_id = r.client_span_id
            WHERE c.source = 'client' GROUP BY 1""",
            sel.params,
        ):
            found[d] = found.get(d, 0) + n
    return {TTFT_DEFINITIONS.get(d, d): found[d] for d in sorted(found)}


def _attribution(con, sel: Selection, split: scans.Split, got: scans.SplitCounts) -> dict:
    """The attribution of one split: tail T = metric ≥ its quantile (the MIN_TAIL slowest when that is fewer), body
    B = metric ≤ its median; a mean is the sum of its groups' sums over their count."""
    comps, metric = split.components, split.metric
    is_widened = widened(got.n_tail)
    known = got.known
    if is_widened:
        means = ", ".join(f"avg(coalesce({c}, 0))" for c in comps.values())
        seen = ", ".join(f"count({c})" for c in comps.values())
        *found, tail_size, tail_min, tail_whole = slowest(
            con, sel, metric, f"{means}, {seen}, count(*), min({metric}), avg({metric})"
        )
        tail_vals, known = found[: len(comps)], [a + b for a, b in zip(found[len(comps) :], known)]
    else:
        tail_vals = [x / got.n_tail for x in got.tail_sums]
        tail_size, tail_min, tail_whole = got.n_tail, got.tail_min, got.tail_metric / got.n_tail
    body_vals = [x / got.n_body if got.n_body else None for x in got.body_sums]
    tail_mean = dict(zip(comps, tail_vals))
    body_mean = dict(zip(comps, body_vals))
    unknown = {s for s, k in zip(comps, known) if not k}
    whole = tail_whole - got.body_metric / got.n_body if got.n_body else None
    sh = attribution.shares(tail_mean, body_mean, unknown, whole)
    return {
        "metric": metric,
        "tail_size": tail_size,
        "tail_widened": is_widened,
        "body_size": got.n_body,
        "threshold_ms": split.threshold,
        "median_ms": split.median,
        "tail_min_ms": tail_min,
        "shares": sh.shares,
        "dominant": sh.dominant,
        "verdict": sh.verdict,
        "top": sh.top,
        "tail_mean_ms": {s: None if s in unknown else v for s, v in tail_mean.items()},
        "body_mean_ms": {s: None if s in unknown else v for s, v in body_mean.items()},
        "unknown_share": sh.unknown,
    }


class _Tier:
    """One tier of a report while its entry is built: its budgets, selection and entry."""

    def __init__(self, tb: TierBudget, budgeted: bool, sel: Selection):
        self.tb, self.budgeted, self.sel = tb, budgeted, sel
        self.entry: dict = {}
        self.client_for: dict[str, bool] = {}
        self.seen: tuple[str, ...] = ()  # the stages of attribution.WHERE_SEEN its ok requests have
        self.groups: list[tuple[dict[str, str], list[float]]] = []  # (figure columns, percentiles), (stages, ...)


def _entries(con, tiers: list[_Tier], scope: scans.Tiers, counted: list[dict], quantiles: bool = True) -> None:
    """Every tier's counts, figures, stages, attribution and contrast, from the three scans of scans.py. Without
    `quantiles`, no figure's or stage's quantiles (`metrics` and `stages` are left out): the attribution needs its
    metrics' quantile and median alone."""
    wants = {}
    for j, (t, counts) in enumerate(zip(tiers, counted)):
        tb = t.tb
        pcts = sorted(set(PERCENTILES) | {tb.percentile})
        with_client = counts["ok"] > 0 and counts["client"] == counts["ok"]
        # per kind, client figures unless a request has the server's figure but not the client's: an OpenTelemetry
        # HTTP client span carries no first-token time, nor (a streamed response) the response's end
        t.client_for = client_for = {k: with_client and not counts["server_only"][k] for k in ("ttft", "e2e")}
        t.entry = {
            "name": tb.name,
            "match": tb.match,
            "requests": counts["n"],
            "ok_requests": counts["ok"],
            "judged_requests": counts["judged"],
            "outcomes": counts["outcomes"],
            "percentile": tb.percentile,
            "budgeted": t.budgeted,
            "percentiles_over": "ok requests",
            "error_rate": counts["error_rate"],
            "max_error_rate": tb.error_budget(),
            "max_error_rate_declared": tb.max_error_rate is not None,
            "figures": "client" if all(client_for.values()) else "server",
            "figures_by_kind": {k: "client" if c else "server" for k, c in client_for.items()},
            "requests_without_client_span": counts["ok"] - counts["client"],
            "client_ttft_definitions": _ttft_definitions(con, t.sel, counts["definitions"]) if with_client else {},
            "attainment": counts["attainment"],
            # requests of a source that samples its traces: the figures are the sampled requests'
            "sampling": {
                "requests": counts["sampled"],
                "how": {src: scans.SAMPLED_SOURCES[src] for src in counts["sampled"]},
            }
            if counts["sampled"]
            else None,
            # over the requests judged on a known figure (judging.slo_judgement), and each budgeted figure alone
            "attainment_over": counts["attainment_over"],
            "attainment_by_figure": {
                m: v for m, v in counts["attainment_by_figure"].items() if tb.metric_budget(m) is not None
            },
            "misread_requests": counts["misread"],
        }
        client_metric = {
            "ttft_ms": client_for["ttft"],
            "tpot_ms": all(client_for.values()),
            "e2e_ms": client_for["e2e"],
        }
        fig_cols = {m: (CLIENT_METRIC[m] if client_metric[m] else m) for m in METRICS}
        t.seen = tuple(counts["stages_seen"])
        stage_cols = {s: c for s, c in STAGE_COLUMNS.items() if s != "network" or client_for["ttft"]}
        stage_cols |= {s: attribution.WHERE_SEEN[s] for s in t.seen}
        stage_pcts = sorted({50.0, tb.percentile})
        t.groups = [(fig_cols, pcts), (stage_cols, stage_pcts)]
        if counts["ok"]:
            splits = {
                kind: (attribution.FIGURES[kind][0 if client_for[kind] else 1], tb.percentile)
                for kind in ("ttft", "e2e")
            }
            wants[j] = (t.groups if quantiles else [], splits)
    found = scans.quantiles(con, scope, wants)
    plans = []
    for j, t in enumerate(tiers):
        (fig_cols, pcts), (stage_cols, stage_pcts) = t.groups
        if j in found:
            gap = NONEMPTY_CHUNK in counted[j]["definitions"]  # some client TTFTs wait for content
            plans += scans.split_plan(j, t.client_for, found[j][1], gap, t.seen)
        if quantiles:
            if j in found:
                metric_q, stage_q = found[j][0]
            else:
                metric_q = {m: {pkey(p): None for p in pcts} for m in METRICS}
                stage_q = {s: {pkey(p): None for p in stage_pcts} for s in stage_cols}
            t.entry["metrics"] = {
                m: {**metric_q[m], "column": fig_cols[m], "budget": t.tb.metric_budget(m)} for m in METRICS
            }
            t.entry["stages"] = {
                s: {**stage_q[s], "column": stage_cols[s], "budget": t.tb.stages.get(s)} for s in stage_cols
            }
        t.entry["attribution"] = {"ttft": None, "e2e": None}
        t.entry["contrast"] = {}
    for split, got in zip(plans, scans.splits(con, scope, plans)):
        t = tiers[split.tier]
        a = _attribution(con, t.sel, split, got)
        t.entry["attribution"][split.kind] = a
        if a["tail_widened"]:  # the MIN_TAIL slowest: their own contrast
            mixes = contrast.separators_of_splits(
                con,
                t.sel.where("outcome = 'ok'"),
                t.sel.params,
                {split.kind: (split.metric, a["tail_min_ms"], split.median)},
            )[split.kind]
        else:
            mixes = contrast.ranked(got.by_dimension())
        t.entry["contrast"][split.kind] = mixes  # in kind order: a tier's splits come ttft, then e2e


def _finish(con, t: _Tier, present: dict[str, bool]) -> dict:
    """The rest of a tier's entry: what the GPU and the queue did for its tail, its breaches, status and verdict."""
    entry = t.entry
    entry["gpu"] = tail_gpu(con, t.sel, entry, present) if entry["ok_requests"] else None
    entry["queue_wait"] = tail_queue_wait(con, t.sel, entry, present) if entry["ok_requests"] else None
    entry["breaches"] = breaches(entry)
    entry["unknown_reason"] = None if entry["breaches"] else unknown_reason(entry)
    entry["status"] = BROKEN if entry["breaches"] else UNKNOWN if entry["unknown_reason"] else KEPT
    if entry["status"] == UNKNOWN:
        entry["attainment"] = None  # requests whose figures are unknown neither met nor missed their SLOs
    entry["kept"] = entry["status"] == KEPT
    entry["verdict"] = verdict(entry)
    return entry


def tier_report(
    con,
    tb: TierBudget,
    since_ns: int | None = None,
    until_ns: int | None = None,
    budgeted: bool = True,
    filters: dict | None = None,
) -> dict:
    """The report entry of one tier; `filters` (see `Selection`) narrow its requests further."""
    (entry,), _, _ = _tier_reports(con, [(tb, budgeted)], since_ns, until_ns, filters)
    return entry


def attributions(
    con,
    budgets: Budgets,
    since_ns: int | None = None,
    until_ns: int | None = None,
    without: tuple[str, list] | None = None,
) -> list[dict]:
    """Each tier's entry as far as its attribution and contrast (the report's three scans, without the figures'
    and stages' quantiles; no GPU, queue or verdict): what `collect --budgets` keeps as gauges over its sliding
    window. The attribution and contrast are the report's, to the bit, over the same requests less those
    `without` (SQL, parameters) is true for: the gauges leave out the requests still in flight."""
    tiers = [_Tier(tb, True, Selection(tb.filters, since_ns, until_ns, without=without)) for tb in budgets.tiers]
    for at in range(0, len(tiers), TIERS_PER_SCAN):
        batch = list(budgets.tiers)[at : at + TIERS_PER_SCAN]
        scope = scans.Tiers(batch, since_ns, until_ns, None, without)
        counted, _, _ = scans.counts(con, scope, batch)
        _entries(con, tiers[at : at + TIERS_PER_SCAN], scope, counted, quantiles=False)
    return [t.entry for t in tiers]


KEPT, UNKNOWN, BROKEN = "KEPT", "UNKNOWN", "BROKEN"
STATUSES = (KEPT, UNKNOWN, BROKEN)
"""A tier's status, from best to worst: the report's status is its tiers' worst."""


def breaches(entry: dict) -> list[dict]:
    """Every budget the tier breaks: its error rate over `max_error_rate`; request-level metrics and stages
    whose quantile (over ok requests) exceeds the budget; and attainment 0 % under latency budgets whose
    figures are known (no request met every SLO), so that the status never contradicts the attainment."""
    key = pkey(entry["percentile"])
    out = []
    rate, allowed = entry["error_rate"], entry["max_error_rate"]
    if rate is not None and rate > allowed:
        out.append(
            {
                "kind": "error_rate",
                "name": "max_error_rate",
                "value": rate,
                "budget": allowed,
                "declared": entry["max_error_rate_declared"],
            }
        )
    for group, items in (("metric", entry["metrics"]), ("stage", entry["stages"])):
        for name, v in items.items():
            if v["budget"] is not None and v[key] is not None and v[key] > v["budget"]:
                out.append({"kind": group, "name": name, "value": v[key], "budget": v["budget"], "quantile": key})
    budgeted = [v for v in entry["metrics"].values() if v["budget"] is not None]
    # with a budgeted figure unknown, attainment 0 % says nothing: the tier is UNKNOWN, not broken by it
    if budgeted and all(v[key] is not None for v in budgeted) and entry["attainment"] == 0:
        out.append({"kind": "attainment", "name": "attainment", "value": 0.0, "budget": entry["percentile"] / 100})
    return out


def unknown_reason(entry: dict) -> str | None:
    """Why the tier's figures cannot be judged, or None when they can: no request at all, or a budgeted
    metric that no ok request has a value of (its quantile is unknown)."""
    if not entry["requests"]:
        return "no request matched this tier"
    if not entry["judged_requests"]:
        return f"all {entry['requests']:,} requests were cancelled by their clients"
    if not entry["ok_requests"]:
        return f"none of its {entry['judged_requests']:,} requests ended ok, so no latency was measured"
    key = pkey(entry["percentile"])
    budgeted = [m for m, v in entry["metrics"].items() if v["budget"] is not None]
    unknown = [m for m in budgeted if entry["metrics"][m][key] is None]
    latency = ("ttft_ms", "e2e_ms")
    if not budgeted and all(entry["metrics"][m][key] is None for m in latency):
        unknown = list(latency)  # without budgets, a tier still needs some latency to be read
    if not unknown:
        return None
    names = ", ".join(m.removesuffix("_ms").upper() for m in unknown)
    return (
        f"no ok request has a known {names} (of {entry['ok_requests']:,} ok requests): the spans were "
        "read but carry no such timing"
    )


def discovered_tiers(con) -> list[str]:
    return [t for (t,) in con.execute("SELECT DISTINCT tier FROM requests ORDER BY 1").fetchall()]


def tier_selected(tb: TierBudget, filters: dict | None) -> bool:
    """Whether a `tier` filter (a value or a list of values) keeps this tier in the report."""
    if not filters or "tier" not in filters:
        return True
    want = filters["tier"]
    return tb.filters["tier"] in ([want] if want is None or isinstance(want, str) else list(want))


def _tier_reports(
    con, jobs: list[tuple[TierBudget, bool]], since_ns, until_ns, filters, present: dict[str, bool] | None = None
) -> tuple[list[dict], dict, dict]:
    """(the entry of each (tier, budgeted), in order; requests by `tier` value; coverage) of the report's rows:
    three scans for up to TIERS_PER_SCAN tiers at once (scans.py), then each tier's GPU and queue figures, several
    tiers at once, each on its own cursor, as many as DuckDB has threads (docs/benchmarks.md, "Tiers in
    parallel")."""
    tiers = [_Tier(tb, budgeted, Selection(tb.filters, since_ns, until_ns, filters)) for tb, budgeted in jobs]
    by_tier, covered = {}, {}
    for at in range(0, max(len(jobs), 1), TIERS_PER_SCAN):
        batch = jobs[at : at + TIERS_PER_SCAN]
        scope = scans.Tiers([tb for tb, _ in batch], since_ns, until_ns, filters)
        budgeted = [tb if b else None for tb, b in batch]
        counted, by_tier, covered = scans.counts(con, scope, budgeted)
        _entries(con, tiers[at : at + TIERS_PER_SCAN], scope, counted)
        for t, r in zip(tiers[at : at + TIERS_PER_SCAN], burn.burn_rates(con, scope, budgeted, until_ns)):
            t.entry["burn_rates"] = r
    present = present or coverage.contents(con)
    workers = min(len(tiers), _threads(con))
    finished = on_cursors(con, lambda c, t: _finish(c, t, present), tiers, workers, "budgetscope-report")
    return finished, by_tier, covered


def _threads(con) -> int:
    """DuckDB's threads, a Spark connection's `threads` (jobs it runs at once), or 1 for a connection that has no
    cursors to share out."""
    if getattr(con, "threads", None):
        return con.threads
    if not hasattr(con, "cursor"):
        return 1
    try:
        return int(con.execute("SELECT current_setting('threads')").fetchone()[0])
    except Exception:  # noqa: BLE001 - not a DuckDB connection: one tier at a time
        return 1


def build_report(
    con,
    budgets: Budgets | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
    filters: dict | None = None,
    last_commit_ns: int | None = None,
    split_traces: int | None = None,
    now_ns: int | None = None,
) -> dict:
    """The whole report. Without budgets, every tier found is reported at p99 with no budget.

    `filters` (column in FILTER_COLUMNS → value or list of values, None = NULL) narrow every tier's requests;
    a `tier` filter also leaves out the tiers it excludes. The report then carries a `filters` key.

    `last_commit_ns`: when the archive's last commit was made (its manifest's), where known: a report on an archive
    being written (that commit less than `coverage.SETTLE_S` before `now_ns`, default now) warns of the requests
    whose other side's spans may not have landed yet (`coverage.in_flight`). `split_traces`: a sharded root's reader's
    (`TableAccess.split_traces`), said in the report when not None.
    """
    if budgets is None:
        jobs = [(tb, False) for tb in (TierBudget(name=t) for t in discovered_tiers(con)) if tier_selected(tb, filters)]
    else:
        jobs = [(tb, True) for tb in budgets.tiers if tier_selected(tb, filters)]
    present = coverage.contents(con)
    tiers, by_tier, covered = _tier_reports(con, jobs, since_ns, until_ns, filters, present)
    unbudgeted = {}
    if budgets is not None:
        named = {tb.match.get("tier", tb.name) for tb in budgets.tiers}
        unbudgeted = {t: n for t, n in by_tier.items() if t not in named}
    spans = coverage.span_count(con, since_ns, until_ns)
    unclaimed = coverage.unclaimed_spans(con, since_ns, until_ns, present=present)
    status, reason = report_status(tiers, spans, unclaimed)
    whole = Selection({}, since_ns, until_ns)  # the warning is about the window, whatever the filters
    derived = (
        covered["requests"] if filters is None else coverage.coverage(con, whole.where(), whole.params)["requests"]
    )
    flight = coverage.in_flight(con, since_ns, until_ns, last_commit_ns, now_ns)
    warnings = [coverage.nothing_derived_warning(spans, derived, unclaimed), coverage.in_flight_warning(flight)]
    rows = Selection({}, since_ns, until_ns, filters)  # the report's requests, as `coverage` counts them
    flags = {k: coverage.flagged(con, k, rows.where(), rows.params, present=present) for k in coverage.ROW_FLAGS}
    out = {
        "tiers": tiers,
        "unbudgeted_tiers": unbudgeted,
        "kept": status == KEPT,
        "status": status,
        "unknown_reason": reason,
        "budgets_file": budgets.path if budgets else None,
        "coverage": covered,
        "spans": spans,
        "unclaimed_spans": unclaimed,
        "violations": flags["violations"],
        "unread_events": flags["unread_events"],
        "llmd_orphans": coverage.orphan_legs(con, since_ns, until_ns) if present.get("llmd") else None,
        "in_flight": flight,
        "warnings": [w for w in warnings if w],
    }
    if filters is not None:
        out["filters"] = filters
    if split_traces is not None:
        out["split_traces"] = split_traces
    return out


def report_status(tiers: list[dict], spans: int, unclaimed: dict) -> tuple[str, str | None]:
    """The report's status (its tiers' worst) and, when UNKNOWN, why. With no tier at all there is nothing to
    judge: UNKNOWN, never KEPT."""
    if not tiers:
        if spans and unclaimed["total"]:
            return (
                UNKNOWN,
                f"no request was derived from the archive's {spans:,} spans ({coverage.unclaimed_line(unclaimed)})",
            )
        return UNKNOWN, "no request to judge" + (f" among {spans:,} spans" if spans else ": the archive holds no spans")
    status = max((t["status"] for t in tiers), key=STATUSES.index)
    reasons = [f"tier {t['name']}: {t['unknown_reason']}" for t in tiers if t["status"] == UNKNOWN]
    return status, ("; ".join(reasons) if status == UNKNOWN else None)


__all__ = [
    "build_report",
    "attributions",
    "tier_report",
    "breaches",
    "unknown_reason",
    "report_status",
    "KEPT",
    "UNKNOWN",
    "BROKEN",
    "pkey",
    "tier_selected",
    "Selection",
    "FILTER_COLUMNS",
]
