"""Capacity: what a load sweep found, rate by rate, read back from the archive alone.

`budgetscope sweep` runs one open-loop step per offered rate (or one closed-loop step per concurrency) and tags
every client span of a step with `budgetscope.sweep.run`, `.step`, `.repeat`, `.rate_rps` (or `.concurrency`) and
`.duration_s`. The load *level* of a step is its rate, or its concurrency in a concurrency sweep; what follows
says "rate" for either. From those tags `analyze` finds the
steps, and for each it builds the budget report of the step's time window (`build_report`: the same tiers,
quantiles, attainment and tail attribution as `budgetscope report`), plus the server's saturation signals of
that window (`engine_steps`, else scraped `/metrics` in `server_metrics`). Then, per tier:

- **keeps** at a step: the report keeps the tier's budgets (every quantile and stage quantile within budget) and
  its attainment (goodput share) is at least the target (default: the tier's percentile / 100);
- **capacity**: the highest rate below the first rate that breaks (every run of every rate up to it keeps);
- **served** and **goodput** rates: requests that ended ok (that met every SLO) over the step's first send → last
  response, so that past capacity the time the queue takes to drain after the arrivals stop counts;
- **knee**: the last rate before the tail TTFT turns up: the first step up in rate where the tier's pXX TTFT
  grows faster than the rate itself (elasticity d ln TTFT / d ln rate > 1) and has at least doubled from the
  lightest rate, and stays at least doubled at every higher rate; or (rates only) where the server serves less
  than 90 % of the offered rate;
- **repeats**: with several runs per rate, the capacity of each repeat alone (its own steps), and their spread
  and mean with a 95 % Student-t interval, as multi-run benchmark tools report;
- **takeover**: the stage that dominates the TTFT tail past the knee (or past capacity), its share there and at
  the lightest rate: "above 6 req/s queue is 80 % of the TTFT tail".

Everything is recomputed from the archive, so the dashboard's Capacity page and `sweep --format json` agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from budgetscope.analysis.budgets import Budgets, TierBudget
from budgetscope.analysis.report import build_report, discovered_tiers, pkey

RUN, STEP, REPEAT, RATE, DURATION = (
    "budgetscope.sweep.run",
    "budgetscope.sweep.step",
    "budgetscope.sweep.repeat",
    "budgetscope.sweep.rate_rps",
    "budgetscope.sweep.duration_s",
)
CONCURRENCY = "budgetscope.sweep.concurrency"
"""Tag of a closed-loop step: requests in flight (instead of RATE)."""
RATE_UNIT, CONCURRENCY_UNIT = "req/s", "concurrent requests"
T_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
"""Two-sided 95 % Student-t quantiles by degrees of freedom (1.96 beyond)."""
"""Client span attributes of a sweep step (strings, ints, doubles)."""
SERVED_FRACTION = 0.9
"""Below this share of the offered rate served ok, the server no longer keeps up."""
KNEE_ELASTICITY = 1.0
KNEE_GROWTH = 2.0
Z_95 = 1.96

ENGINE_METRICS = {  # signal → names under which servers expose it on /metrics
    "running": (
        "budgetscope_engine_requests_running",
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "tgi_batch_current_size",
    ),
    "waiting": (
        "budgetscope_engine_requests_waiting",
        "vllm:num_requests_waiting",
        "sglang:num_queue_reqs",
        "tgi_queue_size",
    ),
    "kv_usage": (
        "budgetscope_engine_kv_cache_usage_ratio",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
    ),
    "preemptions": ("budgetscope_engine_preemptions_total", "vllm:num_preemptions_total", "vllm:num_preemptions"),
}


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a sweep: its offered rate and the time window of its client spans (ns since the epoch)."""

    run: str
    index: int
    repeat: int
    rate_rps: float
    duration_s: float
    start_ns: int
    end_ns: int
    sent: int
    target: str | None
    concurrency: int | None = None
    """Requests in flight of a closed-loop step (rate_rps is then None)."""

    @property
    def level(self) -> float:
        """The step's load: its rate, or its concurrency in a closed loop."""
        return self.rate_rps if self.concurrency is None else self.concurrency


