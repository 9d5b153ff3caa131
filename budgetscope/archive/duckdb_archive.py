"""`DuckDBArchive`: one DuckDB database holding spans, requests and what came in.

It is the single-file archive format of budgetscope 0.1 (`prod.duckdb`, still read and written), and the working
set of a directory archive's writer (in memory for `ingest`, a private file for `collect`; see directory.py).

It stores: what lands in it, and how, is `budgetscope.ingest.lander.Lander`'s (idempotent and atomic per
batch, `requests` rows derived in the same transaction as the spans that change them), which a writer opened by
`budgetscope.opener.Archive` holds as `lander`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from budgetscope import schema
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.protocol import Landing
from budgetscope.archive.tables import TableAccess, polars

# duckdb is imported where a connection is made: 175 ms to import (python -X importtime, 2 cores), which
# `budgetscope.archive.errors` users and `--help` need not pay.


def _check_path(path: Path, create: bool) -> None:
    if path.is_dir():
        raise ArchiveError(f"{path} is a directory, not an archive file")
    if not path.exists():
        if not create:
            raise ArchiveError(f"no archive at {path} (create one with `budgetscope ingest FILE --archive {path}`)")
        if not path.parent.exists():
            raise ArchiveError(f"cannot create {path}: folder {path.parent} does not exist")


def one(con, sql: str, params=None) -> tuple:
    """The single row of `sql` (DuckDB 2 wants every result finished before the next statement)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None


WORKING_SET = {"checkpoint_threshold": "1TB"}
"""DuckDB settings of an in-memory archive (a folder writer's working set). DuckDB checkpoints an in-memory
database, compressing its tables, whenever 16 MB have changed since the last checkpoint: a working set that takes
a landing and a derivation about every second compressed the rows it had just been given at every other commit,
and each scan of them decompressed them again (250-730 ms a commit of 30,000 `requests` rows; the collector spent
a fifth of its writer's time in COMMIT). Its owner checkpoints when it has deleted what it published, which frees
their memory (`DirectoryArchive._prune`)."""


def _connect(path: Path, read_only: bool, config: dict | None = None):
    # imported on use: duckdb 153 ms to import
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=read_only, config=config or {})
    except duckdb.IOException as e:
        msg = str(e).splitlines()[0]
        if "lock" in msg.lower():
            raise ArchiveError(f"{path} is in use by another process ({msg})") from None
        if not path.exists() and any(os.strerror(n) in msg for n in (errno.EROFS, errno.ENOSPC, errno.EACCES)):
            raise  # a new file that could not be made: the caller says so (nothing was created), not "not an archive"
        raise ArchiveError(f"{path} is not a DuckDB archive ({msg})") from None
    except duckdb.Error as e:
        raise ArchiveError(f"cannot open {path}: {str(e).splitlines()[0]}") from None
    # DuckDB draws its own progress bar on a terminal during long statements; ours is the one shown.
    con.execute("SET enable_progress_bar = false")
    return con


def _over_old_file(path: Path, missing: list, sandbox: bool, settings: dict | None = None):
    """A connection that reads the archive file `path` (attached read-only) through views of its tables, the
    `requests` one adding the `missing` columns as NULL. Views in a database of the connection's own, not
    temporary ones: the report and the dashboard query from cursors, which do not see another's temporary views."""
    # imported on use: duckdb 153 ms to import
    import duckdb

    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    try:
        con.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS bs_file (READ_ONLY)")
    except duckdb.Error as e:
        con.close()
        raise ArchiveError(f"cannot open {path}: {str(e).splitlines()[0]}") from None
    nulls = "".join(f", CAST(NULL AS {c.type}) AS {c.name}" for c in missing)
    tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'bs_file'").fetchall()
    for (t,) in tables:
        con.execute(f'CREATE VIEW "{t}" AS SELECT *{nulls if t == "requests" else ""} FROM bs_file.main."{t}"')
    con.execute(schema.ENGINE_STEPS_VIEW)
    if sandbox:
        for name, value in (settings or {}).items():
            con.execute(f"SET {name} = ?", [value])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return con


