"""What the GPU was doing while the tail decoded: kernels running, DRAM bandwidth, HBM use and KV pressure, and a
call.

The tail (the E2E attribution's tail requests) and the body (requests at or under the median) are joined by
their decode intervals, [first token, first token + decode_ms], with `gpu_samples` (all GPUs of the archive: a
request does not say which GPU served it) and with `engine_steps` (preemptions, KV blocks). A decode-dominated
tail is then called, from the data only (docs/gpu.md, "Classification"):

- `host_bound`: kernels ran under HOST_BOUND_BUSY of the tail's decode time, so the GPU waited on the host. It
  takes precedence over a KV-pool fill that the tail and the body share (a fill both had does not set the tail
  apart).
- `kv_pressure`: only with evidence that separates the tail from the body: more preemptions a step during the
  tail's decode than the body's, or a pool ≥ KV_FULL full that the body's decode did not see; without engine
  steps, HBM ≥ HBM_FULL of its size that the body did not reach (weaker: engines reserve most of HBM up front).
- `bandwidth_bound`: mean GPM DRAM bandwidth utilization during the tail's decode ≥ BANDWIDTH_BOUND.
- `both` (bandwidth and KV), `neither`, or `unknown` (with the reason: no samples, none in the tail's decode, no
  GPM and no other evidence).
"""

from __future__ import annotations

from budgetscope.analysis.selection import Selection, ok_where
from budgetscope.instrument.gpu import (
    DRAM_BANDWIDTH,
    GPU_UTILIZATION,
    HBM_LIMIT,
    HBM_USED,
    MEMORY_ACTIVITY,
    PEAK_BANDWIDTH,
)

BANDWIDTH_BOUND = 0.70  # mean DRAM bandwidth utilization (0–1) at or above which decode is called bandwidth-bound
KV_FULL = 0.95  # KV blocks used / pool at or above which the pool is called full
HOST_BOUND_BUSY = 0.5  # below this share of the decode time with a kernel running, the decode waits on the host
HBM_FULL = 0.95  # HBM used / size, the fallback when no engine steps say how full the KV pool is

NO_GPU_SAMPLES = (
    "no GPU samples in this archive (it was recorded without `budgetscope gpu sample`, which needs an "
    "NVIDIA GPU and nvidia-ml-py), so DRAM bandwidth and HBM use are unknown"
)
NO_SAMPLES_IN_DECODE = "the archive has GPU samples, but none fall inside the tail requests' decode"
NO_DRAM_BANDWIDTH = (
    "no DRAM bandwidth samples (they need NVML GPM: Hopper or newer, not under MIG); NVML memory "
    "activity is busy time, not bandwidth, and is not used as such"
)

_INTERVALS = (
    "SELECT first_token_ns AS s, first_token_ns + CAST(decode_ms * 1e6 AS BIGINT) AS e FROM requests {where} "
    "AND first_token_ns IS NOT NULL AND decode_ms > 0"
)


def interval_figures(con, intervals_sql: str, params: list) -> dict:
    """GPU and engine figures over the union of the intervals (`s`, `e` ns) that `intervals_sql` selects:
    mean DRAM bandwidth utilization (0–1) and in bytes/s, mean memory activity (0–1, busy time), max and mean
    HBM used / size, preemptions and max KV-pool use from engine steps that overlap them. None = not measured."""
    rows = con.execute(
        f"""
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
        FROM g LEFT JOIN lim USING (gpu_uuid) LEFT JOIN peak USING (gpu_uuid)""",
        params,
    ).fetchall()
    n, bw, bw_bytes, activity, hbm_max, hbm_mean, n_bw, busy = rows[0]
    ((steps, preempted, kv_max),) = con.execute(
        f"""
        WITH iv AS ({intervals_sql})
        SELECT count(*), sum(preempted), max(kv_blocks_used / nullif(kv_blocks_total, 0))
        FROM engine_steps st SEMI JOIN iv ON st.start_ns <= iv.e AND st.end_ns >= iv.s""",
        params,
    ).fetchall()
    return {
        "samples": n,
        "dram_bandwidth_samples": n_bw,
        "dram_bandwidth": bw,
        "dram_bandwidth_bytes_per_s": bw_bytes,
        "memory_activity": activity,
        "gpu_busy": busy,
        "hbm_used_max": hbm_max,
        "hbm_used_mean": hbm_mean,
        "engine_steps": steps,
        "preempted": int(preempted) if preempted is not None else None,
        "kv_used_max": kv_max,
    }


def window_figures(con, start_ns: int, end_ns: int) -> dict:
    """`interval_figures` over one window (e.g. a breach window of `analysis.timeline`), [start_ns, end_ns]."""
    return interval_figures(con, "SELECT ?::BIGINT AS s, ?::BIGINT AS e", [start_ns, end_ns])


