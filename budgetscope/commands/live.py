"""Writing into an archive that a running collector writes: through that collector (`import`, `scrape`).

A folder archive has one writer. When a command's own writer finds the lock held, and the holder is a collector
that says where it listens (collector/endpoint.py), the command sends its batches to that collector instead; the
user's command is the same. Any other holder (an `ingest`, a second `import`) keeps the one-line error.
"""

from __future__ import annotations

import click

from budgetscope.commands.options import UsageError

AUTH_TOKEN_FILE = click.option(
    "--auth-token-file",
    type=click.Path(dir_okay=False),
    help="When a collector that takes a bearer token writes the archive: the token's file (default "
    "$BUDGETSCOPE_COLLECT_TOKEN), for sending the batches through it.",
)


def collector_for(archive: str, locked, auth_token_file: str | None):
    """The client of the collector that holds `archive` (`locked`: the ArchiveLocked its writer raised);
    UsageError (one line) when the holder is no collector, or one that cannot take batches."""
    from budgetscope.auth import read_token
    from budgetscope.collector.endpoint import CollectorClient, CollectorUnreachable, find
    from budgetscope.collector.options import TOKEN_ENV

    found = find(archive, locked.pid)
    if found is None:
        raise UsageError(str(locked))
    try:
        token = read_token(auth_token_file, TOKEN_ENV)
        return CollectorClient(found, archive, token)
    except (ValueError, CollectorUnreachable) as e:
        raise UsageError(str(e)) from None
