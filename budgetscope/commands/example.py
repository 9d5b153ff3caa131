"""`budgetscope example`: print a file that ships with budgetscope."""

from __future__ import annotations

import json

import click

from budgetscope.commands.options import fail


@click.command()
@click.argument("name", type=click.Choice(["otelcol", "otelcol-sharded", "otelcol-slis", "budgets", "grafana"]))
@click.option("--path", "show_path", is_flag=True, help="Print where the installed file is instead of its text.")
def example(name: str, show_path: bool) -> None:
    """Print a file that ships with budgetscope, to start your own from.

    \b
      otelcol          an OpenTelemetry Collector config: traces and metrics from your servers to `collect`
      otelcol-sharded  the same, load-balanced by trace id over several `collect --shard` processes
      otelcol-slis     a Collector pulling the live SLIs of `collect --budgets`, sent on as OTLP metrics
      budgets          the demo's budgets file (also the one of sample_traces/)
      grafana          a Grafana dashboard (JSON) over the live SLIs of `collect --budgets`

    \b
      budgetscope example otelcol > otelcol.yaml && otelcol-contrib --config otelcol.yaml
      budgetscope example budgets > budgets.toml
      budgetscope example grafana > budgetscope-dashboard.json   # Grafana: Dashboards → Import
    """
    if name == "grafana":
        from budgetscope.alerting.grafana import dashboard

        if show_path:
            raise fail(ValueError("the grafana dashboard is generated, not a file: print it without --path"))
        click.echo(json.dumps(dashboard(), indent=2))
        return
    from budgetscope.shipped import MissingFile, demo_budgets, otelcol_config

    try:
        path = demo_budgets() if name == "budgets" else otelcol_config(name)
    except MissingFile as e:
        raise fail(e) from None
    click.echo(str(path) if show_path else path.read_text(encoding="utf-8"), nl=show_path)
