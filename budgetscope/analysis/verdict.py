"""One plain-English paragraph per tier: what broke, how much, and where the tail's time went."""

from __future__ import annotations

LABEL = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E"}
STAGE_WORD = {
    "network": "network",
    "frontend": "frontend",
    "queue": "queueing",
    "prefill": "prefill",
    "decode": "decode",
    "postprocess": "postprocessing",
    "unaccounted": "unaccounted time",
    "content_gap": "waiting for content (first stream event → first non-empty chunk)",
}


def ms(v: float | None) -> str:
    """A duration for people: 840 ms, 2.41 s."""
    if v is None:
        return "n/a"
    return f"{v / 1000:.2f} s" if abs(v) >= 1000 else f"{v:.0f} ms" if abs(v) >= 10 else f"{v:.1f} ms"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _attribution_sentence(kind: str, a: dict | None) -> str | None:
    if a is None:
        return None
    name = "TTFT" if kind == "ttft" else "E2E"
    if a["shares"] is None:
        return f"The {name} tail is no slower than the median request, so there is nothing to attribute."
    sh = a["shares"]
    unknown = a.get("unknown_share") or 0.0
    if not a["top"]:
        return f"The {name} tail's excess lies in parts these spans do not tell apart."
    first, second = a["top"][0], a["top"][1] if len(a["top"]) > 1 else None
    head = (
        f"{_pct(sh[first])} of the {name} tail's excess over the median request is {STAGE_WORD[first]} "
        f"(tail mean {ms(a['tail_mean_ms'][first])} vs {ms(a['body_mean_ms'][first])})"
    )
    if a["verdict"] == "mixed" and second:
        head += f", with {STAGE_WORD[second]} next at {_pct(sh[second])}: a mixed tail"
    elif second and sh[second] >= 0.05:  # a runner-up under 5% is noise, not a finding
        head += f"; next is {STAGE_WORD[second]} at {_pct(sh[second])}"
    if unknown >= 0.005:  # the parts do not add up to the metric: say how much is unknown, never spread it
        head += f"; {_pct(unknown)} of it lies in parts unknown for some requests (null in the table)"
    if a["tail_widened"]:
        head += f" (the tail is the {a['tail_size']} slowest requests: too few lie above the percentile)"
    return head + "."


PLURAL = {"error": "errors", "timeout": "timeouts"}
"""Outcomes whose count reads with a plural noun ("20 errors"); the others are adjectives ("3 rejected")."""


