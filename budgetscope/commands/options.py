"""What every command shares: the one `UsageError`, the `--format` and engine options, the output of rows,
archive opening and time parsing. Light at import: click only."""

from __future__ import annotations

import csv
import io
import json
import os
import re

import click


class UsageError(click.ClickException):
    """Bad input: one line on stderr, exit status 2, no traceback."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"budgetscope: {self.format_message()}", err=True)


def fail(e: Exception) -> UsageError:
    """A library error (`ArchiveError`, `BudgetError`, …) as the one-line usage error."""
    return UsageError(str(e))


def format_option(*choices: str, help: str | None = None):
    """`--format` (into the parameter `fmt`) with these choices, the first the default."""
    return click.option(
        "--format", "fmt", type=click.Choice(list(choices)), default=choices[0], show_default=True, help=help
    )


FORMAT_SUMMARY = format_option("table", "json", help="The summary on stdout: lines, or one JSON document.")

ARCHIVE = click.option("--archive", "-a", required=True, type=click.Path(), help="Archive folder, or a .duckdb file.")
NEW_ARCHIVE = click.option(
    "--archive", "-a", required=True, type=click.Path(), help="Archive folder (created if missing), or a .duckdb file."
)
BUDGETS = click.option(
    "--budgets", "-b", type=click.Path(), help="Budgets TOML; without it every tier is shown at p99."
)


def engine_option(where: str = "in this process"):
    """`--engine duckdb|spark`; `where` says where DuckDB runs."""
    return click.option(
        "--engine",
        type=click.Choice(["duckdb", "spark"]),
        default="duckdb",
        show_default=True,
        help=f"Run the SQL on DuckDB {where}, or on Spark over the same Parquet files.",
    )


ENGINE = engine_option()
SPARK_MASTER = click.option(
    "--spark-master",
    metavar="URL",
    help="Spark master for --engine spark: local[N] (default local[2]), spark://HOST:PORT, yarn.",
)


def check_engine(engine: str, spark_master: str | None) -> None:
    """`--spark-master` only with `--engine spark`."""
    if spark_master and engine != "spark":
        raise UsageError("--spark-master needs --engine spark")


def time_ns(value: str | None, name: str) -> int | None:
    """The option `--name`'s time (ISO-8601 with a zone, or ns since the epoch) as int64 ns; None when absent."""
    from budgetscope.times import parse_time_ns

    try:
        return parse_time_ns(value, f"--{name}")
    except ValueError as e:
        raise UsageError(str(e)) from None


PERIOD_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}


def period_s(text: str, name: str) -> float:
    """The option `--name`'s period ('500ms', '1.5s', '1m', or bare seconds '2') in seconds, > 0."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"--{name}: {text!r} is not a period like 500ms, 1s or 1m")
    return float(m.group(1)) * PERIOD_UNITS[m.group(2)]


def open_reader(
    archive: str,
    engine: str = "duckdb",
    spark_master: str | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
):
    """A reader of the archive (`.con` runs the analysis SQL) on the engine chosen; a folder archive reads only
    the segments of the window [since_ns, until_ns)."""
    check_engine(engine, spark_master)
    if engine == "spark":
        from budgetscope.spark.commands import spark_archive

        return spark_archive(archive, spark_master, since_ns, until_ns, quick_jit=True)
    from budgetscope.opener import Archive

    return Archive(archive, read_only=True, create=False, since_ns=since_ns, until_ns=until_ns)


def check_archive(archive: str) -> None:
    """Open the archive read-only once, so that a missing or unreadable one fails here in one line."""
    from budgetscope.archive.errors import ArchiveError
    from budgetscope.opener import Archive

    try:
        if not os.path.exists(archive):
            raise ArchiveError(f"{archive}: no such archive")
        Archive(archive, read_only=True, create=False).close()
    except ArchiveError as e:
        raise fail(e) from None


def load_budgets_or_fail(budgets: str | None):
    """The budgets file parsed (None without one); a bad file is the one-line error."""
    from budgetscope.analysis.budgets import BudgetError, load_budgets

    try:
        return load_budgets(budgets) if budgets else None
    except BudgetError as e:
        raise fail(e) from None


def check_inputs(archive: str, budgets: str | None):
    """Parse the budgets and open the archive read-only once, so that bad input fails here in one line."""
    b = load_budgets_or_fail(budgets)
    check_archive(archive)
    return b


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def output_rows(columns: list[str], rows: list, fmt: str) -> None:
    """Rows on stdout as a table with a count line, a JSON list of objects, or CSV with a header."""
    if fmt == "json":
        click.echo(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str))
    elif fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
        click.echo(buf.getvalue(), nl=False)
    else:
        from budgetscope.analysis.render import _table

        click.echo("\n".join(_table(columns, [[_cell(v) for v in r] for r in rows])))
        click.echo(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