def sweep_runs(con) -> list[str]:
    """The sweep runs in the archive, oldest first."""
    rows = con.execute(f"""SELECT (attributes->>'{RUN}') AS run, min(start_ns) FROM spans
        WHERE source = 'client' AND (attributes->>'{RUN}') IS NOT NULL GROUP BY 1 ORDER BY 2""").fetchall()
    return [r[0] for r in rows]


def sweep_steps(con, run: str) -> list[Step]:
    """The steps of one run, in the order they ran."""
    rows = con.execute(
        f"""SELECT CAST(attributes->>'{STEP}' AS INTEGER) AS step,
          CAST(attributes->>'{REPEAT}' AS INTEGER), CAST(attributes->>'{RATE}' AS DOUBLE),
          CAST(attributes->>'{DURATION}' AS DOUBLE), min(start_ns), max(end_ns), count(*),
          min(attributes->>'url.full'), CAST(attributes->>'{CONCURRENCY}' AS INTEGER)
        FROM spans WHERE source = 'client' AND (attributes->>'{RUN}') = ?
        GROUP BY 1, 2, 3, 4, 9 ORDER BY 1""",
        [run],
    ).fetchall()
    return [Step(run, r[0], r[1] or 0, r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in rows]


def wilson(k: int, n: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval of k successes in n (95 % by default); None without trials."""
    if n <= 0:
        return None
    p = k / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, centre - half), min(1.0, centre + half))


def signals(con, start_ns: int, end_ns: int) -> dict:
    """The server's saturation signals in [start_ns, end_ns]: from `engine_steps` when the engine emitted its step
    spans, else from scraped `/metrics` samples (`server_metrics`); `source` None when neither has any."""
    row = con.execute(
        """SELECT count(*), avg(batch_size), max(batch_size), quantile_cont(queue_depth, 0.99),
          max(queue_depth), max(kv_blocks_used::DOUBLE / nullif(kv_blocks_total, 0)), sum(preempted)
        FROM engine_steps WHERE start_ns >= ? AND start_ns <= ?""",
        [start_ns, end_ns],
    ).fetchone()
    if row[0]:
        return {
            "source": "engine_steps",
            "steps": row[0],
            "batch_mean": row[1],
            "batch_max": row[2],
            "queue_p99": row[3],
            "queue_max": row[4],
            "kv_max": row[5],
            "preemptions": int(row[6] or 0),
        }
    names = [n for ns in ENGINE_METRICS.values() for n in ns]
    try:
        rows = con.execute(
            f"""SELECT metric, count(*), avg(value), max(value), min(value) FROM server_metrics
            WHERE ts_ns >= ? AND ts_ns <= ? AND metric IN ({", ".join("?" * len(names))}) GROUP BY 1""",
            [start_ns, end_ns, *names],
        ).fetchall()
    except Exception:  # an archive from before server_metrics existed
        rows = []
    if not rows:
        return {"source": None}
    by = {r[0]: r for r in rows}

    def pick(signal):
        return next((by[n] for n in ENGINE_METRICS[signal] if n in by), None)

    out: dict = {"source": "metrics", "scrapes": max(r[1] for r in rows)}
    if (r := pick("running")) is not None:
        out.update(batch_mean=r[2], batch_max=r[3])
    if (r := pick("waiting")) is not None:
        out.update(queue_mean=r[2], queue_max=r[3])
    if (r := pick("kv_usage")) is not None:
        out["kv_max"] = r[3]
    if (r := pick("preemptions")) is not None:
        out["preemptions"] = int(r[3] - r[4])
    return out


def _mean_shares(shares: list[dict]) -> dict | None:
    """Each stage's mean share over runs, over the runs that know it (None where none does)."""
    if not shares:
        return None
    out = {}
    for k in shares[0]:
        known = [sh[k] for sh in shares if sh.get(k) is not None]
        out[k] = sum(known) / len(known) if known else None
    return out


def _tier_at_step(t: dict, wall_s: float, target: float | None) -> dict:
    """The figures of one tier in one step (a report tier entry, condensed), and whether it keeps."""
    key = pkey(t["percentile"])
    want = target if target is not None else t["percentile"] / 100
    n, att = t["requests"], t["attainment"]
    judged = t["judged_requests"]
    over = t.get("attainment_over", judged)  # attainment is over the requests judged on a known figure
    met = round(att * over) if att is not None else 0
    attribution = {}
    for kind in ("ttft", "e2e"):
        a = t["attribution"].get(kind)
        attribution[kind] = (
            None
            if a is None
            else {
                "metric": a["metric"],
                "tail_size": a["tail_size"],
                "shares": a["shares"],
                "dominant": a["dominant"] if a["shares"] is not None else None,
                "verdict": a["verdict"],
                "tail_mean_ms": a["tail_mean_ms"],
                "body_mean_ms": a["body_mean_ms"],
            }
        )
    keeps = None if not n else bool(t["kept"] and att is not None and att >= want)
    return {
        "name": t["name"],
        "percentile": t["percentile"],
        "requests": n,
        "ok_requests": t["ok_requests"],
        "judged_requests": judged,
        "status": t["status"],
        "outcomes": t["outcomes"],
        "attainment": att,
        "attainment_interval": wilson(met, over),
        "target_attainment": want,
        "goodput_rps": met / wall_s if wall_s > 0 else None,
        "metrics": {
            m: {"p50": v.get("p50"), key: v.get(key), "budget": v.get("budget"), "column": v.get("column")}
            for m, v in t["metrics"].items()
        },
        "stages": {s: {key: v.get(key), "budget": v.get("budget")} for s, v in t["stages"].items()},
        "attribution": attribution,
        "breaches": t["breaches"],
        "kept": t["kept"],
        "keeps": keeps,
    }


def step_figures(con, step: Step, budgets: Budgets, target_attainment: float | None = None) -> dict:
    """One step: its rate, counts, the server's signals and each budgeted tier's figures (the report of its window)."""
    rep = build_report(con, budgets, step.start_ns, step.end_ns + 1)
    # first send → last response: past capacity the queue drains after the arrivals stop, and that time counts
    wall_s = (step.end_ns - step.start_ns) / 1e9
    tiers = [_tier_at_step(t, wall_s, target_attainment) for t in rep["tiers"] if t.get("budgeted", True)]
    ok = sum(t["ok_requests"] for t in rep["tiers"])
    requests = sum(t["requests"] for t in rep["tiers"]) + sum(rep.get("unbudgeted_tiers", {}).values())
    return {
        "step": step.index,
        "repeat": step.repeat,
        "rate_rps": step.rate_rps,
        "concurrency": step.concurrency,
        "level": step.level,
        "duration_s": step.duration_s,
        "start_ns": step.start_ns,
        "end_ns": step.end_ns,
        "sent": step.sent,
        "requests": requests,
        "ok": ok,
        "served_rps": ok / wall_s if wall_s > 0 else None,
        "coverage": rep["coverage"],  # a step read before its last spans landed has one-sided requests
        "signals": signals(con, step.start_ns, step.end_ns),
        "tiers": tiers,
    }


def _median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def points(steps: list[dict]) -> list[dict]:
    """Steps grouped by rate (runs of one rate together), ascending: per tier, whether every run kept, the median
    and spread (min, max) of attainment and of the tail TTFT over the runs, and the pooled attainment interval."""
    by_rate: dict[float, list[dict]] = {}
    for s in steps:
        by_rate.setdefault(level(s), []).append(s)
    out = []
    for rate in sorted(by_rate):
        runs = by_rate[rate]
        tiers = {}
        for name in dict.fromkeys(t["name"] for s in runs for t in s["tiers"]):
            # a run whose tier could not be judged (UNKNOWN: no attainment) has no figure to pool
            ts = [t for s in runs for t in s["tiers"] if t["name"] == name and t["attainment"] is not None]
            if not ts:
                continue
            key = pkey(ts[0]["percentile"])
            att = [t["attainment"] for t in ts]
            ttft = [t["metrics"]["ttft_ms"][key] for t in ts]
            n = sum(t["requests"] for t in ts)
            over = [t.get("attainment_over", t["judged_requests"]) for t in ts]
            met = sum(round(t["attainment"] * o) for t, o in zip(ts, over))
            shares = [
                t["attribution"]["ttft"]["shares"]
                for t in ts
                if t["attribution"]["ttft"] and t["attribution"]["ttft"]["shares"]
            ]
            mean_shares = _mean_shares(shares)
            tiers[name] = {
                "keeps": all(t["keeps"] for t in ts),
                "runs": len(ts),
                "attainment": _median(att),
                "attainment_spread": [min(att), max(att)],
                "attainment_interval": wilson(met, sum(over)),
                "requests": n,
                "ttft": _median(ttft),
                "ttft_spread": _spread(ttft),
                "ttft_key": key,
                "ttft_shares": mean_shares,
                "ttft_dominant": max(
                    (k for k, v in mean_shares.items() if v is not None), key=mean_shares.get, default=None
                )
                if mean_shares
                else None,
                "breaches": [b for t in ts for b in t["breaches"]],
            }
        out.append(
            {
                "rate_rps": runs[0]["rate_rps"],
                "concurrency": runs[0].get("concurrency"),
                "level": rate,
                "runs": len(runs),
                "served_rps": _median([s["served_rps"] for s in runs]),
                "served_spread": _spread([s["served_rps"] for s in runs]),
                # requests with a server span, over the runs as read (None: a step without `coverage`)
                "server_spans": None
                if any("coverage" not in s for s in runs)
                else sum(s["coverage"]["with_server_spans"] for s in runs),
                "tiers": tiers,
            }
        )
    return out


def level(p: dict) -> float:
    """A step's or point's load: its concurrency in a closed-loop sweep, else its rate."""
    return p["concurrency"] if p.get("concurrency") is not None else p["rate_rps"]


def unit_of(pts: list[dict]) -> str:
    """RATE_UNIT, or CONCURRENCY_UNIT when the points are closed-loop steps."""
    return CONCURRENCY_UNIT if any(p.get("concurrency") is not None for p in pts) else RATE_UNIT


def _spread(xs: list) -> list | None:
    known = [x for x in xs if x is not None]
    return [min(known), max(known)] if known else None


def tier_capacity(pts: list[dict], name: str, target: float) -> dict:
    """Capacity, knee and takeover stage of one tier over the sweep's points (ascending levels).

    `capacity`, `first_break`, `knee` are levels in `unit`; the same figures are also under `*_rps` keys in a rate
    sweep, `*_concurrency` keys in a concurrency sweep (there `capacity_served_rps` is the ok rate at capacity)."""
    unit = unit_of(pts)
    mine = [(level(p), p["served_rps"], p["tiers"][name]) for p in pts if name in p["tiers"]]
    capacity = first_break = None
    for rate, _, t in mine:
        if not t["keeps"]:
            first_break = rate
            break
        capacity = rate
    knee, knee_reason = _knee(mine, unit)
    past = knee if knee is not None else capacity
    takeover = _takeover(mine, past, unit)
    # no server span at any level: every request is the client's alone, its whole time `unaccounted`
    stages_known = not pts or any(p.get("server_spans") != 0 for p in pts)
    at_cap = next((t for r, _, t in mine if r == capacity), None)
    at_break = next((t for r, _, t in mine if r == first_break), None)
    sfx = "rps" if unit == RATE_UNIT else "concurrency"
    out = {
        "name": name,
        "target_attainment": target,
        "unit": unit,
        "capacity": capacity,
        f"capacity_{sfx}": capacity,
        "capacity_is_lower_bound": first_break is None and capacity is not None,
        "first_break": first_break,
        f"first_break_{sfx}": first_break,
        "break_reasons": _reasons(at_break, target),
        "knee": knee,
        f"knee_{sfx}": knee,
        "knee_reason": knee_reason,
        "takeover": takeover,
        "stages_known": stages_known,
        "confidence": {
            "runs_per_rate": sorted({t["runs"] for _, _, t in mine}),
            "at_capacity": _sure(at_cap, target),
            "at_first_break": _sure(at_break, target),
        },
    }
    if unit != RATE_UNIT:
        out["capacity_served_rps"] = next((served for lv, served, _ in mine if lv == capacity), None)
    out["verdict"] = _verdict(out, mine)
    return out


def repeat_capacity(steps: list[dict], name: str, target: float) -> dict | None:
    """The tier's capacity found by each repeat alone (its own steps), and their spread, mean and 95 % Student-t
    interval of the mean; None with a single repeat. A repeat whose capacity is below its lowest level counts as
    unknown and is named; the interval is over the repeats with a number."""
    repeats = sorted({s["repeat"] for s in steps})
    if len(repeats) < 2:
        return None
    found = {
        r: tier_capacity(points([s for s in steps if s["repeat"] == r]), name, target)["capacity"] for r in repeats
    }
    known = [c for c in found.values() if c is not None]
    out = {
        "by_repeat": [found[r] for r in repeats],
        "unknown_repeats": [r for r, c in found.items() if c is None],
        "spread": _spread(known),
        "mean": sum(known) / len(known) if known else None,
        "interval_95": None,
    }
    if len(known) >= 2:
        mean = out["mean"]
        sd = math.sqrt(sum((c - mean) ** 2 for c in known) / (len(known) - 1))
        half = T_95.get(len(known) - 1, Z_95) * sd / math.sqrt(len(known))
        out["interval_95"] = [max(0.0, mean - half), mean + half]
    return out


def _sure(t: dict | None, target: float) -> dict | None:
    """How sure a point's decision is: the pooled attainment's 95 % interval against the target, and the spread."""
    if t is None:
        return None
    lo, hi = t["attainment_interval"] or (None, None)
    resolved = lo is not None and (lo >= target or hi < target)
    return {
        "runs": t["runs"],
        "requests": t["requests"],
        "attainment": t["attainment"],
        "attainment_interval": t["attainment_interval"],
        "attainment_spread": t["attainment_spread"],
        "ttft_spread": t["ttft_spread"],
        "resolved": resolved,
    }


def _breach_words(b: dict) -> str:
    """A report breach in a few words: a quantile over its budget, or the error rate over its maximum."""
    if b["kind"] == "error_rate":
        return f"error rate {100 * b['value']:.1f}% > {100 * b['budget']:g}%"
    if b["kind"] == "attainment":
        return "no request met every SLO"
    return f"{b['quantile']} {b['name']} {b['value']:.1f} ms > {b['budget']:g} ms"


def _reasons(t: dict | None, target: float) -> list[str]:
    if t is None:
        return []
    out = [_breach_words(b) for b in t["breaches"]]
    if t["attainment"] is not None and t["attainment"] < target:
        out.append(f"attainment {100 * t['attainment']:.1f}% < {100 * target:g}%")
    return list(dict.fromkeys(out))


def _knee(mine: list[tuple], unit: str = RATE_UNIT) -> tuple[float | None, str]:
    """The last level before the tail TTFT turns up (see the module docstring), and why."""
    if len(mine) < 2:
        return None, "fewer than two rates: no knee can be told"
    base = mine[0][2]["ttft"]
    later = [t["ttft"] for _, _, t in mine]
    for i, ((r0, _, t0), (r1, served1, t1)) in enumerate(zip(mine, mine[1:])):
        l0, l1 = t0["ttft"], t1["ttft"]
        if unit == RATE_UNIT and served1 is not None and served1 < SERVED_FRACTION * r1:
            return r0, (
                f"at {r1:g} req/s the server served {served1:.2f} req/s ok, under "
                f"{100 * SERVED_FRACTION:.0f}% of the offered rate"
            )
        if l1 is None:
            return r0, f"at {r1:g} {unit} no request of the tier ended ok"
        if l0 and base and l0 > 0:
            e = math.log(l1 / l0) / math.log(r1 / r0)
            # a turn that the higher rates undo was a hiccup (one slow request is the p99 of a short step)
            stays = all(x is None or x >= KNEE_GROWTH * base for x in later[i + 1 :])
            if e > KNEE_ELASTICITY and l1 >= KNEE_GROWTH * base and stays:
                return r0, (
                    f"{t1['ttft_key']} TTFT went {l0:.0f} → {l1:.0f} ms from {r0:g} to {r1:g} {unit} "
                    f"(elasticity {e:.2f} > {KNEE_ELASTICITY:g}; {l1 / base:.1f}× the lightest rate's)"
                )
    swept = "rates" if unit == RATE_UNIT else "concurrencies"
    return None, f"the tail TTFT did not turn up within the {swept} swept (up to {mine[-1][0]:g} {unit})"


def _takeover(mine: list[tuple], past: float | None, unit: str = RATE_UNIT) -> dict | None:
    """The dominant stage of the TTFT tail at the first rate past `past` (else the highest rate), with its share
    there and the same stage's share at the lightest rate."""
    if not mine:
        return None
    above = [(r, t) for r, _, t in mine if past is not None and r > past]
    rate, t = above[0] if above else (mine[-1][0], mine[-1][2])
    if not t["ttft_shares"]:
        return None
    stage = t["ttft_dominant"]
    low_rate, low = mine[0][0], mine[0][2]
    out = {
        "metric": "ttft",
        "stage": stage,
        "share": t["ttft_shares"][stage],
        "at": rate,
        "above": past if past is not None and rate > past else None,
        "shares": t["ttft_shares"],
        "low": low_rate,
        "low_share": (low["ttft_shares"] or {}).get(stage) if low["ttft_shares"] else None,
    }
    if unit == RATE_UNIT:  # the keys of rate sweeps before concurrency sweeps existed
        out.update(at_rps=out["at"], above_rps=out["above"], low_rps=out["low"])
    return out


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _verdict(c: dict, mine: list[tuple]) -> str:
    name = c["name"]
    if not mine:
        return f"Tier {name}: no request of this tier in the sweep."
    u = c["unit"]
    word = "rate" if u == RATE_UNIT else "concurrency"
    if c["capacity"] is None:
        head = (
            f"Tier {name} breaks its budgets already at the lightest {word}, {mine[0][0]:g} {u} "
            f"({'; '.join(c['break_reasons']) or 'see the steps'})."
        )
    elif c["capacity_is_lower_bound"]:
        head = f"Tier {name} keeps its budgets at every {word} swept, up to {c['capacity']:g} {u} (capacity is higher)."
    else:
        head = (
            f"Tier {name} keeps its budgets up to {c['capacity']:g} {u} and breaks them at "
            f"{c['first_break']:g} {u} ({'; '.join(c['break_reasons'])})."
        )
    if c.get("capacity_served_rps") is not None:
        head += f" At {c['capacity']:g} {u} it served {c['capacity_served_rps']:.2f} req/s ok."
    knee = (
        f" Knee at {c['knee']:g} {u}: {c['knee_reason']}."
        if c["knee"] is not None
        else f" No knee: {c['knee_reason']}."
    )
    t = c["takeover"]
    take = ""
    if not c.get("stages_known", True):
        take = (
            " No server span reached the sweep: the stages are unknown, and the tail's time is the client's alone "
            "(`unaccounted`); export the server's spans to the sweep's collector to see which stage takes over."
        )
    elif t is not None:
        where = f"Above {t['above']:g} {u}" if t["above"] is not None else f"At {t['at']:g} {u}"
        take = (
            f" {where} {t['stage']} is {_pct(t['share'])} of the TTFT tail "
            f"(at {t['at']:g} {u}; {_pct(t['low_share'])} at {t['low']:g} {u})."
        )
    return head + knee + take


def analyze(con, budgets: Budgets | None, run: str | None = None, target_attainment: float | None = None) -> dict:
    """The capacity result of one sweep run (the last one when `run` is None): steps, points and per-tier
    capacity, knee and takeover. `{"run": None, ...}` with no steps when the archive holds no sweep. Without
    budgets, every tier found is analysed with none (it keeps them; attainment is then the share that ended ok)."""
    if budgets is None:
        budgets = Budgets(tuple(TierBudget(name=t) for t in discovered_tiers(con)))
    runs = sweep_runs(con)
    if run is None:
        run = runs[-1] if runs else None
    found = sweep_steps(con, run) if run else []
    steps = [step_figures(con, s, budgets, target_attainment) for s in found]
    pts = points(steps)
    names = [tb.name for tb in budgets.tiers]
    tiers = []
    for tb in budgets.tiers:
        target = target_attainment if target_attainment is not None else tb.percentile / 100
        tiers.append(tier_capacity(pts, tb.name, target) | {"repeats": repeat_capacity(steps, tb.name, target)})
    return {
        "run": run,
        "runs": runs,
        "target": found[0].target if found else None,
        "unit": unit_of(pts),
        "budgets_file": budgets.path,
        "tier_names": names,
        "rates": [p["rate_rps"] for p in pts],
        "steps": steps,
        "points": pts,
        "tiers": tiers,
    }
