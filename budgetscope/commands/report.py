"""`budgetscope report`: the tail against the budgets; the exit status gates CI."""

from __future__ import annotations

import json
import sys

import click

from budgetscope.commands.options import (
    ARCHIVE,
    BUDGETS,
    ENGINE,
    SPARK_MASTER,
    fail,
    format_option,
    open_reader,
    time_ns,
)

REPORT_EXIT = {"KEPT": 0, "BROKEN": 1, "UNKNOWN": 3}
"""`report`'s exit status by the report's status (2 stays for bad input)."""


@click.command()
@ARCHIVE
@BUDGETS
@format_option("table", "json", "markdown")
@click.option("--since", help="Only requests that arrived at or after this time (ISO-8601 or ns).")
@click.option("--until", help="Only requests that arrived before this time (ISO-8601 or ns).")
@ENGINE
@SPARK_MASTER
def report(
    archive: str,
    budgets: str | None,
    fmt: str,
    since: str | None,
    until: str | None,
    engine: str,
    spark_master: str | None,
) -> None:
    """Break the tail down against the budgets: exit 0 if every tier keeps them, 1 if one breaks them, 3 if
    one cannot be judged (its figures are unknown: no request, or no latency read), 2 on bad input. On an archive
    being written, a warning on stderr counts the requests whose other side's spans may not have landed yet
    (warnings are in the JSON's `warnings` and the markdown's closing lines too).

    \b
      budgetscope report --archive prod/ --budgets budgets.toml
      budgetscope report --archive prod/ --budgets budgets.toml --format json
      budgetscope report --archive fleet/ --engine spark --spark-master spark://head:7077
    """
    # imported on use: duckdb 153 ms to import
    import duckdb

    from budgetscope.analysis.budgets import BudgetError, load_budgets
    from budgetscope.analysis.render import render_markdown, render_text
    from budgetscope.analysis.report import build_report
    from budgetscope.archive.errors import ArchiveError
    from budgetscope.archive.reader import STALE, committed_ns

    try:
        b = load_budgets(budgets) if budgets else None
        since_ns, until_ns = time_ns(since, "since"), time_ns(until, "until")
        # a folder archive reads only the segments of the window
        with open_reader(archive, engine, spark_master, since_ns, until_ns) as a:
            if a.pending_traces():
                click.echo(
                    f"note: {a.pending_traces():,} traces await derivation (an ingest was interrupted); "
                    "run `budgetscope ingest` again to finish them",
                    err=True,
                )
            try:
                rep = build_report(
                    a.con, b, since_ns, until_ns, last_commit_ns=committed_ns(a), split_traces=a.split_traces
                )
            # a segment gone: DuckDB's IO error (a sandbox's refused glob), Spark's file not found
            except (duckdb.IOException, duckdb.PermissionException, ArchiveError):
                if not a.stale():
                    raise
                raise ArchiveError(f"{archive}: {STALE}") from None
    except (BudgetError, ArchiveError) as e:
        raise fail(e) from None
    if fmt == "json":
        click.echo(json.dumps(rep, indent=2, allow_nan=False, default=str))
    else:
        click.echo(render_markdown(rep) if fmt == "markdown" else render_text(rep), nl=False)
    for warning in rep["warnings"]:
        click.echo(f"budgetscope: {warning}", err=True)
    sys.exit(REPORT_EXIT[rep["status"]])
