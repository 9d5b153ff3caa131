"""Render a report dict as a terminal table or as markdown. Presentation only: no math here."""

from __future__ import annotations

from budgetscope.analysis.coverage import ROW_FLAGS, coverage_line, flagged_line, orphan_line, unclaimed_line
from budgetscope.analysis.display import utc
from budgetscope.analysis.slo import figure_label
from budgetscope.analysis.verdict import LABEL, ms


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return out


def _status(value, budget) -> str:
    if budget is None or value is None:
        return ""
    return "OK" if value <= budget else "BROKEN"


def _share(x) -> str:
    return "" if x is None else f"{100 * x:.0f}%"


def _cell(a: dict | None, stage: str) -> str:
    """A stage's share in an attribution: blank where the attribution has no such stage (or none at all), `null`
    where the stage is one of its parts but unknown (never 0)."""
    if not a or not a["shares"] or stage not in a["shares"]:
        return ""
    return "null" if a["shares"][stage] is None else _share(a["shares"][stage])


def _tier_blocks(t: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    key = f"p{t['percentile']:g}"
    pcols = [k for k in t["metrics"]["ttft_ms"] if k.startswith("p")]
    metric_rows = [
        [
            LABEL[m],
            v["column"],
            *(ms(v[p]) for p in pcols),
            ms(v["budget"]) if v["budget"] else "-",
            _status(v[key], v["budget"]),
        ]
        for m, v in t["metrics"].items()
    ]
    spcols = [k for k in next(iter(t["stages"].values())) if k.startswith("p")]
    stage_rows = [
        [s, *(ms(v[p]) for p in spcols), ms(v["budget"]) if v["budget"] else "-", _status(v[key], v["budget"])]
        for s, v in t["stages"].items()
    ]
    blocks = [
        ("metrics", ["metric", "figure", *pcols, "budget", "status"], metric_rows),
        ("stages", ["stage", *spcols, "budget", "status"], stage_rows),
    ]
    ta, ea = t["attribution"].get("ttft"), t["attribution"].get("e2e")
    stages = list(dict.fromkeys([*((ea or {}).get("shares") or {}), *((ta or {}).get("shares") or {})]))
    if stages:
        rows = [[s, _cell(ta, s), _cell(ea, s)] for s in stages]
        if any((a or {}).get("unknown_share") for a in (ta, ea)):
            rows.append(["(unknown)", *(_share((a or {}).get("unknown_share") or None) for a in (ta, ea))])
        blocks.append(
            (
                "tail attribution (share of the tail's excess over the median)",
                ["stage", f"TTFT (tail {ta['tail_size'] if ta else 0})", f"E2E (tail {ea['tail_size'] if ea else 0})"],
                rows,
            )
        )
    if burn := burn_table(t.get("burn_rates")):
        blocks.append(burn)
    return blocks


def burn_rate_text(x: float | None) -> str:
    """A burn rate for people: `16.0×`, `0.25×`; `-` when the window judged no request."""
    return "-" if x is None else f"{x:.1f}×" if x >= 10 else f"{x:.2f}×"


def burn_table(rates: dict | None) -> tuple[str, list[str], list[list[str]]] | None:
    """(title, headers, rows) of a tier's burn rates (`report`'s `burn_rates`): one row a budgeted figure, its
    burn rate over each window and the error budget left over the report's range; None without budgets."""
    if not rates:
        return None
    windows = list(rates["windows"])
    rows = []
    for f, v in rates["figures"].items():
        left = v["period"]["budget_left"]
        rows.append(
            [
                figure_label(f),
                ms(v["budget_ms"]),
                *(burn_rate_text(v["windows"][w]["burn_rate"]) for w in windows),
                "-" if left is None else f"{100 * left:.0f}%",
                f"{v['period']['judged']:,}",
            ]
        )
    title = (
        f"burn rates (error budget {100 * rates['error_budget']:g}% of judged requests; windows ending "
        f"{utc(rates['end_ns'])})"
    )
    return title, ["figure", "budget", *windows, "budget left", "judged"], rows


def _attainment(t: dict) -> str:
    return "n/a" if t["attainment"] is None else f"{100 * t['attainment']:.1f}%"


def _error_rate(t: dict) -> str:
    return "n/a" if t["error_rate"] is None else f"{100 * t['error_rate']:.1f}%"


def _summary(t: dict) -> str:
    """The figures of a tier's heading line; says that the percentiles are over the ok requests."""
    return (
        f"{t['requests']} requests ({t['ok_requests']} ok), p{t['percentile']:g} over the ok requests, "
        f"attainment {_attainment(t)}, error rate {_error_rate(t)} (max {100 * t['max_error_rate']:g}%), "
        f"{t['figures']}-side figures"
    )


def report_lines(report: dict, coverage: bool = True, misread: bool = True) -> list[str]:
    """What the report read and could not: its status when UNKNOWN, its coverage, the spans no adapter claimed, the
    misread requests, the llm-d legs that lost their trace, the traces split across shards. `coverage=False`,
    `misread=False` leave out the coverage line and the misread requests' lines (where they are said elsewhere)."""
    out = []
    if report["status"] == "UNKNOWN":
        out.append(f"UNKNOWN: {report['unknown_reason']}")
    if coverage:
        out.append(coverage_line(report["coverage"]))
    if line := unclaimed_line(report["unclaimed_spans"]):
        out.append(line)
    if misread:
        out += [line for k in ROW_FLAGS if k in report and (line := flagged_line(k, report[k]))]
    if line := orphan_line(report.get("llmd_orphans")):
        out.append(line)
    if n := report.get("split_traces"):
        out.append(
            f"{n:,} traces had spans on more than one shard; each was derived from all its spans, joined across "
            "shards (docs/archive.md)."
        )
    return out


def _ttft_basis(t: dict) -> str:
    """`; client TTFT to the first token event` (with counts when the tier mixes definitions), or nothing."""
    defs = t.get("client_ttft_definitions") or {}
    if not defs:
        return ""
    if len(defs) == 1:
        return f"; client TTFT to the {next(iter(defs))}"
    return "; client TTFT mixed: " + ", ".join(f"{n} to the {d}" for d, n in defs.items())


def render_text(report: dict) -> str:
    out = []
    for t in report["tiers"]:
        out.append(f"== tier {t['name']}: {t['status']} — {_summary(t)}{_ttft_basis(t)}")
        for title, headers, rows in _tier_blocks(t):
            out.append(f"-- {title}")
            out += _table(headers, rows)
        out.append("")
        out.append(t["verdict"])
        out.append("")
    if report.get("unbudgeted_tiers"):
        out.append(
            "Tiers with no budget: " + ", ".join(f"{k} ({v} requests)" for k, v in report["unbudgeted_tiers"].items())
        )
    out += report_lines(report)
    return "\n".join(out).rstrip() + "\n"


def render_markdown(report: dict) -> str:
    out = ["# budgetscope report", ""]
    for t in report["tiers"]:
        state = {"KEPT": "kept", "BROKEN": "**broken**", "UNKNOWN": "**unknown**"}[t["status"]]
        out += [
            f"## Tier `{t['name']}`: {state}",
            "",
            _summary(t).replace(", ", " · ") + _ttft_basis(t),
            "",
            f"> {t['verdict']}",
            "",
        ]
        for title, headers, rows in _tier_blocks(t):
            out += [f"**{title}**", "", "| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
            out += ["| " + " | ".join(c or " " for c in r) + " |" for r in rows]
            out.append("")
    if report.get("unbudgeted_tiers"):
        out.append(
            "Tiers with no budget: " + ", ".join(f"`{k}` ({v} requests)" for k, v in report["unbudgeted_tiers"].items())
        )
    # a document (a CI comment, a ticket) carries its warnings, which the text table leaves to stderr
    out += ["", *(f"- {line}" for line in [*report["warnings"], *report_lines(report)])]
    return "\n".join(out).rstrip() + "\n"
