"""Read-only SQL over an archive: one statement that DuckDB's own parser reads as a SELECT, over the archive's
tables only, with every file and network access of DuckDB switched off, in bounded memory, spill and time.

Why a parse, not a list of statement types: the archive's segments are in DuckDB's `allowed_paths` (a reader
must read them), and DuckDB allows writing wherever it allows reading. A check of statement types let
`EXPLAIN ANALYZE COPY … TO '<segment>'` through. `json_serialize_sql` serialises only a SELECT (anything else,
EXPLAIN included, is an error), so what runs is a query by construction; its tree and its bound plan then name
every table and table function the query reads (query_check.py).

Why limits of its own: DuckDB's defaults let one query take 80 % of the machine's memory and spill without bound
into the working directory, and `--max-rows` bounded only what was printed. The sandbox fixes `memory_limit`,
`max_temp_directory_size` (in a temporary directory of its own) and `max_expression_depth` before it locks the
configuration, fetches at most `max_rows` + 1 rows and `max_result_mb` of them, a chunk at a time, and stops a
query at its timeout. `budgetscope query` and the dashboard run this in a child process (query_process.py), so
that what DuckDB does not bound, or a crash inside it, ends that process only.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace

from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.reader import STALE
from budgetscope.query_check import READ_ONLY, TOO_DEEP, QueryError, check_select
from budgetscope.query_limits import MAX_RESULT_MB, MEMORY_MB, SPILL_MB, QueryLimits

CHUNK_BYTES = 4 * 2**20
"""About this much of the result is fetched at a time."""


@dataclass(slots=True)
class QueryResult:
    columns: list[str]
    types: list[str]
    rows: list[tuple]
    truncated: bool = False  # more rows than `max_rows` matched; `rows` holds the first `max_rows`
    oversize: bool = False  # the rows passed `max_result_mb`; `rows` holds those fetched before


def run_query(
    archive: str | os.PathLike,
    sql: str,
    limits: QueryLimits | None = None,
    *,
    max_rows: int | None = None,
    timeout_s: float | None = None,
) -> QueryResult:
    """Run `sql` (one SELECT) against the archive opened read-only in the sandbox, within `limits` (`max_rows` and
    `timeout_s`, when given, replace theirs), in this process. A query still running after its timeout is
    interrupted (QueryError). `budgetscope query` and the dashboard use query_process.run_isolated instead."""
    limits = limits or QueryLimits()
    if max_rows is not None or timeout_s is not None:
        limits = replace(
            limits,
            max_rows=limits.max_rows if max_rows is None else max_rows,
            timeout_s=limits.timeout_s if timeout_s is None else timeout_s,
        )
    res = QueryResult([], [], [])
    for kind, value in stream_query(archive, sql, limits):
        if kind == "columns":
            res.columns, res.types = value
        elif kind == "rows":
            res.rows.extend(value[0])
        else:
            res.truncated, res.oversize = value
    return res


def stream_query(
    archive: str | os.PathLike, sql: str, limits: QueryLimits, spill_dir: str | os.PathLike | None = None
) -> Iterator[tuple[str, object]]:
    """The query's result as it is fetched: ("columns", (names, types)), then ("rows", (rows, pickled rows)) a
    chunk at a time, then ("end", (truncated, oversize)). Raises QueryError (one line). DuckDB spills into
    `spill_dir` (default: a temporary directory, removed after)."""
    if spill_dir is None:
        with tempfile.TemporaryDirectory(prefix="budgetscope-query-") as tmp:
            yield from stream_query(archive, sql, limits, tmp)
        return
    # imported on use: duckdb 153 ms to import, and the opener loads it; the parent of a child query needs neither
    import duckdb

    from budgetscope.opener import Archive

    with Archive(archive, sandbox=True, settings=limits.settings(spill_dir), create=False) as a:
        timer = threading.Timer(limits.timeout_s, a.con.interrupt) if limits.timeout_s else None
        try:
            if timer:
                timer.start()
            check_select(a.con, sql)
            cur = a.con.execute(sql)
            description = cur.description or []
            yield "columns", ([d[0] for d in description], [str(d[1]) for d in description])
            if cur.description is not None:
                yield from _chunks(cur, limits)
            else:
                yield "end", (False, False)
        except duckdb.InterruptException:
            raise QueryError(f"the query ran past its {limits.timeout_s:g} s limit and was stopped") from None
        except duckdb.OutOfMemoryException as e:
            if "offload" in str(e):  # DuckDB could not spill: the temporary directory is full, or its limit reached
                raise QueryError(
                    f"the query needed more than its {limits.memory_mb:,} MiB of memory and {limits.spill_mb:,} MiB "
                    "of spill and was stopped (narrow it, or give it more with --memory-mb / --spill-mb)"
                ) from None
            raise QueryError(out_of_memory(limits)) from None
        except MemoryError:
            raise QueryError(out_of_memory(limits)) from None
        except duckdb.Error as e:
            raise QueryError(_one_line(e, a, archive)) from None
        finally:
            if timer:
                timer.cancel()


def _chunks(cur, limits: QueryLimits) -> Iterator[tuple[str, object]]:
    """Rows a chunk of about CHUNK_BYTES at a time (the first a row, to learn their size): never more than
    `max_rows` + 1 rows, nor more than `max_result_mb` of them, in memory at once."""
    budget = limits.max_result_mb * 2**20
    left = None if limits.max_rows is None else limits.max_rows + 1  # one more tells that more matched
    n = 1
    while left is None or left > 0:
        rows = cur.fetchmany(n if left is None else min(n, left))
        if not rows:
            break
        if left is not None:
            left -= len(rows)
        if left == 0:  # the row that says more matched is not returned
            rows = rows[:-1]
            if not rows:
                break
        blob = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
        if len(blob) > budget:
            rows = _fitting(rows, budget)
            if rows:
                yield "rows", (rows, pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL))
            yield "end", (left == 0, True)
            return
        budget -= len(blob)
        yield "rows", (rows, blob)
        n = max(1, min(8192, int(CHUNK_BYTES * len(rows) / len(blob))))
    yield "end", (left == 0, False)


def _fitting(rows: list, budget: int) -> list:
    """The first of `rows` that fit in `budget` bytes, pickled."""
    used = 0
    for i, row in enumerate(rows):
        used += len(pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL))
        if used > budget:
            return rows[:i]
    return rows


def out_of_memory(limits: QueryLimits) -> str:
    return (
        f"the query needed more than its {limits.memory_mb:,} MiB of memory and was stopped "
        "(narrow it, or give it more with --memory-mb)"
    )


def _one_line(e: Exception, a, archive) -> str:
    # imported on use: duckdb 153 ms to import
    import duckdb

    msg = str(e).splitlines()[0]
    # a missing segment: its sandbox refuses the directory glob DuckDB then tries
    if isinstance(e, (duckdb.IOException, duckdb.PermissionException)) and a.stale():
        return f"{archive}: {STALE}"
    if "read-only mode" in msg:
        return READ_ONLY
    if "expression depth" in msg:  # the binder counts the depth too, deeper than the parser
        return TOO_DEEP
    if "disabled by configuration" in msg or "configuration has been locked" in msg:
        return f"queries may not touch files or settings ({msg})"
    return msg


__all__ = [
    "run_query",
    "stream_query",
    "check_select",
    "QueryLimits",
    "QueryResult",
    "QueryError",
    "ArchiveError",
    "MEMORY_MB",
    "SPILL_MB",
    "MAX_RESULT_MB",
]
