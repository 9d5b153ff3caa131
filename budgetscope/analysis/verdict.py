"""One plain-English paragraph per tier: what broke, how much, and where the tail's time went."""

from __future__ import annotations

LABEL = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E"}
STAGE_WORD = {"network": "network", "frontend": "frontend", "queue": "queueing", "prefill": "prefill",
              "decode": "decode", "postprocess": "postprocessing", "unaccounted": "unaccounted time"}


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
    first, second = a["top"][0], a["top"][1] if len(a["top"]) > 1 else None
    head = (f"{_pct(sh[first])} of the {name} tail's excess over the median request is {STAGE_WORD[first]} "
            f"(tail mean {ms(a['tail_mean_ms'][first])} vs {ms(a['body_mean_ms'][first])})")
    if a["verdict"] == "mixed" and second:
        head += f", with {STAGE_WORD[second]} next at {_pct(sh[second])}: a mixed tail"
    elif second and sh[second] >= 0.05:  # a runner-up under 5% is noise, not a finding
        head += f"; next is {STAGE_WORD[second]} at {_pct(sh[second])}"
    if a["tail_widened"]:
        head += f" (the tail is the {a['tail_size']} slowest requests: too few lie above the percentile)"
    return head + "."


def verdict(t: dict) -> str:
    """The verdict paragraph of a tier entry built by `budgetscope.analysis.report`."""
    if not t["requests"]:
        return f"{t['name']}: no requests matched this tier."
    if not t["ok_requests"]:
        return f"{t['name']}: none of its {t['requests']} requests ended ok ({t['outcomes']})."
    key = f"p{t['percentile']:g}"
    parts = []
    broken = [b for b in t["breaches"] if b["kind"] == "metric"]
    if broken:
        parts.append(f"{t['name']} breaks its budget: " + "; ".join(
            f"{key} {LABEL[b['name']]} {ms(b['value'])} vs {ms(b['budget'])}" for b in broken) + ".")
    elif any(v["budget"] is not None for v in t["metrics"].values()):
        kept = [f"{key} {LABEL[m]} {ms(v[key])} ≤ {ms(v['budget'])}" for m, v in t["metrics"].items()
                if v["budget"] is not None]
        parts.append(f"{t['name']} keeps its budgets: " + "; ".join(kept) + ".")
    else:
        parts.append(f"{t['name']}: {key} TTFT {ms(t['metrics']['ttft_ms'][key])}, "
                     f"{key} E2E {ms(t['metrics']['e2e_ms'][key])} (no budget declared).")
    lead = "ttft" if not broken or any(b["name"] == "ttft_ms" for b in broken) else "e2e"
    for kind in (lead, "e2e" if lead == "ttft" else "ttft"):
        s = _attribution_sentence(kind, t["attribution"].get(kind))
        if s:
            parts.append(s)
        if kind == lead and t["contrast"].get(kind):
            c = t["contrast"][kind][0]
            parts.append(f"What sets that tail apart most: {c['dimension']} = {c['value']} "
                         f"({_pct(c['tail_share'])} of the tail vs {_pct(c['body_share'])} of the body).")
        if kind == lead:
            continue
    stage_broken = [b for b in t["breaches"] if b["kind"] == "stage"]
    if stage_broken:
        parts.append("Stage budgets broken: " + "; ".join(
            f"{b['name']} {key} {ms(b['value'])} vs {ms(b['budget'])}" for b in stage_broken) + ".")
    if t["attainment"] is not None and any(v["budget"] is not None for v in t["metrics"].values()):
        parts.append(f"{100 * t['attainment']:.1f}% of requests met every SLO (goodput).")
    if (t.get("queue_wait") or {}).get("sentence"):  # only for a queue-dominated TTFT tail
        parts.append(t["queue_wait"]["sentence"])
    if (t.get("gpu") or {}).get("sentence"):  # only when GPU samples fall in the tail's decode
        parts.append(t["gpu"]["sentence"])
    if t["figures"] == "server" and t["requests_without_client_span"]:
        parts.append(f"Network time is unknown: {t['requests_without_client_span']} of {t['ok_requests']} requests "
                     "have no client span, so server-side figures are used.")
    return " ".join(parts)
