"""`budgetscope demo`: the engine, the collector and the load generator on loopback, each scenario reported."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from budgetscope.commands.options import fail

_SCENARIOS = ("calm", "burst", "long-prompts", "long-outputs", "slow-network")


@click.command()
@click.option("--scenario", type=click.Choice(["all", *_SCENARIOS]), default="all", show_default=True)
@click.option(
    "--duration", type=click.FloatRange(2, 3600), default=15.0, show_default=True, help="Seconds of load per scenario."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default="demo-out",
    show_default=True,
    help="Folder for the archives, engine logs and load results.",
)
@click.option("--budgets", "-b", type=click.Path(dir_okay=False), help="Budgets TOML (default: the demo's own).")
@click.option(
    "--no-dashboard", is_flag=True, help="Do not open the dashboard at the end (it opens only on a terminal anyway)."
)
@click.option("--offline", is_flag=True, help="No engine: synthetic traces with a known tail cause instead.")
def demo(scenario: str, duration: float, out: str, budgets: str | None, no_dashboard: bool, offline: bool) -> None:
    """Run the reference engine, the collector and the load generator on loopback, and report each scenario.

    \b
    Scenarios, each causing its tail for real on the engine's tiny model:
      calm          a light steady load: every budget holds
      burst         bursty arrivals outrun the batch: queueing
      long-prompts  a few very long prompts: prefill
      long-outputs  a few very long outputs: decode (in the E2E tail)
      slow-network  some connections cross a delaying TCP hop: network

    \b
      budgetscope demo                          # all five, 15 s of load each
      budgetscope demo --scenario burst --duration 30
      budgetscope demo --offline                # synthetic traces, no engine
    """
    from budgetscope.analysis.budgets import BudgetError, load_budgets
    from budgetscope.demo.offline import demo_budgets_path

    if offline:
        from budgetscope.demo.offline import run_offline_demo

        result = run_offline_demo(out)
        click.echo(result.summary)
        click.echo(result.report_text, nl=False)
        click.echo(f"\nThe injected cause was queue; the report's dominant TTFT stage is {result.dominant_ttft}.")
        return
    from budgetscope.analysis.render import render_text
    from budgetscope.demo.live import DemoError, run_scenario
    from budgetscope.demo.scenarios import SCENARIOS
    from budgetscope.demo.summary import explore_lines, shown_archive, summary_row, summary_table
    from budgetscope.extras import MissingExtra, require

    try:
        require("engine", "the live demo", hint="or run `budgetscope demo --offline`")
        b = load_budgets(budgets or demo_budgets_path())
    except (BudgetError, MissingExtra) as e:
        raise fail(e) from None
    names = list(SCENARIOS) if scenario == "all" else [scenario]
    rows = []
    for name in names:
        try:
            run = run_scenario(SCENARIOS[name], Path(out), b, duration, say=lambda m: click.echo(m, err=True))
        except DemoError as e:
            raise fail(e) from None
        click.echo(f"\n### scenario {name}: {run.scenario.what}\n")
        click.echo(render_text(run.report), nl=False)
        rows.append(summary_row(name, run))
    click.echo("\n### summary\n")
    click.echo(summary_table(rows))
    shown, bpath = shown_archive(rows), budgets or str(demo_budgets_path())
    click.echo("\n" + explore_lines(shown, bpath))
    # The dashboard serves until Ctrl-C: open it only for a person at a terminal, never in CI or a pipe.
    if not no_dashboard and sys.stdin.isatty() and sys.stdout.isatty():
        from budgetscope.commands.dashboard import dashboard

        click.get_current_context().invoke(dashboard, archive=shown, budgets=bpath, port=8501)
