"""`LoadgenError`: bad input or an unusable target, said in one line (the CLI prints it and exits 2)."""


class LoadgenError(Exception):
    """A problem the user can fix: a bad spec, a malformed replay file, an unreachable endpoint."""