def classify(tail: dict, body: dict | None = None) -> tuple[str, str | None]:
    """(`host_bound` | `bandwidth_bound` | `kv_pressure` | `both` | `neither` | `unknown`, the reason when unknown)
    of the tail's decode figures, against the body's when given (`interval_figures` dicts)."""
    if not tail["samples"]:
        return "unknown", NO_SAMPLES_IN_DECODE
    kv = kv_sets_apart(tail, body)
    if tail.get("gpu_busy") is not None and tail["gpu_busy"] < HOST_BOUND_BUSY and not kv:
        return "host_bound", None
    if tail["dram_bandwidth"] is None:
        return ("kv_pressure", None) if kv else ("unknown", NO_DRAM_BANDWIDTH)
    bw = tail["dram_bandwidth"] >= BANDWIDTH_BOUND
    return ("both" if kv else "bandwidth_bound", None) if bw else ("kv_pressure" if kv else "neither", None)


def kv_full(f: dict | None) -> bool:
    """The KV pool (engine steps) or, without steps, HBM was full during these intervals."""
    if not f:
        return False
    if f["engine_steps"]:
        return f["kv_used_max"] is not None and f["kv_used_max"] >= KV_FULL
    return f["hbm_used_max"] is not None and f["hbm_used_max"] >= HBM_FULL


def kv_sets_apart(tail: dict, body: dict | None) -> bool:
    """Evidence of KV pressure in the tail's decode that the body's did not have: more preemptions a step, or a full
    pool the body did not see. Without a body, any preemption or a full pool."""

    def rate(f):
        return (f["preempted"] or 0) / f["engine_steps"] if f and f["engine_steps"] else 0.0

    preempted = bool(tail["engine_steps"] and tail["preempted"]) and (body is None or rate(tail) > rate(body))
    return preempted or (kv_full(tail) and not kv_full(body))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def sentence(g: dict) -> str:
    """One sentence for the verdict (only called when the tail's decode has samples)."""
    t, b = g["tail"], g["body"]
    figs = []
    if t.get("gpu_busy") is not None:
        figs.append(f"kernels running {_pct(t['gpu_busy'])} of the time (body {_pct(b.get('gpu_busy'))})")
    if t["dram_bandwidth"] is not None:
        figs.append(f"DRAM bandwidth {_pct(t['dram_bandwidth'])} of peak (body {_pct(b['dram_bandwidth'])})")
    if t["engine_steps"] and t["kv_used_max"] is not None:
        figs.append(f"KV pool up to {_pct(t['kv_used_max'])} full (body {_pct(b['kv_used_max'])})")
    elif t["hbm_used_max"] is not None:
        figs.append(f"HBM up to {_pct(t['hbm_used_max'])} full")
    if t["preempted"] is not None:
        figs.append(f"{t['preempted']} preemptions (body {b['preempted'] or 0})")
    call = {
        "host_bound": "host-bound: the GPU sat idle most of the time, so the host side (scheduling, kernel "
        "launches, the server) held each step",
        "bandwidth_bound": "bandwidth-bound",
        "kv_pressure": "under KV-cache pressure",
        "both": "bandwidth-bound and under KV-cache pressure",
        "neither": "neither host-, bandwidth- nor KV-bound",
        "unknown": f"not classifiable ({g['reason']})",
    }[g["classification"]]
    end = ""
    if kv_full(t) and kv_full(b) and not kv_sets_apart(t, b):
        end = " (the KV pool was as full for the body: it does not set the tail apart)"
    return f"While the tail decoded, GPU: {', '.join(figs) or 'no usable figures'}; its decode is {call}{end}."


def tail_gpu(con, sel: Selection, entry: dict, present: dict[str, bool]) -> dict:
    """The `gpu` key of a report tier entry: figures for the E2E tail's and the body's decode, and the call.

    `classification` is None when the tail is not decode-dominated (the figures are still given). `present`
    (coverage.contents) says whether the archive has samples."""
    if not present["gpu_samples"]:
        return {"classification": "unknown", "reason": NO_GPU_SAMPLES, "decode_dominated": None}
    a = (entry.get("attribution") or {}).get("e2e")
    if a is None or a["shares"] is None:
        return {"classification": "unknown", "reason": "no E2E tail to examine", "decode_dominated": None}
    metric = a["metric"]
    base = ok_where(sel, metric)
    tail = interval_figures(con, _INTERVALS.format(where=base) + f" AND {metric} >= ?", [*sel.params, a["tail_min_ms"]])
    body = interval_figures(con, _INTERVALS.format(where=base) + f" AND {metric} <= ?", [*sel.params, a["median_ms"]])
    dominated = a["dominant"] == "decode"
    out = {
        "decode_dominated": dominated,
        "tail": tail,
        "body": body,
        "thresholds": {"bandwidth_bound": BANDWIDTH_BOUND, "kv_full": KV_FULL, "hbm_full": HBM_FULL},
    }
    call, reason = classify(tail, body)
    if not dominated:
        out.update(
            classification=None, reason=f"the E2E tail is not decode-dominated (its largest share is {a['top'][0]})"
        )
    else:
        out.update(classification=call, reason=reason)
    if dominated and tail["samples"]:
        out["sentence"] = sentence(out)
    return out
