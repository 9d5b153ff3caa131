"""Work shared out over cursors of one DuckDB connection, a few statements at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def on_cursors(con, fn: Callable[[object, T], R], items: Iterable[T], workers: int, name: str) -> list[R]:
    """[fn(c, item) for each item], in order: on `con` itself one after another when `workers` < 2, else `workers`
    at a time, each item on a cursor of its own (threads named `name`), closed after it. Every call has ended when
    this returns or raises; the first failure, in the items' order, is raised. A cursor sees only what `con` has
    committed."""
    items = list(items)
    if workers < 2:
        return [fn(con, item) for item in items]

    def on_cursor(item: T) -> R:
        cursor = con.cursor()
        try:
            return fn(cursor, item)
        finally:
            cursor.close()

    # imported on use: concurrent.futures
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers, thread_name_prefix=name) as pool:
        return list(pool.map(on_cursor, items))
