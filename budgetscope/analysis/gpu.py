"""What the GPU was doing while the tail decoded: DRAM bandwidth, HBM use and KV pressure, and a call.

The tail (the E2E attribution's tail requests) and the body (requests at or under the median) are joined by
their decode intervals, [first token, first token + decode_ms], with `gpu_samples` (all GPUs of the archive: a
request does not say which GPU served it) and with `engine_steps` (preemptions, KV blocks). A decode-dominated
tail is then called, from the data only (docs/gpu.md, "Classification"):

- `kv_pressure`: sequences were preempted during the tail's decode, or the KV pool was ≥ KV_FULL full; without
  engine steps, HBM ≥ HBM_FULL of its size (weaker: engines reserve most of HBM up front).
- `bandwidth_bound`: mean GPM DRAM bandwidth utilization during the tail's decode ≥ BANDWIDTH_BOUND.
- `both`, `neither`, or `unknown` (with the reason: no samples, none in the tail's decode, no GPM).
"""

from __future__ import annotations

from budgetscope.analysis.report import Selection
from budgetscope.instrument.gpu import (DRAM_BANDWIDTH, GPU_UTILIZATION, HBM_LIMIT, HBM_USED, MEMORY_ACTIVITY,
                                       PEAK_BANDWIDTH)

BANDWIDTH_BOUND = 0.70  # mean DRAM bandwidth utilization (0–1) at or above which decode is called bandwidth-bound
KV_FULL = 0.95  # KV blocks used / pool at or above which the pool is called full
HOST_BOUND_BUSY = 0.5  # below this share of time with a kernel running, a "neither" decode is said to wait on the host
HBM_FULL = 0.95  # HBM used / size, the fallback when no engine steps say how full the KV pool is

NO_GPU_SAMPLES = ("no GPU samples in this archive (it was recorded without `budgetscope gpu sample`, which needs an "
                  "NVIDIA GPU and nvidia-ml-py), so DRAM bandwidth and HBM use are unknown")
NO_SAMPLES_IN_DECODE = "the archive has GPU samples, but none fall inside the tail requests' decode"
NO_DRAM_BANDWIDTH = ("no DRAM bandwidth samples (they need NVML GPM: Hopper or newer, not under MIG); NVML memory "
                     "activity is busy time, not bandwidth, and is not used as such")

_INTERVALS = ("SELECT first_token_ns AS s, first_token_ns + CAST(decode_ms * 1e6 AS BIGINT) AS e FROM requests {where} "
              "AND first_token_ns IS NOT NULL AND decode_ms > 0")


def has_samples(con) -> bool:
    return bool(con.execute("SELECT count(*) FROM (SELECT 1 FROM gpu_samples LIMIT 1)").fetchall()[0][0])


def interval_figures(con, intervals_sql: str, params: list) -> dict:
    """GPU and engine figures over the union of the intervals (`s`, `e` ns) that `intervals_sql` selects:
    mean DRAM bandwidth utilization (0–1) and in bytes/s, mean memory activity (0–1, busy time), max and mean
    HBM used / size, preemptions and max KV-pool use from engine steps that overlap them. None = not measured."""
    rows = con.execute(f"""
        WITH iv AS ({intervals_sql}),
        g AS (SELECT g.* FROM gpu_samples g SEMI JOIN iv ON g.ts_ns >= iv.s AND g.ts_ns <= iv.e
              WHERE isfinite(g.value)),
        lim AS (SELECT gpu_uuid, max(value) AS v FROM gpu_samples WHERE metric = '{HBM_LIMIT}' GROUP BY 1),
        peak AS (SELECT gpu_uuid, max(value) AS v FROM gpu_samples WHERE metric = '{PEAK_BANDWIDTH}' GROUP BY 1)
        SELECT count(*),
          avg(value) FILTER (WHERE metric = '{DRAM_BANDWIDTH}'),
          avg(value * peak.v) FILTER (WHERE metric = '{DRAM_BANDWIDTH}'),
          avg(value) FILTER (WHERE metric = '{MEMORY_ACTIVITY}'),
          max(value / lim.v) FILTER (WHERE metric = '{HBM_USED}'),
          avg(value / lim.v) FILTER (WHERE metric = '{HBM_USED}'),
          count(*) FILTER (WHERE metric = '{DRAM_BANDWIDTH}'),
          avg(value) FILTER (WHERE metric = '{GPU_UTILIZATION}')
        FROM g LEFT JOIN lim USING (gpu_uuid) LEFT JOIN peak USING (gpu_uuid)""", params).fetchall()
    n, bw, bw_bytes, activity, hbm_max, hbm_mean, n_bw, busy = rows[0]
    (steps, preempted, kv_max), = con.execute(f"""
        WITH iv AS ({intervals_sql})
        SELECT count(*), sum(preempted), max(kv_blocks_used / nullif(kv_blocks_total, 0))
        FROM engine_steps st SEMI JOIN iv ON st.start_ns <= iv.e AND st.end_ns >= iv.s""", params).fetchall()
    return {"samples": n, "dram_bandwidth_samples": n_bw, "dram_bandwidth": bw, "dram_bandwidth_bytes_per_s": bw_bytes,
            "memory_activity": activity, "gpu_busy": busy, "hbm_used_max": hbm_max, "hbm_used_mean": hbm_mean,
            "engine_steps": steps, "preempted": int(preempted) if preempted is not None else None, "kv_used_max": kv_max}


