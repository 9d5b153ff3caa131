"""What the archive's writers offer the layers above them, and what they are handed in return.

`Writer` is what `DuckDBArchive` (a single file) and `DirectoryArchive` (a folder) share: a working set to land
in (`con`, `transaction()`), the spool a durable folder writer keeps, and the steps around a derivation
(`before_derive` reads published spans back, `after_derive` commits segments; `bring_back` and
`published_requests` read other traces for a derivation that needs them). The collector and the `Lander` see
a writer through it alone. `Landing` is what lands and derives for a writer (`budgetscope.ingest.lander.Lander`,
handed to it by `budgetscope.opener`): the archive only stores, and imports neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol


class Landing(Protocol):
    def land(
        self, batches: Iterable[Any], progress: Callable[[Any], None] | None = None, derive: bool = True
    ) -> Any: ...

    def commit(self, count_orphans: bool = True) -> tuple[int, int]: ...


class Writer(Protocol):
    path: Path
    con: Any  # the DuckDB connection of the working set: the tables of budgetscope/schema.py
    read_only: bool
    single_file: bool  # True: each landing commits to the file; False: `after_derive` commits segments
    spool: Any  # the durable writer's `spool.Spool`, else None
    spool_cut: int  # spool files up to this number hold only batches landed in the working set
    track_derivations: bool  # derivations record what they derived and replaced, for `publish`
    republished: int  # spans of the current landing dropped as copies of published ones
    recovered: tuple[int, int]  # (batches, spans) that an earlier writer had left in the spool
    lander: Landing | None

    def transaction(self) -> Any: ...

    def refuse_writes(self) -> None: ...

    def pending_traces(self) -> int: ...

    def before_derive(self) -> None: ...

    def after_derive(self) -> None: ...

    def bring_back(self, traces: str) -> None: ...

    def published_requests(self, lo_ns: int | None, hi_ns: int | None) -> str | None: ...

    def new_spans(self) -> str: ...

    def spooled(self) -> Iterable[Any] | None: ...

    def recovered_done(self) -> None: ...

    def close(self) -> None: ...
