"""`budgetscope dashboard` and `budgetscope postmortem`. Light at import: Streamlit, DuckDB and plotly load only
when a command runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

ENV_ARCHIVE, ENV_BUDGETS = "BUDGETSCOPE_ARCHIVE", "BUDGETSCOPE_BUDGETS"


def _usage(message: str):
    from budgetscope.cli import UsageError

    return UsageError(message)


def _check_inputs(archive: str, budgets: str | None):
    """Open the archive read-only and parse the budgets once, so that bad input fails here in one line."""
    from budgetscope.analysis.budgets import BudgetError, load_budgets
    from budgetscope.archive.archive import Archive, ArchiveError

    try:
        b = load_budgets(budgets) if budgets else None
        if not os.path.exists(archive):
            raise ArchiveError(f"{archive}: no such archive")
        Archive(archive, read_only=True, create=False).close()
    except (BudgetError, ArchiveError) as e:
        raise _usage(str(e)) from None
    return b


@click.command()
@click.option("--archive", "-a", required=True, type=click.Path(), help="Archive folder, or a .duckdb file.")
@click.option("--budgets", "-b", type=click.Path(), help="Budgets TOML; without it every tier is shown at p99.")
@click.option("--port", type=click.IntRange(0, 65535), default=8501, show_default=True, help="Port on 127.0.0.1.")
@click.option("--live", is_flag=True,
              help="Follow a folder archive that a collector is writing: each page reruns when a commit lands.")
def dashboard(archive: str, budgets: str | None, port: int, live: bool) -> None:
    """Open the budget dashboard (Streamlit) on 127.0.0.1: budgets, breakdown, tail explorer, timeline,
    request, SQL, what-if and capacity pages over one archive.

    \b
      budgetscope dashboard --archive prod/ --budgets budgets.toml
      budgetscope dashboard --archive prod/ --budgets budgets.toml --live   # while `collect` writes prod/
    """
    _check_inputs(archive, budgets)
    if live and not os.path.isdir(archive):
        raise _usage(f"--live follows a folder archive; {archive} is a single file, which its writer locks")
    from budgetscope.extras import MissingExtra, require
    from budgetscope.shipped import MissingFile, dashboard_app

    try:
        require("dashboard", "the dashboard")
        app = dashboard_app()
    except (MissingExtra, MissingFile) as e:
        raise _usage(str(e)) from None
    env = {**os.environ, ENV_ARCHIVE: os.path.abspath(archive),
           ENV_BUDGETS: os.path.abspath(budgets) if budgets else "", "BUDGETSCOPE_LIVE": "1" if live else ""}
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.address", "127.0.0.1",
           "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    click.echo(f"budgetscope dashboard: http://127.0.0.1:{port}  (Ctrl-C stops it)", err=True)
    sys.stderr.flush()
    # Streamlit takes this process's place, so that a SIGTERM (a supervisor, a test) or Ctrl-C reaches the server
    # itself: a child would outlive a parent killed by a signal, still holding the port.
    os.execve(sys.executable, cmd, env)


@click.command()
@click.option("--archive", "-a", required=True, type=click.Path(), help="Archive folder, or a .duckdb file.")
@click.option("--budgets", "-b", type=click.Path(), help="Budgets TOML; without it every tier is shown at p99.")
@click.option("--from", "from_", required=True, help="Incident start: ISO-8601 with a zone, or ns since the epoch.")
@click.option("--to", "to", required=True, help="Incident end (exclusive): ISO-8601 with a zone, or ns.")
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
@click.option("--title", default="budgetscope postmortem", show_default=True)
def postmortem(archive: str, budgets: str | None, from_: str, to: str, out: str, title: str) -> None:
    """Write the timeline and the budget verdict of an incident window as ONE self-contained HTML file (data,
    JS and CSS inline; it fetches nothing) to attach to the incident.

    \b
      budgetscope postmortem -a prod/ -b budgets.toml \\
          --from 2026-01-01T10:00:00Z --to 2026-01-01T10:30:00Z --out incident.html
    """
    from budgetscope.cli import _time_ns

    from budgetscope.archive.archive import holds

    since, until = _time_ns(from_, "from"), _time_ns(to, "to")
    if until <= since:
        raise _usage(f"--to: {to!r} is not after --from {from_!r}")
    if holds(archive, out):
        raise _usage(f"--out: {out} is inside the archive {archive}; write the postmortem elsewhere")
    b = _check_inputs(archive, budgets)
    from budgetscope.extras import MissingExtra, require

    try:
        require("dashboard", "the postmortem", modules=("plotly",))
    except MissingExtra as e:
        raise _usage(str(e)) from None
    from budgetscope.analysis.postmortem import build_postmortem, render_html
    from budgetscope.archive.archive import Archive

    with Archive(archive, read_only=True, create=False, since_ns=since, until_ns=until) as a:
        pm = build_postmortem(a.con, b, since, until)
    try:
        Path(out).write_text(render_html(pm, title), encoding="utf-8")
    except OSError as e:
        raise _usage(f"{out}: cannot write ({e.strerror})") from None
    from budgetscope.analysis.postmortem import REPORT_WORDS

    click.echo(f"{out}: {len(pm['report']['tiers'])} tiers, {REPORT_WORDS[pm['report']['status']]}")
