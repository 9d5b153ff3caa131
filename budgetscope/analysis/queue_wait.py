"""What a queue-dominated TTFT tail waited on, from the engine's steps (or, without them, its `/metrics`).

The TTFT tail's requests (as the attribution takes them) are joined by their queue intervals, [arrival + frontend,
+ queue], with the `engine_steps` that overlap them. While those requests waited, a new request could not be
scheduled because (docs/report.md, "What the queue waited on"):

- `kv_blocks`: the KV pool was full: mean use ≥ KV_FULL of its blocks over those steps, or sequences were
  preempted in them (an engine preempts only when the pool runs out);
- `batch_slots`: every running slot was taken: ≥ BOUND_SHARE of the steps ran `max_seqs` sequences;
- `token_budget`: the step's token budget was spent: ≥ BOUND_SHARE of the steps scheduled `token_budget` tokens;
- `long_prefill_steps`: the steps that carry a prefill ran long: their median ≥ LONG_STEP_RATIO × the
  decode-only steps' median, and they took ≥ LONG_STEP_TIME_SHARE of the steps' time, so the queue drained at
  the pace of those steps.

Every reason that holds is named, in that order. `max_seqs` and `token_budget` are step attributes of
budgetscope's engine since 2026-11-26; without them (older recordings, other servers) those two are unknown, said
so. Without engine steps, a server's KV-use gauge in `server_metrics` (vLLM `vllm:kv_cache_usage_perc` or the
older `vllm:gpu_cache_usage_perc`, SGLang `sglang:token_usage`) answers `kv_blocks` alone.
"""

from __future__ import annotations

from budgetscope.analysis.coverage import KV_GAUGES
from budgetscope.analysis.gpu import KV_FULL
from budgetscope.analysis.selection import Selection, ok_where
from budgetscope.analysis.verdict import ms

BOUND_SHARE = 0.5  # share of the overlapping steps at a limit for that limit to be what the queue waited on
LONG_STEP_RATIO = 4.0  # a prefill-carrying step this many times a decode-only step's median is "long"
LONG_STEP_TIME_SHARE = 0.25  # ... and such steps take at least this share of the steps' time
REASON_WORDS = {
    "kv_blocks": "KV blocks (the pool was {kv_used_mean} full on average{preemptions})",
    "batch_slots": "batch slots (all {max_seqs} taken in {slots_full_share} of the steps)",
    "token_budget": "the step's token budget ({token_budget} tokens spent in {budget_full_share} of the steps)",
    "long_prefill_steps": (
        "steps that carry a prefill, which ran long: median {prefill_step_ms} against "
        "{decode_step_ms} for decode-only steps, {prefill_time_share} of the time"
    ),
}

_INTERVALS = (
    "SELECT arrival_ns + CAST(coalesce(ttft_frontend_ms, 0) * 1e6 AS BIGINT) AS s, "
    "arrival_ns + CAST((coalesce(ttft_frontend_ms, 0) + ttft_queue_ms) * 1e6 AS BIGINT) AS e "
    "FROM requests {where} AND arrival_ns IS NOT NULL AND ttft_queue_ms > 0"
)


def step_figures(con, intervals_sql: str, params: list) -> dict:
    """Engine-step figures over the steps that overlap the intervals (`s`, `e` ns) `intervals_sql` selects: step
    count, mean and max KV use (0–1), preemptions, the share of steps at `max_seqs` / at `token_budget` (None where the steps do
    not record the limit), the limits, and the median ms and time share of prefill-carrying vs decode-only steps."""
    # shares as doubles (1e0): Spark averages a 1.0 literal, a DECIMAL, into a DECIMAL
    # a single-file archive written before the limits were kept stores the older engine_steps view
    cols = {d[0] for d in con.execute("SELECT * FROM engine_steps LIMIT 0").description}
    limits = ", ".join(c if c in cols else f"CAST(NULL AS BIGINT) AS {c}" for c in ("max_seqs", "token_budget"))
    (
        (
            steps,
            kv_mean,
            kv_max,
            preempted,
            max_seqs,
            slots_full,
            token_budget,
            budget_full,
            pf_ms,
            dec_ms,
            pf_time,
            all_time,
        ),
    ) = con.execute(
        f"""
        WITH iv AS ({intervals_sql}),
        st AS (SELECT st.start_ns, st.end_ns, st.batch_size, st.prefill_tokens, st.decode_seqs, st.kv_blocks_used,
                      st.kv_blocks_total, st.preempted, {limits}, (st.end_ns - st.start_ns) / 1e6 AS ms
               FROM engine_steps st SEMI JOIN iv ON st.start_ns <= iv.e AND st.end_ns >= iv.s)
        SELECT count(*), avg(kv_blocks_used / nullif(kv_blocks_total, 0)),
          max(kv_blocks_used / nullif(kv_blocks_total, 0)), sum(preempted),
          max(max_seqs), avg(CASE WHEN batch_size >= max_seqs THEN 1e0 ELSE 0e0 END) FILTER (WHERE max_seqs > 0),
          max(token_budget),
          avg(CASE WHEN prefill_tokens + decode_seqs >= token_budget THEN 1e0 ELSE 0e0 END)
            FILTER (WHERE token_budget > 0),
          quantile_cont(ms, 0.5) FILTER (WHERE prefill_tokens > 0),
          quantile_cont(ms, 0.5) FILTER (WHERE prefill_tokens = 0),
          sum(ms) FILTER (WHERE prefill_tokens > 0), sum(ms)
        FROM st""",
        params,
    ).fetchall()
    return {
        "engine_steps": steps,
        "kv_used_mean": kv_mean,
        "kv_used_max": kv_max,
        "preempted": int(preempted) if preempted is not None else None,
        "max_seqs": max_seqs,
        "slots_full_share": slots_full,
        "token_budget": token_budget,
        "budget_full_share": budget_full,
        "prefill_step_ms": pf_ms,
        "decode_step_ms": dec_ms,
        "prefill_time_share": (pf_time or 0.0) / all_time if all_time else None,
    }


