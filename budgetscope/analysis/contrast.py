"""What separates the tail from the body: for each request dimension, how differently the two are made up.

The distance of a dimension is the total variation distance between its distribution in the tail and in
the body (0 = same mix, 1 = disjoint). The value reported is the one most over-represented in the tail.
Dimensions closer than `MIN_DISTANCE` are left out: with a few hundred tail requests, sampling noise alone
moves the mix by several points, and a separator that is noise must not reach the verdict.
"""

from __future__ import annotations

MIN_DISTANCE = 0.2

DIMENSIONS = {
    "prompt_length": """CASE WHEN input_tokens IS NULL THEN 'unknown' WHEN input_tokens < 256 THEN '<256'
        WHEN input_tokens < 1024 THEN '256-1k' WHEN input_tokens < 4096 THEN '1k-4k' ELSE '>=4k' END""",
    "output_length": """CASE WHEN output_tokens IS NULL THEN 'unknown' WHEN output_tokens < 64 THEN '<64'
        WHEN output_tokens < 256 THEN '64-256' WHEN output_tokens < 1024 THEN '256-1k' ELSE '>=1k' END""",
    "cache_hit": """CASE WHEN cached_tokens IS NULL THEN 'unknown' WHEN cached_tokens > 0 THEN 'hit' ELSE 'miss' END""",
    "tenant": "coalesce(tenant, '(none)')",
    "model": "coalesce(model, '(none)')",
    "instance": "coalesce(service_name, '(none)')",
}


def separators(con, base_where: str, params: list, metric: str, tail_min: float, median: float,
               limit: int = 3) -> list[dict]:
    """The dimensions that most separate tail (metric ≥ tail_min) from body (metric ≤ median), best first."""
    dims = list(DIMENSIONS)
    cols = ", ".join(f"{expr} AS d{i}" for i, expr in enumerate(DIMENSIONS.values()))
    sets = ", ".join(f"(d{i})" for i in range(len(dims)))
    picks = " ".join(f"WHEN NOT grouping(d{i})::BOOLEAN THEN {i}" for i in range(len(dims)))
    vals = "coalesce(" + ", ".join(f"d{i}" for i in range(len(dims))) + ")"
    rows = con.execute(f"""
        SELECT CASE {picks} END AS dim, {vals} AS val,
               count(*) FILTER (WHERE {metric} >= ?) AS tail, count(*) FILTER (WHERE {metric} <= ?) AS body
        FROM (SELECT {cols}, {metric} FROM requests {base_where})
        GROUP BY GROUPING SETS ({sets})""", [tail_min, median, *params]).fetchall()
    by_dim: dict[int, list[tuple[str, int, int]]] = {}
    for dim, val, tail, body in rows:
        by_dim.setdefault(dim, []).append((val, tail, body))
    out = []
    for dim, vals in by_dim.items():
        nt, nb = sum(v[1] for v in vals), sum(v[2] for v in vals)
        if len(vals) < 2 or not nt or not nb:
            continue
        shares = [(v, t / nt, b / nb) for v, t, b in vals]
        distance = 0.5 * sum(abs(t - b) for _, t, b in shares)
        val, ts, bs = max(shares, key=lambda x: (x[1] - x[2], x[0]))
        if distance < MIN_DISTANCE:
            continue
        out.append({"dimension": dims[dim], "value": val, "tail_share": ts, "body_share": bs, "distance": distance})
    out.sort(key=lambda d: (-d["distance"], d["dimension"]))
    return out[:limit]