class DuckDBArchive(TableAccess):
    """A budgetscope archive in one DuckDB database. Use as a context manager; `read_only=True` for reports and
    queries. The path ":memory:" gives an archive in memory."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        read_only: bool = False,
        create: bool = True,
        sandbox: bool = False,
        settings: dict | None = None,
    ):
        """Open (or create) an archive. `sandbox=True` (read-only) forbids the SQL any file access and locks DuckDB's
        configuration, `settings` (DuckDB's, such as `memory_limit`) fixed before it is locked."""
        self.path = Path(path)
        memory = str(path) == ":memory:"
        if not memory:
            _check_path(self.path, create and not read_only)
        is_new = memory or not self.path.exists()
        self.read_only = read_only or sandbox
        self.lander: Landing | None = None  # what lands and derives (budgetscope.opener sets it on a writer)
        self.track_derivations = False  # a directory writer sets it: see `derive.pending.derive_pending`
        self.single_file = True
        self.spool = None
        self.spool_cut = 0
        self.republished = 0  # spans of a landing found among published ones (a folder's; never here)
        self.recovered = (0, 0)
        self._settings = dict(settings or {}) if sandbox else {}
        self.con = _connect(self.path, self.read_only, {**self._settings, **(WORKING_SET if memory else {})})
        if sandbox:  # after the settings: with external access off, DuckDB refuses to set a temp_directory
            self.con.execute("SET enable_external_access = false")
            self.con.execute("SET lock_configuration = true")
        if is_new:
            self._create()
        self._check_format()
        self._add_new_columns(sandbox)

    # -- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self) -> DuckDBArchive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    def _create(self) -> None:
        with self.transaction():
            for stmt in schema.create_statements():
                self.con.execute(stmt)
            self.con.execute("INSERT INTO budgetscope_meta VALUES ('schema_version', ?)", [str(schema.SCHEMA_VERSION)])

    def _check_format(self) -> None:
        # imported on use: duckdb 153 ms to import
        import duckdb

        try:
            (version,) = one(self.con, "SELECT value FROM budgetscope_meta WHERE key = 'schema_version'")
        except (duckdb.Error, TypeError):
            self.con.close()
            raise ArchiveError(f"{self.path} is a DuckDB file but not a budgetscope archive") from None
        if int(version) != schema.SCHEMA_VERSION:
            self.con.close()
            raise ArchiveError(
                f"{self.path} has archive format {version}; this budgetscope reads {schema.SCHEMA_VERSION}"
            )

    def _add_new_columns(self, sandbox: bool) -> None:
        """`requests` columns added after this file was written: a writable open adds them (NULL in the rows it
        holds); a read-only one leaves the file as it is and reads it through views that add them as NULL."""
        con = self.con
        (db,) = one(con, "SELECT current_database()")
        present = {
            n
            for (n,) in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main' "
                "AND table_name = 'requests'",
                [db],
            ).fetchall()
        }
        missing = schema.missing_columns(schema.REQUESTS, present)
        if not missing:
            return
        if not self.read_only:
            for c in missing:
                con.execute(f"ALTER TABLE requests ADD COLUMN {c.name} {c.type}")
            return
        con.close()
        self.con = _over_old_file(self.path, missing, sandbox, self._settings)

    def transaction(self):
        """A context manager: BEGIN, then COMMIT, or ROLLBACK if the block raised."""
        con = self.con

        class _Tx:
            def __enter__(self):
                con.execute("BEGIN TRANSACTION")

            def __exit__(self, exc_type, *_):
                con.execute("ROLLBACK" if exc_type else "COMMIT")

        return _Tx()

    # -- writing (the `Writer` protocol, archive/protocol.py) -----------------------------------------------
    def refuse_writes(self) -> None:
        raise ArchiveError(f"{self.path} is open read-only")

    def ingest(self, batches, progress=None, derive: bool = True):
        """Land the batches and derive their `requests` rows (`Lander.land`)."""
        if self.lander is None:
            self.refuse_writes()
        return self.lander.land(batches, progress, derive)

    def commit(self, count_orphans: bool = True) -> tuple[int, int]:
        """Derive what is pending (`Lander.commit`): (requests rows derived, orphan stage spans)."""
        if self.lander is None:
            self.refuse_writes()
        return self.lander.commit(count_orphans)

    derive_pending = commit

    def before_derive(self) -> None:
        """Nothing to do: every span of a pending trace is here (a folder reads published ones back)."""

    def after_derive(self) -> None:
        """Nothing to do: what a transaction committed here is what readers see (a folder archive publishes)."""

    def bring_back(self, traces: str) -> None:
        """Nothing to do: every span and row is here (a folder reads published ones back)."""

    def new_spans(self) -> str:
        """SQL of the spans of the traces not yet derived (a single file commits each landing: they are its new
        ones)."""
        return "SELECT * FROM spans WHERE trace_id IN (SELECT trace_id FROM pending_traces)"

    def published_requests(self, lo_ns: int | None, hi_ns: int | None) -> None:
        """None: `requests` here is every row (a folder's working set holds some)."""

    publish = after_derive

    def spooled(self) -> None:
        """No spool: a single file commits each landing."""

    def recovered_done(self) -> None:
        """No spool to let go of."""

    # -- reading -------------------------------------------------------------------------------------------
    def pending_traces(self) -> int:
        """Traces whose `requests` rows are not derived yet (only after a writer was interrupted)."""
        return one(self.con, "SELECT count(*) FROM pending_traces")[0]

    def lazy(self, table: str):
        """A table as a polars LazyFrame (read whole: a single-file archive has no files to scan)."""
        return polars().LazyFrame(self.con.table(table).pl())
