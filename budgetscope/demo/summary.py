"""The live demo's closing summary: one row a scenario (what was injected, what the report found), and the
commands to look further."""

from __future__ import annotations

from budgetscope.analysis.render import _table

HEADER = ["scenario", "injected", "dominant stage of the tail", "attainment", "archive"]
STATUS_FOUND = {"KEPT": "budgets held", "BROKEN": "a budget broke", "UNKNOWN": "unknown"}
"""What a scenario that injects nothing found, by its tier's status."""


def summary_row(name: str, run) -> list[str]:
    """The summary's row of the scenario `name` from its `live.ScenarioRun`."""
    t = run.report["tiers"][0]
    expect = run.scenario.expect or "nothing (budgets hold)"
    found = run.tail if run.scenario.expect else STATUS_FOUND[t["status"]]
    return [
        name,
        expect,
        f"{run.scenario.metric.upper()}: {found}",
        "-" if t["attainment"] is None else f"{100 * t['attainment']:.0f}%",
        str(run.archive),
    ]


def summary_table(rows: list[list[str]]) -> str:
    """The rows under HEADER, as a text table."""
    return "\n".join(_table(HEADER, rows))


def shown_archive(rows: list[list[str]]) -> str:
    """The archive to look further into: the burst scenario's when it ran (its tail has a cause), else the first."""
    return next((r[4] for r in rows if r[0] == "burst"), rows[0][4])


def explore_lines(archive: str, budgets: str) -> str:
    """The commands that look further into `archive`."""
    return (
        f"Explore:\n  budgetscope report -a {archive} --budgets {budgets} --format json\n"
        f'  budgetscope query -a {archive} "SELECT * FROM requests LIMIT 5"\n'
        f"  budgetscope dashboard -a {archive} --budgets {budgets}"
    )
