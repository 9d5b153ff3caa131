"""The capacity result (`capacity.analyze`) as terminal text: one table of rates, one of saturation signals,
and each tier's capacity, knee and takeover stage in a sentence."""

from __future__ import annotations

from budgetscope.analysis.capacity import RATE_UNIT, level
from budgetscope.analysis.render import _table

SIGNAL_NOTE = {"engine_steps": "engine_steps", "metrics": "/metrics", None: "none"}


def _ms(x) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _num(x, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def render_text(res: dict) -> str:
    """The whole result as lines of text."""
    if not res["steps"]:
        return "no sweep steps in this archive\n"
    unit = res.get("unit", RATE_UNIT)
    head = "rate/s" if unit == RATE_UNIT else "concurrency"
    out = [
        f"sweep {res['run']} of {res.get('target') or 'the target'}: {len(res['points'])} "
        f"{'rates' if unit == RATE_UNIT else 'concurrencies'}, "
        f"{len(res['steps'])} steps"
        + (f" of {res['duration_s']:g} s" if res.get("duration_s") else "")
        + (f"; archive {res['archive']}" if res.get("archive") else ""),
        "",
    ]
    for tier in res["tiers"]:
        name = tier["name"]
        rows = []
        for p in res["points"]:
            t = p["tiers"].get(name)
            if t is None:
                continue
            sh = t["ttft_shares"] or {}
            lo, hi = t["attainment_spread"]
            spread = "" if p["runs"] == 1 else f" ({100 * lo:.0f}-{100 * hi:.0f})"
            rows.append(
                [
                    f"{level(p):g}",
                    f"{p['served_rps']:.2f}" if p["served_rps"] is not None else "n/a",
                    str(t["requests"]),
                    _pct(t["attainment"]) + spread,
                    _ms(t["ttft"]),
                    _pct(sh.get("queue")),
                    _pct(sh.get("prefill")),
                    f"{t['ttft_dominant']} {_pct(sh.get(t['ttft_dominant']))}" if t["ttft_dominant"] else "-",
                    "keeps" if t["keeps"] else "BREAKS",
                ]
            )
        key = next((p["tiers"][name]["ttft_key"] for p in res["points"] if name in p["tiers"]), "p99")
        out.append(f"tier {name} (target attainment {100 * tier['target_attainment']:g}%)")
        out += _table(
            [
                head,
                "served ok/s",
                "requests",
                "attainment",
                f"{key} TTFT ms",
                "queue share",
                "prefill share",
                "TTFT tail dominant",
                "budgets",
            ],
            rows,
        )
        out += ["", tier["verdict"]] + _repeats_line(tier) + [""]
    rows = []
    for s in sorted(res["steps"], key=lambda s: (level(s), s["repeat"])):
        g = s["signals"]
        rows.append(
            [
                f"{level(s):g}",
                SIGNAL_NOTE.get(g.get("source"), "?"),
                f"{_num(g.get('batch_mean'))} / {_num(g.get('batch_max'), '{:.0f}')}",
                f"{_num(g.get('queue_p99', g.get('queue_mean')))} / {_num(g.get('queue_max'), '{:.0f}')}",
                _pct(g.get("kv_max")),
                _num(g.get("preemptions"), "{:.0f}"),
            ]
        )
    out.append("saturation signals of the server, per step")
    out += _table([head, "from", "batch mean / max", "queue p99 (mean) / max", "KV max", "preemptions"], rows)
    if res.get("search"):
        out += ["", "search: " + "; ".join(f"{e['rate_rps']:g} ({e['why']})" for e in res["search"]["log"])]
        for tier in res["tiers"]:
            out.append(f"  {tier['name']}: {_sure_line(tier)}")
    return "\n".join(out) + "\n"


def _repeats_line(tier: dict) -> list[str]:
    """One line on the capacity each repeat found alone, when there were several."""
    r = tier.get("repeats")
    if not r:
        return []
    found = ", ".join("below the lowest" if c is None else f"{c:g}" for c in r["by_repeat"])
    line = f"Repeats: capacity per repeat ({tier['unit']}) {found}"
    if r["interval_95"] is not None:
        lo, hi = r["interval_95"]
        line += f"; mean {r['mean']:.2f}, 95% interval {lo:.2f}-{hi:.2f} (Student t over {len(r['by_repeat'])} repeats)"
    elif r["spread"] is not None:
        line += f"; spread {r['spread'][0]:g}-{r['spread'][1]:g}"
    return [line + "."]


def _sure_line(tier: dict) -> str:
    c = tier["confidence"]
    parts = [f"runs per rate {', '.join(map(str, c['runs_per_rate'])) or '-'}"]
    for label, key in (("at capacity", "at_capacity"), ("at first break", "at_first_break")):
        s = c[key]
        if s is None:
            continue
        lo, hi = s["attainment_interval"] or (0, 0)
        parts.append(
            f"{label}: attainment {_pct(s['attainment'])} (95% interval {100 * lo:.0f}-{100 * hi:.0f}% over "
            f"{s['requests']} requests, {'decided' if s['resolved'] else 'NOT decided: run longer'})"
        )
    return "; ".join(parts)
