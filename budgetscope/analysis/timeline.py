"""The timeline of a tier: rolling tail latency against budget, arrival rate, engine state and GPU samples over
time, the windows where the tier broke its budget, and the requests of any window.

Time is bucketed into fixed buckets of `bucket_ns` aligned to multiples of the bucket width since the epoch.
The rolling quantile at bucket k is the tier's percentile over the ok requests that *arrived* in the
`window_buckets` buckets ending with k (a tumbling window when `window_buckets` = 1). All series are columnar
dicts (`{"t_ns": [...], "<name>": [...]}`, one entry a bucket, None where nothing was measured), ready to plot
and to embed as JSON. Every aggregate is one SQL query in DuckDB; Python only walks the buckets.
"""

from __future__ import annotations

from dataclasses import dataclass

from budgetscope.analysis.budgets import TierBudget
from budgetscope.analysis.selection import Selection

NICE_BUCKETS_NS = [
    int(x * 1e9)
    for x in (
        0.1,
        0.2,
        0.5,
        1,
        2,
        5,
        10,
        15,
        30,
        60,
        120,
        300,
        600,
        900,
        1800,
        3600,
        7200,
        3 * 3600,
        6 * 3600,
        12 * 3600,
        86400,
    )
]
TARGET_BUCKETS = 120
WINDOW_BUCKETS = 3

DRAM_BANDWIDTH = "budgetscope.gpu.dram_bandwidth.utilization"
HBM_USED = "hw.gpu.memory.usage"
HBM_LIMIT = "hw.gpu.memory.limit"
GPU_METRICS = {"dram_bandwidth": DRAM_BANDWIDTH, "hbm_used_bytes": HBM_USED, "hbm_limit_bytes": HBM_LIMIT}

NO_ENGINE_STEPS = (
    "no engine.step spans in this archive: only the reference engine emits them (vLLM, SGLang, TGI "
    "and llama.cpp sources do not), so queue depth and KV-cache usage over time are unknown"
)
NO_STEPS_IN_RANGE = "the archive has engine.step spans, but none in this time range"
NO_GPU_SAMPLES = (
    "no GPU samples in this archive: it was recorded without the GPU sampler "
    "(budgetscope.instrument.gpu, which needs an NVIDIA GPU and nvidia-ml-py) — the sample archives come "
    "from a CPU-only machine — so DRAM bandwidth and HBM use are unknown"
)
NO_GPU_IN_RANGE = "the archive has GPU samples, but none in this time range"
NO_DRAM_BANDWIDTH = (
    "GPU samples hold no DRAM bandwidth: it needs NVML GPM metrics (Hopper or newer GPUs); "
    "NVML's memory 'utilization' is busy time, not bandwidth, and is not shown as such"
)
NO_HBM = "GPU samples hold no hw.gpu.memory.usage points"


def choose_bucket_ns(span_ns: int, target: int = TARGET_BUCKETS) -> int:
    """The smallest round bucket width (100 ms … 1 day) that cuts `span_ns` into at most `target` buckets."""
    for b in NICE_BUCKETS_NS:
        if span_ns / b <= target:
            return b
    return NICE_BUCKETS_NS[-1]


def time_bounds(con, sel: Selection) -> tuple[int | None, int | None]:
    """(first arrival, last arrival) in ns of the selected requests; (None, None) when there are none."""
    return con.execute(f"SELECT min(arrival_ns), max(arrival_ns) FROM requests {sel.where()}", sel.params).fetchone()


