"""`budgetscope dashboard`: the Streamlit app over one archive. Light at import: Streamlit and DuckDB load only
when the command runs."""

from __future__ import annotations

import os
import sys

import click

from budgetscope.commands.options import ARCHIVE, BUDGETS, UsageError, check_inputs

ENV_ARCHIVE, ENV_BUDGETS = "BUDGETSCOPE_ARCHIVE", "BUDGETSCOPE_BUDGETS"


@click.command()
@ARCHIVE
@BUDGETS
@click.option("--port", type=click.IntRange(0, 65535), default=8501, show_default=True, help="Port on 127.0.0.1.")
@click.option(
    "--live",
    is_flag=True,
    help="Follow a folder archive that a collector is writing: each page reruns when a commit lands.",
)
def dashboard(archive: str, budgets: str | None, port: int, live: bool) -> None:
    """Open the budget dashboard (Streamlit) on 127.0.0.1: budgets, breakdown, tail explorer, timeline,
    request, SQL, what-if and capacity pages over one archive.

    \b
      budgetscope dashboard --archive prod/ --budgets budgets.toml
      budgetscope dashboard --archive prod/ --budgets budgets.toml --live   # while `collect` writes prod/
    """
    check_inputs(archive, budgets)
    if live and not os.path.isdir(archive):
        raise UsageError(f"--live follows a folder archive; {archive} is a single file, which its writer locks")
    from budgetscope.extras import MissingExtra, require
    from budgetscope.shipped import MissingFile, dashboard_app

    try:
        require("dashboard", "the dashboard")
        app = dashboard_app()
    except (MissingExtra, MissingFile) as e:
        raise UsageError(str(e)) from None
    env = {
        **os.environ,
        ENV_ARCHIVE: os.path.abspath(archive),
        ENV_BUDGETS: os.path.abspath(budgets) if budgets else "",
        "BUDGETSCOPE_LIVE": "1" if live else "",
    }
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), *served_config(port)]
    click.echo(f"budgetscope dashboard: http://127.0.0.1:{port}  (Ctrl-C stops it)", err=True)
    sys.stderr.flush()
    # Streamlit takes this process's place, so that a SIGTERM (a supervisor, a test) or Ctrl-C reaches the server
    # itself: a child would outlive a parent killed by a signal, still holding the port.
    os.execve(sys.executable, cmd, env)


def served_config(port: int) -> list[str]:
    """Streamlit's settings for the served dashboard: on loopback, no usage statistics, and the toolbar of a viewer
    (`client.toolbarMode = viewer`: no Deploy button, no rerun or clear-cache in the menu; those are for the app's
    developers, not the people reading budgets)."""
    return [
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]