def metric_figures(con, intervals_sql: str, params: list) -> dict:
    """Without engine steps: the mean of a server's KV-use gauge (0–1) inside the intervals, None when absent."""
    names = ", ".join(f"'{m}'" for m in KV_GAUGES)
    ((n, kv_mean, kv_max),) = con.execute(
        f"""
        WITH iv AS ({intervals_sql})
        SELECT count(*), avg(m.value), max(m.value) FROM server_metrics m SEMI JOIN iv ON m.ts_ns >= iv.s
        AND m.ts_ns <= iv.e WHERE m.metric IN ({names})""",
        params,
    ).fetchall()
    return {"metric_samples": n, "kv_used_mean": kv_mean, "kv_used_max": kv_max}


def waited_on(f: dict) -> list[str]:
    """The limits that held while the tail queued (`step_figures` or `metric_figures`), in REASON_WORDS' order."""
    out = []
    if (f.get("kv_used_mean") is not None and f["kv_used_mean"] >= KV_FULL) or f.get("preempted"):
        out.append("kv_blocks")
    if f.get("slots_full_share") is not None and f["slots_full_share"] >= BOUND_SHARE:
        out.append("batch_slots")
    if f.get("budget_full_share") is not None and f["budget_full_share"] >= BOUND_SHARE:
        out.append("token_budget")
    pf, dec = f.get("prefill_step_ms"), f.get("decode_step_ms")
    if (
        pf is not None
        and dec
        and pf >= LONG_STEP_RATIO * dec
        and (f["prefill_time_share"] or 0) >= LONG_STEP_TIME_SHARE
    ):
        out.append("long_prefill_steps")
    return out


def sentence(q: dict) -> str:
    """One sentence for the verdict."""
    f = q["figures"]
    if not q["waited_on"]:
        return f"What the TTFT tail queued behind is unknown: {q['reason']}."
    words = {
        k: (
            f"{100 * v:.0f}%"
            if k.endswith("share") or k.startswith("kv_used")
            else ms(v)
            if k.endswith("_ms")
            else f"{v:,}"
        )
        for k, v in f.items()
        if isinstance(v, (int, float))
    }
    words["preemptions"] = f", {f['preempted']:,} preemptions" if f.get("preempted") else ""
    said = [REASON_WORDS[r].format(**words) for r in q["waited_on"]]
    text = "The TTFT tail queued behind " + "; and ".join(said)
    if q.get("not_recorded"):
        text += f" ({' and '.join(q['not_recorded'])} not recorded, so not judged)"
    return text + "."


def tail_queue_wait(con, sel: Selection, entry: dict, present: dict[str, bool]) -> dict | None:
    """The `queue_wait` key of a report tier entry, for a TTFT tail whose largest share is queueing (else None):
    `waited_on` (the reasons of the module docstring), `figures`, `reason` when none is known, `sentence`.
    `present` (coverage.contents) saves the joins of tables that hold nothing."""
    a = (entry.get("attribution") or {}).get("ttft")
    if a is None or a["shares"] is None or a["dominant"] != "queue":
        return None
    where = ok_where(sel, a["metric"])
    intervals = _INTERVALS.format(where=where) + f" AND {a['metric']} >= ?"
    params = [*sel.params, a["tail_min_ms"]]
    f = step_figures(con, intervals, params) if present["engine_steps"] else {"engine_steps": 0}
    if f["engine_steps"]:
        source = "engine_steps"
        not_recorded = [
            w for k, w in (("max_seqs", "batch slots"), ("token_budget", "the token budget")) if f[k] is None
        ]
    else:
        f = (
            metric_figures(con, intervals, params)
            if present["kv_gauges"]
            else {"metric_samples": 0, "kv_used_mean": None, "kv_used_max": None}
        )
        source = "server_metrics" if f["metric_samples"] else None
        not_recorded = ["batch slots", "the token budget", "step times"]
    found = waited_on(f)
    out = {
        "waited_on": found,
        "source": source,
        "figures": f,
        "not_recorded": not_recorded,
        "thresholds": {
            "kv_full": KV_FULL,
            "bound_share": BOUND_SHARE,
            "long_step_ratio": LONG_STEP_RATIO,
            "long_step_time_share": LONG_STEP_TIME_SHARE,
        },
    }
    if not found:
        out["reason"] = (
            "no engine steps and no KV-use gauge in the archive while the tail queued"
            if source is None
            else "none of KV blocks, batch slots, the token budget or long prefill steps stood out"
        )
    out["sentence"] = sentence(out)
    return out
