"""An archive a command is about to create, removed again when nothing landed in it; a write that failed as one
line."""

from __future__ import annotations

import os
import shutil

from budgetscope.commands.options import UsageError


class NewArchive:
    """An archive a command is about to write. If the command created it and nothing landed (every file it was
    given was rejected), `discard_if_empty` removes it again, so a rejected file leaves no empty archive behind."""

    def __init__(self, path: str):

        self.path = path
        self.was_empty_dir = os.path.isdir(path) and not any(os.scandir(path))
        self.existed = os.path.exists(path) and not self.was_empty_dir

    def discard_if_unused(self) -> bool:
        """After a failure: `discard_if_empty`, with the counts of what was committed. True when the command leaves
        no archive that was not there before: removed, or never made (a read-only file system)."""
        from budgetscope.opener import Archive

        if not self.existed and not os.path.exists(self.path):
            return True

        try:
            with Archive(self.path, read_only=True, create=False) as a:
                counts = a.counts()
        except Exception:  # noqa: BLE001 - nothing committed that a reader can open (or the folder is gone)
            counts = {}
        try:
            return self.discard_if_empty(counts)
        except OSError:  # a read-only file system: the command created nothing there
            return False

    def discard_if_empty(self, counts: dict[str, int]) -> bool:

        if self.existed or any(counts.values()) or not os.path.exists(self.path):
            return False
        if os.path.isdir(self.path):
            for entry in os.scandir(self.path):  # only what this command wrote: the folder was empty or absent
                shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.remove(entry.path)
            if not self.was_empty_dir:
                os.rmdir(self.path)
        else:
            for leftover in (self.path, self.path + ".wal"):
                if os.path.exists(leftover):
                    os.remove(leftover)
        return True


def io_failure(e: Exception, archive: str, new: NewArchive | None) -> Exception:
    """A write that failed (a full disk, a read-only file system) as one line; the exception itself otherwise.
    The archive keeps its last commit (the writer deleted what it had half-written); one this command created
    is removed if nothing of it was committed."""
    from budgetscope.archive.errors import io_reason, write_failure

    if io_reason(e) is None:
        return e
    created = new is not None and new.discard_if_unused()
    return UsageError(write_failure(e, archive, *(["nothing was created"] if created else [])))