def window_figures(con, start_ns: int, end_ns: int) -> dict:
    """`interval_figures` over one window (e.g. a breach window of `analysis.timeline`), [start_ns, end_ns]."""
    return interval_figures(con, "SELECT ?::BIGINT AS s, ?::BIGINT AS e", [start_ns, end_ns])


def classify(tail: dict) -> tuple[str, str | None]:
    """(`bandwidth_bound` | `kv_pressure` | `both` | `neither` | `unknown`, the reason when unknown)."""
    if not tail["samples"]:
        return "unknown", NO_SAMPLES_IN_DECODE
    if tail["engine_steps"]:
        kv = bool(tail["preempted"]) or (tail["kv_used_max"] is not None and tail["kv_used_max"] >= KV_FULL)
    else:
        kv = tail["hbm_used_max"] is not None and tail["hbm_used_max"] >= HBM_FULL
    if tail["dram_bandwidth"] is None:
        return ("kv_pressure", None) if kv else ("unknown", NO_DRAM_BANDWIDTH)
    bw = tail["dram_bandwidth"] >= BANDWIDTH_BOUND
    return ("both" if kv else "bandwidth_bound", None) if bw else ("kv_pressure" if kv else "neither", None)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def sentence(g: dict) -> str:
    """One sentence for the verdict (only called when the tail's decode has samples)."""
    t, b = g["tail"], g["body"]
    figs = []
    if t["dram_bandwidth"] is not None:
        figs.append(f"DRAM bandwidth {_pct(t['dram_bandwidth'])} of peak (body {_pct(b['dram_bandwidth'])})")
    if t["hbm_used_max"] is not None:
        figs.append(f"HBM up to {_pct(t['hbm_used_max'])} full")
    if t["preempted"] is not None:
        figs.append(f"{t['preempted']} preemptions")
    if t.get("gpu_busy") is not None:
        figs.append(f"kernels running {_pct(t['gpu_busy'])} of the time")
    call = {"bandwidth_bound": "bandwidth-bound", "kv_pressure": "under KV-cache pressure",
            "both": "bandwidth-bound and under KV-cache pressure", "neither": "neither bandwidth-bound nor under KV pressure",
            "unknown": f"not classifiable ({g['reason']})"}[g["classification"]]
    end = ""
    if g["classification"] == "neither" and t.get("gpu_busy") is not None and t["gpu_busy"] < HOST_BOUND_BUSY:
        end = " (the GPU sat idle most of the time: the host side — scheduling, kernel launches, the server — held each step)"
    return f"While the tail decoded, GPU: {', '.join(figs) or 'no usable figures'}; its decode is {call}{end}."


def tail_gpu(con, sel: Selection, entry: dict) -> dict:
    """The `gpu` key of a report tier entry: figures for the E2E tail's and the body's decode, and the call.

    `classification` is None when the tail is not decode-dominated (the figures are still given)."""
    if not has_samples(con):
        return {"classification": "unknown", "reason": NO_GPU_SAMPLES, "decode_dominated": None}
    a = (entry.get("attribution") or {}).get("e2e")
    if a is None or a["shares"] is None:
        return {"classification": "unknown", "reason": "no E2E tail to examine", "decode_dominated": None}
    metric = a["metric"]
    base = sel.where("outcome = 'ok'", f"{metric} IS NOT NULL", f"NOT isnan({metric})")
    tail = interval_figures(con, _INTERVALS.format(where=base) + f" AND {metric} >= ?", [*sel.params, a["tail_min_ms"]])
    body = interval_figures(con, _INTERVALS.format(where=base) + f" AND {metric} <= ?", [*sel.params, a["median_ms"]])
    dominated = a["top"][0] == "decode"
    out = {"decode_dominated": dominated, "tail": tail, "body": body,
           "thresholds": {"bandwidth_bound": BANDWIDTH_BOUND, "kv_full": KV_FULL, "hbm_full": HBM_FULL}}
    call, reason = classify(tail)
    if not dominated:
        out.update(classification=None, reason=f"the E2E tail is not decode-dominated (its largest share is {a['top'][0]})")
    else:
        out.update(classification=call, reason=reason)
    if dominated and tail["samples"]:
        out["sentence"] = sentence(out)
    return out
