"""What `budgetscope collect`'s options describe, checked: the archive it writes (a shard's folder with --shard),
the bearer token, retention and reader grace. Bad input raises ValueError (or ArchiveError) with one line."""

from __future__ import annotations

from dataclasses import dataclass

TOKEN_ENV = "BUDGETSCOPE_COLLECT_TOKEN"
"""The token's environment variable when no --auth-token-file is given."""


@dataclass(slots=True)
class Checked:
    archive: str  # the path written: ARCHIVE, or ARCHIVE/shard=ID/
    token: str | None
    retention_ns: int | None
    reader_grace_s: float | None


def check(
    archive: str, *, shard: str | None, auth_token_file: str | None, retention: str | None, reader_grace: str | None
) -> Checked:
    """The options checked and parsed; retention and reader grace apply to folder archives only."""
    # `budgetscope --help` loads this module: the library loads when the command runs (budgetscope/commands/)
    from budgetscope.archive.archive import is_single_file
    from budgetscope.archive.retention import parse_grace, parse_retention
    from budgetscope.archive.shards import shard_path
    from budgetscope.auth import read_token

    if shard is not None:
        archive = str(shard_path(archive, shard))
    token = read_token(auth_token_file, TOKEN_ENV)
    retention_ns = None if retention is None else parse_retention(retention)
    reader_grace_s = None if reader_grace is None else parse_grace(reader_grace)
    for given, flag in ((retention, "--retention"), (reader_grace, "--reader-grace")):
        if given is not None and is_single_file(archive):
            raise ValueError(
                f"{archive}: {flag} applies to folder archives (convert this one with `budgetscope convert`)"
            )
    return Checked(archive, token, retention_ns, reader_grace_s)
