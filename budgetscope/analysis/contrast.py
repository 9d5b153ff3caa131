"""What separates the tail from the body: for each request dimension, how differently the two are made up.

The distance of a dimension is the total variation distance between its distribution in the tail and in
the body (0 = same mix, 1 = disjoint). The value reported is the one most over-represented in the tail.
Dimensions closer than `MIN_DISTANCE` are left out: with a few hundred tail requests, sampling noise alone
moves the mix by several points, and a separator that is noise must not reach the verdict.
"""

from __future__ import annotations

from budgetscope.analysis.selection import BODY, TAIL, split_class

MIN_DISTANCE = 0.2

REPLICA_SQL = "coalesce(service_instance_id, k8s_pod_name, host_name)"
INSTANCE_SQL = (
    f"CASE WHEN {REPLICA_SQL} IS NULL THEN coalesce(service_name, '(none)') "
    f"ELSE coalesce(service_name, '(none)') || '/' || {REPLICA_SQL} END"
)
"""The instance of a request: `service.name/replica`, the replica named by the server span's
`service.instance.id`, else its `k8s.pod.name`, else its `host.name`; just the service name where none is
kept. Replicas of one service share the `service.name`, so without the replica one slow replica among four
would not separate the tail from the body."""

DIMENSIONS = {
    "prompt_length": """CASE WHEN input_tokens IS NULL THEN 'unknown' WHEN input_tokens < 256 THEN '<256'
        WHEN input_tokens < 1024 THEN '256-1k' WHEN input_tokens < 4096 THEN '1k-4k' ELSE '>=4k' END""",
    "output_length": """CASE WHEN output_tokens IS NULL THEN 'unknown' WHEN output_tokens < 64 THEN '<64'
        WHEN output_tokens < 256 THEN '64-256' WHEN output_tokens < 1024 THEN '256-1k' ELSE '>=1k' END""",
    "cache_hit": """CASE WHEN cached_tokens IS NULL THEN 'unknown' WHEN cached_tokens > 0 THEN 'hit' ELSE 'miss' END""",
    "tenant": "coalesce(tenant, '(none)')",
    "model": "coalesce(model, '(none)')",
    "instance": INSTANCE_SQL,
}


def mixes(
    con, dims: dict[str, str], source: str, where: str, params: list, metric: str, tail_min: float, median: float
) -> dict[str, list[tuple[str, int, int]]]:
    """Dimension → [(value, requests in the tail, requests in the body)], from one scan of `source`.

    `dims` maps a name to a SQL expression over `source`; tail = metric ≥ tail_min, body = metric ≤ median."""
    names = list(dims)
    cols = ", ".join(f"{expr} AS d{i}" for i, expr in enumerate(dims.values()))
    sets = ", ".join(f"(d{i})" for i in range(len(names)))
    picks = " ".join(f"WHEN NOT grouping(d{i})::BOOLEAN THEN {i}" for i in range(len(names)))
    vals = "coalesce(" + ", ".join(f"d{i}::VARCHAR" for i in range(len(names))) + ")"
    rows = con.execute(
        f"""
        SELECT CASE {picks} END AS dim, {vals} AS val,
               count(*) FILTER (WHERE m >= ?) AS tail, count(*) FILTER (WHERE m <= ?) AS body
        FROM (SELECT {cols}, {metric} AS m FROM {source} {where})
        GROUP BY GROUPING SETS ({sets})""",
        [tail_min, median, *params],
    ).fetchall()
    out: dict[str, list[tuple[str, int, int]]] = {}
    for dim, val, tail, body in rows:
        out.setdefault(names[dim], []).append((val, tail, body))
    return out


