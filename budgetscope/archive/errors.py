"""The store's one error type, importable without DuckDB."""

import errno
import os
import re


class ArchiveError(Exception):
    """A problem with the archive itself (missing, not an archive, locked). The message is one line."""


class ArchiveLocked(ArchiveError):
    """Another process writes the archive (a folder's writer lock is held): `pid` is the holder's, as it wrote
    it (a string; "?" when unreadable)."""

    def __init__(self, message: str, pid: str):
        super().__init__(message)
        self.pid = pid


def io_reason(e: BaseException) -> str | None:
    """The one-line reason of a failure to read or write files (an OSError, or a DuckDB error that quotes the
    system's: `No space left on device`, `Read-only file system`), None for any other exception."""
    if isinstance(e, OSError):
        return e.strerror or str(e).splitlines()[0]
    if not type(e).__module__.lstrip("_").startswith("duckdb"):
        return None
    text = str(e)
    found = re.search(r'"errno":\s*"?(\d+)', text)
    if found:
        return os.strerror(int(found.group(1)))
    for name in ("ENOSPC", "EROFS", "EACCES", "EDQUOT"):  # e.g. "Failed to commit: Could not write file …: No space…"
        if os.strerror(getattr(errno, name)) in text:
            return os.strerror(getattr(errno, name))
    return (text.splitlines() or ["I/O error"])[0] if type(e).__name__ == "IOException" else None


def write_failure(e: BaseException, archive, kept: str = "the archive keeps its last commit") -> str | None:
    """The one line a command prints when writing `archive` failed for want of room or permission (what the
    writer leaves: its last commit, nothing half-written); None when `e` is no such failure."""
    why = io_reason(e)
    return None if why is None else f"cannot write {archive}: {why}; {kept}, nothing half-written"
