"""`budgetscope convert`: a single-file .duckdb archive into a new folder archive."""

from __future__ import annotations

import click

from budgetscope.commands.options import fail


@click.command()
@click.argument("source", type=click.Path(dir_okay=False))
@click.argument("dest", type=click.Path(file_okay=False))
def convert(source: str, dest: str) -> None:
    """Convert a single-file .duckdb archive into a new folder archive (the source is only read).

    Rows, batch ids and derived requests are kept as they are; every command reads either format, so this is
    for archives that a collector should go on writing, or that other Parquet readers should see.

    \b
      budgetscope convert prod.duckdb prod/
    """
    from budgetscope.archive.convert import convert as run
    from budgetscope.archive.errors import ArchiveError

    try:
        m = run(source, dest)
    except ArchiveError as e:
        raise fail(e) from None
    click.echo(f"{dest}: {m.rows('spans'):,} spans, {m.rows('requests'):,} requests in {len(m.segments)} segments")