def mixes_of_splits(
    con, dims: dict[str, str], source: str, where: str, params: list, splits: dict[str, tuple[str, float, float]]
) -> dict[str, dict[str, list[tuple[str, int, int]]]]:
    """`mixes` for several splits of the same rows, from one scan: split name → (metric, tail_min, median) →
    what `mixes` gives for `where` narrowed to the rows whose metric is neither NULL nor NaN.

    The rows are counted by every dimension and every split's class (selection.split_class) at once, and those
    counts (few: one per combination that occurs) are then summed up per dimension."""
    names, keys = list(dims), list(splits)
    ds = [f"d{i}" for i in range(len(names))]
    cs = [f"c{j}" for j in range(len(keys))]
    cols = ", ".join(f"{expr} AS d{i}" for i, expr in enumerate(dims.values()))
    classes = ", ".join(f"{split_class(metric, '?', '?')} AS c{j}" for j, (metric, _, _) in enumerate(splits.values()))
    args = [x for _, tail_min, median in splits.values() for x in (tail_min, median, tail_min, median)]
    sets = ", ".join(f"({d}, {', '.join(cs)})" for d in ds)
    picks = " ".join(f"WHEN NOT grouping(d{i})::BOOLEAN THEN {i}" for i in range(len(names)))
    vals = "coalesce(" + ", ".join(f"d{i}::VARCHAR" for i in range(len(names))) + ")"
    rows = con.execute(
        f"""
        WITH g AS (SELECT {", ".join(ds + cs)}, count(*) AS n FROM (SELECT {cols}, {classes} FROM {source} {where})
                   GROUP BY ALL)
        SELECT CASE {picks} END AS dim, {vals} AS val, {", ".join(cs)}, sum(n)::BIGINT
        FROM g GROUP BY GROUPING SETS ({sets})""",
        [*args, *params],
    ).fetchall()
    counts: list[dict[tuple[int, str], list[int]]] = [{} for _ in keys]  # (dim, value) → [present, tail, body]
    for dim, val, *rest in rows:
        n = rest[-1]
        for j, c in enumerate(rest[:-1]):
            if c is None:
                continue
            x = counts[j].setdefault((dim, val), [0, 0, 0])
            x[0] += n
            x[1] += n if c in TAIL else 0
            x[2] += n if c in BODY else 0
    out: dict[str, dict[str, list[tuple[str, int, int]]]] = {}
    for j, k in enumerate(keys):
        by_dim: dict[str, list[tuple[str, int, int]]] = {}
        for (dim, val), (_, tail, body) in counts[j].items():
            by_dim.setdefault(names[dim], []).append((val, tail, body))
        out[k] = by_dim
    return out


def separation(vals: list[tuple[str, int, int]]) -> tuple[float, str, float, float]:
    """(total variation distance, the value most over-represented in the tail, its tail share, its body share)
    for one dimension's (value, tail, body) counts; both totals must be positive."""
    nt, nb = sum(v[1] for v in vals), sum(v[2] for v in vals)
    shares = [(v, t / nt, b / nb) for v, t, b in vals]
    val, ts, bs = max(shares, key=lambda x: (x[1] - x[2], x[0]))
    return 0.5 * sum(abs(t - b) for _, t, b in shares), val, ts, bs


def separators(
    con, base_where: str, params: list, metric: str, tail_min: float, median: float, limit: int = 3
) -> list[dict]:
    """The dimensions that most separate tail (metric ≥ tail_min) from body (metric ≤ median), best first."""
    return ranked(mixes(con, DIMENSIONS, "requests", base_where, params, metric, tail_min, median), limit)


def separators_of_splits(
    con, where: str, params: list, splits: dict[str, tuple[str, float, float]], limit: int = 3
) -> dict[str, list[dict]]:
    """`separators` of several splits (name → (metric, tail_min, median)) of the requests of `where` whose
    metric is neither NULL nor NaN, from one scan."""
    found = mixes_of_splits(con, DIMENSIONS, "requests", where, params, splits)
    return {k: ranked(by_dim, limit) for k, by_dim in found.items()}


def ranked(by_dim: dict[str, list[tuple[str, int, int]]], limit: int = 3) -> list[dict]:
    """The dimensions (of dimension → [(value, tail, body)]) whose tail and body mixes differ by MIN_DISTANCE or
    more, most separating first, at most `limit`."""
    out = []
    for dim, vals in by_dim.items():
        if len(vals) < 2 or not sum(v[1] for v in vals) or not sum(v[2] for v in vals):
            continue
        distance, val, ts, bs = separation(vals)
        if distance < MIN_DISTANCE:
            continue
        out.append({"dimension": dim, "value": val, "tail_share": ts, "body_share": bs, "distance": distance})
    out.sort(key=lambda d: (-d["distance"], d["dimension"]))
    return out[:limit]