def outcomes_words(outcomes: dict) -> str:
    """{"error": 20, "timeout": 1} → "20 errors, 1 timeout", most first (a NULL outcome is "unknown")."""

    def words(o, n: int) -> str:
        name = o or "unknown"
        return f"{n:,} {PLURAL.get(name, name) if n != 1 else name}"

    return ", ".join(words(o, n) for o, n in sorted(outcomes.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def _error_sentence(t: dict) -> str | None:
    """The failures, in words, and whether they break the tier's error budget."""
    failed = {o: n for o, n in t["outcomes"].items() if o not in ("ok", "cancelled")}
    if not failed:
        return None
    rate, allowed = t["error_rate"], t["max_error_rate"]
    budget = "max_error_rate" if t["max_error_rate_declared"] else f"the default for p{t['percentile']:g}"
    head = (
        f"{sum(failed.values()):,} of {t['judged_requests']:,} requests failed ({outcomes_words(failed)}): "
        f"error rate {_pct1(rate)}"
    )
    if any(b["kind"] == "error_rate" for b in t["breaches"]):
        return f"{head} vs {_pct1(allowed)} allowed ({budget}), a breach; failed requests miss every SLO."
    return f"{head}, within {_pct1(allowed)} ({budget}); failed requests miss every SLO."


def _pct1(x: float) -> str:
    return f"{100 * x:.1f}%" if 100 * x >= 0.1 or not x else f"{100 * x:.2g}%"


def _headline(t: dict, key: str) -> str:
    """The first sentence: what broke, that the figures are unknown, that the budgets hold, or the figures."""
    broken = [b for b in t["breaches"] if b["kind"] == "metric"]
    budgeted = {m: v for m, v in t["metrics"].items() if v["budget"] is not None}
    if broken:
        return (
            f"{t['name']} breaks its budget: "
            + "; ".join(f"{key} {LABEL[b['name']]} {ms(b['value'])} vs {ms(b['budget'])}" for b in broken)
            + "."
        )
    if t["breaches"]:
        what = {
            "error_rate": "too many of its requests failed",
            "stage": "a stage budget broke",
            "attainment": "no ok request met every SLO",
        }
        kinds = dict.fromkeys(b["kind"] for b in t["breaches"])
        return f"{t['name']} breaks its budget: " + "; ".join(what[k] for k in kinds) + "."
    if t["status"] == "UNKNOWN":
        return f"{t['name']}: its budgets cannot be judged: {t['unknown_reason']}."
    if budgeted:
        kept = [f"{key} {LABEL[m]} {ms(v[key])} ≤ {ms(v['budget'])}" for m, v in budgeted.items()]
        return f"{t['name']} keeps its budgets: " + "; ".join(kept) + "."
    return (
        f"{t['name']}: {key} TTFT {ms(t['metrics']['ttft_ms'][key])}, "
        f"{key} E2E {ms(t['metrics']['e2e_ms'][key])} (no budget declared)."
    )


def verdict(t: dict) -> str:
    """The verdict paragraph of a tier entry built by `budgetscope.analysis.report`."""
    if not t["requests"]:
        return f"{t['name']}: no requests matched this tier, so its budgets cannot be judged."
    key = f"p{t['percentile']:g}"
    if not t["ok_requests"]:
        ended = f"None of its {t['requests']:,} requests ended ok ({outcomes_words(t['outcomes'])})."
        return f"{_headline(t, key)} {_error_sentence(t) or ended}"
    parts = [_headline(t, key)]
    if s := _error_sentence(t):
        parts.append(s)
    broken = [b for b in t["breaches"] if b["kind"] == "metric"]
    lead = "ttft" if not broken or any(b["name"] == "ttft_ms" for b in broken) else "e2e"
    for kind in (lead, "e2e" if lead == "ttft" else "ttft"):
        s = _attribution_sentence(kind, t["attribution"].get(kind))
        if s:
            parts.append(s)
        if kind == lead and t["contrast"].get(kind):
            c = t["contrast"][kind][0]
            parts.append(
                f"What sets that tail apart most: {c['dimension']} = {c['value']} "
                f"({_pct(c['tail_share'])} of the tail vs {_pct(c['body_share'])} of the body)."
            )
        if kind == lead:
            continue
    stage_broken = [b for b in t["breaches"] if b["kind"] == "stage"]
    if stage_broken:
        parts.append(
            "Stage budgets broken: "
            + "; ".join(f"{b['name']} {key} {ms(b['value'])} vs {ms(b['budget'])}" for b in stage_broken)
            + "."
        )
    if t["attainment"] is not None and any(v["budget"] is not None for v in t["metrics"].values()):
        over = t.get("attainment_over", t["judged_requests"])
        which = "" if over == t["judged_requests"] else f" of the {over:,} whose budgeted figures are known"
        parts.append(
            f"{100 * t['attainment']:.1f}% of requests{which} met every SLO (goodput); the percentiles are "
            f"over the {t['ok_requests']:,} ok requests."
        )
    if t.get("misread_requests"):
        parts.append(
            f"{t['misread_requests']:,} of its requests break an invariant of their format (their figures may be "
            "misread: see the report's coverage lines)."
        )
    if (t.get("queue_wait") or {}).get("sentence"):  # only for a queue-dominated TTFT tail
        parts.append(t["queue_wait"]["sentence"])
    if (t.get("gpu") or {}).get("sentence"):  # only when GPU samples fall in the tail's decode
        parts.append(t["gpu"]["sentence"])
    if t["figures"] == "server" and t["requests_without_client_span"]:
        parts.append(
            f"Network time is unknown: {t['requests_without_client_span']} of {t['ok_requests']} requests "
            "have no client span, so server-side figures are used."
        )
    return " ".join(parts)
