"""The store's one error type, importable without DuckDB."""


class ArchiveError(Exception):
    """A problem with the archive itself (missing, not an archive, locked). The message is one line."""
