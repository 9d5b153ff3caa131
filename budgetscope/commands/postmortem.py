"""`budgetscope postmortem`: an incident window as one self-contained HTML file. Light at import: DuckDB and
plotly load only when the command runs."""

from __future__ import annotations

from pathlib import Path

import click

from budgetscope.commands.options import ARCHIVE, BUDGETS, UsageError, check_inputs, time_ns


@click.command()
@ARCHIVE
@BUDGETS
@click.option("--from", "from_", required=True, help="Incident start: ISO-8601 with a zone, or ns since the epoch.")
@click.option("--to", "to", required=True, help="Incident end (exclusive): ISO-8601 with a zone, or ns.")
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
@click.option("--title", default="budgetscope postmortem", show_default=True)
def postmortem(archive: str, budgets: str | None, from_: str, to: str, out: str, title: str) -> None:
    """Write the timeline and the budget verdict of an incident window as ONE self-contained HTML file (data,
    JS and CSS inline; it fetches nothing) to attach to the incident, with the notes `report` prints on what it
    could not read (spans no adapter claimed, requests without a client span, requests still in flight: also on
    stderr).

    \b
      budgetscope postmortem -a prod/ -b budgets.toml \\
          --from 2026-01-01T10:00:00Z --to 2026-01-01T10:30:00Z --out incident.html
    """
    from budgetscope.archive.archive import holds

    since, until = time_ns(from_, "from"), time_ns(to, "to")
    if until <= since:
        raise UsageError(f"--to: {to!r} is not after --from {from_!r}")
    if holds(archive, out):
        raise UsageError(f"--out: {out} is inside the archive {archive}; write the postmortem elsewhere")
    b = check_inputs(archive, budgets)
    from budgetscope.extras import MissingExtra, require

    try:
        require("dashboard", "the postmortem", modules=("plotly",))
    except MissingExtra as e:
        raise UsageError(str(e)) from None
    from budgetscope.analysis.postmortem import build_postmortem, render_html
    from budgetscope.archive.reader import committed_ns
    from budgetscope.opener import Archive

    with Archive(archive, read_only=True, create=False, since_ns=since, until_ns=until) as a:
        pm = build_postmortem(a.con, b, since, until, last_commit_ns=committed_ns(a), split_traces=a.split_traces)
    try:
        Path(out).write_text(render_html(pm, title), encoding="utf-8")
    except OSError as e:
        raise UsageError(f"{out}: cannot write ({e.strerror})") from None
    from budgetscope.analysis.postmortem import REPORT_WORDS

    click.echo(f"{out}: {len(pm['report']['tiers'])} tiers, {REPORT_WORDS[pm['report']['status']]}")
    for warning in pm["report"]["warnings"]:  # in the file too
        click.echo(f"budgetscope: {warning}", err=True)