@dataclass(frozen=True, slots=True)
class Grid:
    """Buckets [start_ns + k·bucket_ns, start_ns + (k+1)·bucket_ns) for k in 0 … num_buckets − 1."""

    start_ns: int
    bucket_ns: int
    num_buckets: int

    @classmethod
    def covering(cls, lo_ns: int, hi_ns: int, bucket_ns: int | None = None) -> Grid:
        """The grid of aligned buckets that covers [lo_ns, hi_ns] (hi included)."""
        bucket_ns = bucket_ns or choose_bucket_ns(max(hi_ns - lo_ns, 1))
        start = lo_ns // bucket_ns * bucket_ns
        return cls(start, bucket_ns, (hi_ns - start) // bucket_ns + 1)

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.num_buckets * self.bucket_ns

    def times(self) -> list[int]:
        return [self.start_ns + k * self.bucket_ns for k in range(self.num_buckets)]


def _fill(grid: Grid, rows: list[tuple], width: int) -> list[list]:
    """Columns of `width` values per bucket from (k, v1, …) rows; None where a bucket has no row."""
    cols = [[None] * grid.num_buckets for _ in range(width)]
    for k, *vals in rows:
        if 0 <= k < grid.num_buckets:
            for c, v in zip(cols, vals):
                c[k] = None if v is not None and v != v else v
    return cols


def request_series(
    con, sel: Selection, grid: Grid, columns: dict[str, str], q: float, window_buckets: int = WINDOW_BUCKETS
) -> dict[str, list]:
    """Per bucket: `requests` (arrivals), `arrivals_per_s`, and for each name → column the rolling
    quantile q (ms) over ok requests of the trailing `window_buckets` buckets (NaN values left out)."""
    where = sel.where("arrival_ns >= ?", "arrival_ns < ?")
    params = [*sel.params, grid.start_ns, grid.end_ns]
    key = f"(arrival_ns - {int(grid.start_ns)}) // {int(grid.bucket_ns)}"
    counts = con.execute(f"SELECT {key} AS k, count(*) FROM requests {where} GROUP BY 1", params).fetchall()
    (n,) = _fill(grid, counts, 1)
    n = [c or 0 for c in n]
    out: dict[str, list] = {
        "t_ns": grid.times(),
        "requests": n,
        "arrivals_per_s": [c / (grid.bucket_ns / 1e9) for c in n],
    }
    if columns:
        sel_cols = ", ".join(f"{c} AS c{i}" for i, c in enumerate(columns.values()))
        aggs = ", ".join(
            f"quantile_cont(c{i}, {float(q)}) FILTER (WHERE ok AND NOT isnan(c{i}))" for i in range(len(columns))
        )
        rows = con.execute(
            f"""
            WITH b AS (SELECT {key} AS k, outcome = 'ok' AS ok, {sel_cols} FROM requests {where})
            SELECT k + j AS k, {aggs} FROM b, range(0, {int(window_buckets)}) AS w(j) GROUP BY 1""",
            params,
        ).fetchall()
        for name, col in zip(columns, _fill(grid, rows, len(columns))):
            out[name] = col
    return out


def engine_series(con, grid: Grid, service_names: list[str] | None = None) -> tuple[dict[str, list] | None, str | None]:
    """Per bucket from `engine_steps`: mean and max `queue_depth`, mean `batch_size`, mean and max KV usage
    (`kv_blocks_used / kv_blocks_total`, 0–1), step count. Returns (series, None) or (None, why it is missing)."""
    if not con.execute("SELECT count(*) FROM (SELECT 1 FROM engine_steps LIMIT 1)").fetchone()[0]:
        return None, NO_ENGINE_STEPS
    clauses, params = ["start_ns >= ?", "start_ns < ?"], [grid.start_ns, grid.end_ns]
    if service_names:
        clauses.append(f"service_name IN ({', '.join('?' * len(service_names))})")
        params += list(service_names)
    key = f"(start_ns - {int(grid.start_ns)}) // {int(grid.bucket_ns)}"
    rows = con.execute(
        f"""
        SELECT {key} AS k, avg(queue_depth), max(queue_depth), avg(batch_size),
               avg(kv_blocks_used / nullif(kv_blocks_total, 0)), max(kv_blocks_used / nullif(kv_blocks_total, 0)),
               count(*)
        FROM engine_steps WHERE {" AND ".join(clauses)} GROUP BY 1""",
        params,
    ).fetchall()
    if not rows:
        return None, NO_STEPS_IN_RANGE
    names = ["queue_depth_mean", "queue_depth_max", "batch_size_mean", "kv_usage_mean", "kv_usage_max", "steps"]
    return {"t_ns": grid.times(), **dict(zip(names, _fill(grid, rows, len(names))))}, None


def gpu_series(con, grid: Grid) -> tuple[dict[str, list] | None, dict[str, str]]:
    """Per bucket from `gpu_samples`, averaged over GPUs and samples: DRAM bandwidth utilization (0–1), HBM used
    and HBM limit (bytes per GPU). Returns (series or None, {series name: why it is missing})."""
    missing: dict[str, str] = {}
    if not con.execute("SELECT count(*) FROM (SELECT 1 FROM gpu_samples LIMIT 1)").fetchone()[0]:
        return None, {"dram_bandwidth": NO_GPU_SAMPLES, "hbm_used_bytes": NO_GPU_SAMPLES}
    key = f"(ts_ns - {int(grid.start_ns)}) // {int(grid.bucket_ns)}"
    aggs = ", ".join(f"avg(value) FILTER (WHERE metric = '{m}')" for m in GPU_METRICS.values())
    rows = con.execute(
        f"SELECT {key} AS k, {aggs} FROM gpu_samples WHERE ts_ns >= ? AND ts_ns < ? GROUP BY 1",
        [grid.start_ns, grid.end_ns],
    ).fetchall()
    if not rows:
        return None, {"dram_bandwidth": NO_GPU_IN_RANGE, "hbm_used_bytes": NO_GPU_IN_RANGE}
    series = {"t_ns": grid.times(), **dict(zip(GPU_METRICS, _fill(grid, rows, len(GPU_METRICS))))}
    if all(v is None for v in series["dram_bandwidth"]):
        missing["dram_bandwidth"] = NO_DRAM_BANDWIDTH
    if all(v is None for v in series["hbm_used_bytes"]):
        missing["hbm_used_bytes"] = NO_HBM
    return series, missing


def breach_windows(series: dict[str, list], budgets: dict[str, float | None], bucket_ns: int) -> list[dict]:
    """Runs of consecutive buckets where a rolling quantile exceeds its budget: [{start_ns, end_ns (exclusive),
    buckets, peaks: {name: highest value in the run, for the names over budget}}], in time order."""
    over = [name for name, b in budgets.items() if b is not None and name in series]
    windows: list[dict] = []
    current = None
    for k, t in enumerate(series["t_ns"]):
        hot = {n: series[n][k] for n in over if series[n][k] is not None and series[n][k] > budgets[n]}
        if hot and current is not None and current["end_ns"] == t:
            current["end_ns"] = t + bucket_ns
            current["buckets"] += 1
            for n, v in hot.items():
                current["peaks"][n] = max(current["peaks"].get(n, v), v)
        elif hot:
            current = {"start_ns": t, "end_ns": t + bucket_ns, "buckets": 1, "peaks": dict(hot)}
            windows.append(current)
    return windows


def _mean(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def what_moved(window: dict, series: dict[str, dict[str, list] | None]) -> dict[str, dict[str, float | None]]:
    """For a breach window: each signal's mean inside the window against its mean outside it.

    `series` maps a group name to its series (e.g. {"requests": …, "engine": …, "gpu": …}); the signals are
    arrivals_per_s, queue_depth_mean, kv_usage_mean, dram_bandwidth and hbm_used_bytes where present."""
    signals = ("arrivals_per_s", "queue_depth_mean", "kv_usage_mean", "dram_bandwidth", "hbm_used_bytes")
    out = {}
    for s in series.values():
        if not s:
            continue
        inside = [window["start_ns"] <= t < window["end_ns"] for t in s["t_ns"]]
        for name in signals:
            if name in s:
                out[name] = {
                    "inside": _mean([v for v, i in zip(s[name], inside) if i]),
                    "outside": _mean([v for v, i in zip(s[name], inside) if not i]),
                }
    return out


def tier_timeline(
    con,
    tb: TierBudget,
    entry: dict,
    since_ns: int | None = None,
    until_ns: int | None = None,
    filters: dict | None = None,
    bucket_ns: int | None = None,
    window_buckets: int = WINDOW_BUCKETS,
) -> dict:
    """The whole timeline of one tier, for the dashboard and the postmortem.

    `entry` is the tier's report entry (`tier_report`): the timeline plots the same figures (client or server
    columns) at the same percentile against the same budgets. Returns {"empty": True, "why": …} when no request
    is selected; else grid, request/engine/gpu series, what is missing and why, and the breach windows."""
    sel = Selection(tb.filters, since_ns, until_ns, filters)
    lo, hi = time_bounds(con, sel)
    if lo is None:
        return {"empty": True, "why": "no requests of this tier match the filters and time range"}
    # the grid spans the selected requests' arrivals (not the whole asked range) so buckets stay fine-grained
    grid = Grid.covering(lo, hi, bucket_ns)
    metrics = {m: entry["metrics"][m]["column"] for m in ("ttft_ms", "e2e_ms")}
    req = request_series(con, sel, grid, metrics, tb.percentile / 100, window_buckets)
    instances = filters.get("service_name") if filters else None
    instances = [instances] if isinstance(instances, str) else instances
    engine, engine_why = engine_series(con, grid, instances)
    gpu, gpu_missing = gpu_series(con, grid)
    budgets = {m: entry["metrics"][m]["budget"] for m in metrics}
    windows = breach_windows(req, budgets, grid.bucket_ns)
    for w in windows:
        w["moved"] = what_moved(w, {"requests": req, "engine": engine, "gpu": gpu})
    return {
        "empty": False,
        "tier": tb.name,
        "percentile": tb.percentile,
        "columns": metrics,
        "budgets": budgets,
        "start_ns": grid.start_ns,
        "end_ns": grid.end_ns,
        "bucket_ns": grid.bucket_ns,
        "window_buckets": window_buckets,
        "requests": req,
        "engine": engine,
        "gpu": gpu,
        "missing": {**({"engine": engine_why} if engine_why else {}), **gpu_missing},
        "breach_windows": windows,
    }


WINDOW_COLUMNS = (
    "request_id",
    "trace_id",
    "arrival_ns",
    "tier",
    "model",
    "tenant",
    "service_name",
    "outcome",
    "input_tokens",
    "cached_tokens",
    "output_tokens",
    "ttft_ms",
    "client_ttft_ms",
    "e2e_ms",
    "client_e2e_ms",
    "tpot_ms",
    "queue_ms",
    "prefill_ms",
    "decode_ms",
    "network_ms",
)


def window_requests(
    con,
    tb: TierBudget | None,
    start_ns: int,
    end_ns: int,
    filters: dict | None = None,
    order_by: str = "e2e_ms",
    limit: int = 500,
) -> tuple[list[str], list[tuple], int]:
    """The requests of a tier (all tiers when `tb` is None) that arrived in [start_ns, end_ns), slowest first by
    `order_by` (a `requests` column), at most `limit`. Returns (columns, rows, how many in all)."""
    if order_by not in WINDOW_COLUMNS:
        raise ValueError(f"cannot order by {order_by!r}")
    sel = Selection(tb.filters if tb else {}, start_ns, end_ns, filters)
    (total,) = con.execute(f"SELECT count(*) FROM requests {sel.where()}", sel.params).fetchone()
    rows = con.execute(
        f"SELECT {', '.join(WINDOW_COLUMNS)} FROM requests {sel.where()} "
        f"ORDER BY {order_by} DESC NULLS LAST, arrival_ns LIMIT {int(limit)}",
        sel.params,
    ).fetchall()
    return list(WINDOW_COLUMNS), rows, total
