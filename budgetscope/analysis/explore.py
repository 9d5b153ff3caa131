"""The tail explorer: for every request dimension, the tail's mix beside the body's, ranked by how far apart.

The tail and body are those of the attribution (docs/design.md): tail = ok requests with M ≥ quantile_q(M) (the 10
slowest when fewer), body = ok requests with M ≤ median. The distance of a dimension is the total variation
distance between the two mixes, exactly as in `contrast` — but here every dimension and every value is
returned (the report keeps only the top few above `contrast.MIN_DISTANCE`), plus `tier` and the engine's
batch size at admission (the batch size of the last `engine.step` of the request's instance that started at or
before its arrival).
"""

from __future__ import annotations

from dataclasses import dataclass

from budgetscope.analysis import contrast
from budgetscope.analysis.selection import Selection, ok_where, slowest, widened

BATCH_BUCKETS = """CASE WHEN s_batch IS NULL THEN 'unknown' WHEN s_batch <= 1 THEN '1' WHEN s_batch <= 4 THEN '2-4'
    WHEN s_batch <= 8 THEN '5-8' WHEN s_batch <= 16 THEN '9-16' WHEN s_batch <= 32 THEN '17-32'
    WHEN s_batch <= 64 THEN '33-64' ELSE '>64' END"""
DIMENSIONS = {**contrast.DIMENSIONS, "tier": "tier", "batch_size": BATCH_BUCKETS}
ORDER = {  # bucket order for display; other dimensions sort by value
    "prompt_length": ["<256", "256-1k", "1k-4k", ">=4k", "unknown"],
    "output_length": ["<64", "64-256", "256-1k", ">=1k", "unknown"],
    "batch_size": ["1", "2-4", "5-8", "9-16", "17-32", "33-64", ">64", "unknown"],
}


@dataclass(frozen=True, slots=True)
class Split:
    """Where the tail and the body of a metric begin and end (ms)."""

    metric: str
    requests: int
    threshold_ms: float  # quantile_q(M)
    median_ms: float
    tail_min_ms: float  # the smallest M in the tail (below the threshold when the tail was widened)
    tail_size: int
    body_size: int
    widened: bool


def split(con, sel: Selection, metric: str, q: float) -> Split | None:
    """The tail/body split of `metric` over the selection's ok requests; None when there are none."""
    base = ok_where(sel, metric)
    n, tq, med = con.execute(
        f"SELECT count(*), quantile_cont({metric}, {float(q)}), quantile_cont({metric}, 0.5) FROM requests {base}",
        sel.params,
    ).fetchone()
    if not n:
        return None
    n_tail, tail_min = con.execute(
        f"SELECT count(*), min({metric}) FROM requests {base} AND {metric} >= ?", [*sel.params, tq]
    ).fetchone()
    is_widened = widened(n_tail)
    if is_widened:
        n_tail, tail_min = slowest(con, sel, metric, f"count(*), min({metric})")
    (n_body,) = con.execute(f"SELECT count(*) FROM requests {base} AND {metric} <= ?", [*sel.params, med]).fetchone()
    return Split(metric, n, tq, med, tail_min, n_tail, n_body, is_widened)


def _has_engine_steps(con) -> bool:
    return bool(con.execute("SELECT count(*) FROM (SELECT 1 FROM engine_steps LIMIT 1)").fetchone()[0])


def distributions(con, sel: Selection, sp: Split) -> list[dict]:
    """Every dimension's tail and body mix, most separating first:
    [{"dimension", "distance", "top_value", "values": [{"value", "tail", "body", "tail_share", "body_share"}]}].
    `top_value` is the value most over-represented in the tail (as `contrast` picks it). The batch-size
    dimension is left out when the archive has no engine steps."""
    dims = {k: v for k, v in DIMENSIONS.items() if k != "batch_size" or _has_engine_steps(con)}
    names = list(dims)
    base = ok_where(sel, sp.metric)
    if "batch_size" in dims:
        source = f"""(SELECT r.*, s.batch_size AS s_batch FROM (SELECT * FROM requests {base}) r
                      ASOF LEFT JOIN (SELECT service_name AS s_service, start_ns AS s_start, batch_size FROM engine_steps) s
                      ON r.service_name = s.s_service AND r.arrival_ns >= s.s_start)"""
        where = ""
    else:
        source, where = "requests", base
    by_dim = contrast.mixes(con, dims, source, where, sel.params, sp.metric, sp.tail_min_ms, sp.median_ms)
    out = []
    for name in names:
        vals_ = [v for v in by_dim.get(name, []) if v[1] or v[2]]
        nt, nb = sum(v[1] for v in vals_), sum(v[2] for v in vals_)
        order = ORDER.get(name)
        vals_.sort(key=lambda v: (order.index(v[0]) if order and v[0] in order else len(order or []), v[0]))
        values = [
            {
                "value": v,
                "tail": t,
                "body": b,
                "tail_share": t / nt if nt else None,
                "body_share": b / nb if nb else None,
            }
            for v, t, b in vals_
        ]
        if nt and nb:
            distance, top, _, _ = contrast.separation(vals_)
        else:
            distance, top = None, None
        out.append({"dimension": name, "distance": distance, "top_value": top, "values": values})
    out.sort(key=lambda d: (d["distance"] is None, -(d["distance"] or 0), d["dimension"]))
    return out
