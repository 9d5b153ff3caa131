"""Which requests a figure is over: a `Selection` (one tier, a time range, filters) and, for a metric, its tail
and body as the attribution defines them (docs/design.md, "Attribution"): tail T = ok requests with
M ≥ quantile_q(M), widened to the MIN_TAIL slowest when that is fewer; body B = ok requests with M ≤ the median.
"""

from __future__ import annotations

MIN_TAIL = 10
"""The fewest requests a tail holds: a smaller quantile tail is widened to this many slowest requests."""

FILTER_COLUMNS = ("tier", "model", "tenant", "service_name")
"""Columns a report (and the dashboard) may be narrowed by, besides the time range."""


class Selection:
    """The requests of one tier (and optional time range and filters), as a SQL WHERE clause with its parameters.

    `extra` narrows further: column (one of FILTER_COLUMNS) → a value or a list of values, None meaning NULL.
    `without`: (SQL over `requests`, its parameters) true for rows to leave out (the attribution gauges' requests in
    flight, `coverage.in_flight_rows`).
    """

    def __init__(
        self,
        filters: dict[str, str],
        since_ns: int | None = None,
        until_ns: int | None = None,
        extra: dict | None = None,
        without: tuple[str, list] | None = None,
    ):
        self.clauses = [f"{col} = ?" for col in filters]
        self.params: list = list(filters.values())
        for col, want in (extra or {}).items():
            if col not in FILTER_COLUMNS:
                raise ValueError(f"cannot filter requests by {col!r} (expected one of: {', '.join(FILTER_COLUMNS)})")
            values = [want] if want is None or isinstance(want, str) else list(want)
            named = [v for v in values if v is not None]
            alts = [f"{col} IN ({', '.join('?' * len(named))})"] if named else []
            alts += [f"{col} IS NULL"] if None in values else []
            self.clauses.append("(" + " OR ".join(alts) + ")" if alts else "false")
            self.params.extend(named)
        if since_ns is not None:
            self.clauses.append("arrival_ns >= ?")
            self.params.append(since_ns)
        if until_ns is not None:
            self.clauses.append("arrival_ns < ?")
            self.params.append(until_ns)
        if without is not None:
            self.clauses.append(f"NOT ({without[0]})")
            self.params.extend(without[1])

    def where(self, *extra: str) -> str:
        parts = self.clauses + list(extra)
        return "WHERE " + " AND ".join(parts) if parts else ""


def ok_where(sel: Selection, metric: str) -> str:
    """SQL WHERE: the selection's ok requests whose `metric` is neither NULL nor NaN."""
    return sel.where("outcome = 'ok'", f"{metric} IS NOT NULL", f"NOT isnan({metric})")


def widened(n_tail: int) -> bool:
    """True when a quantile tail of `n_tail` requests is too small and the MIN_TAIL slowest stand in for it."""
    return n_tail < MIN_TAIL


def slowest(con, sel: Selection, metric: str, aggregates: str) -> tuple:
    """SQL `aggregates` (e.g. `count(*), min(ttft_ms)`) over the widened tail: the MIN_TAIL slowest ok requests of
    the selection by `metric`."""
    return con.execute(
        f"SELECT {aggregates} FROM (SELECT * FROM requests {ok_where(sel, metric)} "
        f"ORDER BY {metric} DESC LIMIT {MIN_TAIL})",
        sel.params,
    ).fetchone()


TAIL, BODY = (1, 3), (2, 3)
"""Classes of `split_class`: 1 tail, 2 body, 3 both (a quantile at or under the median), 0 neither."""


def split_class(metric: str, tail_from: str, body_to: str) -> str:
    """SQL: the class (TAIL, BODY) of a request by its metric; NULL when the metric is NULL or NaN. Grouping by
    classes is how the tail and body of several splits come out of one scan without FILTER clauses."""
    return (
        f"CASE WHEN {metric} IS NULL OR isnan({metric}) THEN NULL "
        f"WHEN {metric} >= {tail_from} AND {metric} <= {body_to} THEN 3 "
        f"WHEN {metric} >= {tail_from} THEN 1 WHEN {metric} <= {body_to} THEN 2 ELSE 0 END"
    )
