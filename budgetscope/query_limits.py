"""What one sandboxed query may use (budgetscope/query.py): DuckDB's memory and spill, the rows and bytes it
returns, its time. The same defaults for `budgetscope query` and the dashboard's SQL page (which returns less)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from budgetscope.query_check import MAX_DEPTH

MEMORY_MB = 1024
"""DuckDB's memory for one query (`memory_limit`), unless the caller gives another."""
SPILL_MB = 2048
"""What one query may spill to disk (`max_temp_directory_size`), unless the caller gives another."""
MAX_RESULT_MB = 256
"""The rows one query may return, in MiB as pickled, unless the caller gives another."""


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """What one query may use. `memory_mb`: DuckDB's memory; `spill_mb`: its temporary files (0: no spilling);
    `max_rows`: rows returned (more matched: `truncated`); `max_result_mb`: the returned rows' size (more:
    `oversize`); `timeout_s`: seconds from the check to the last row (None: no limit)."""

    memory_mb: int = MEMORY_MB
    spill_mb: int = SPILL_MB
    max_rows: int | None = None
    max_result_mb: int = MAX_RESULT_MB
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.memory_mb < 64 or self.spill_mb < 0 or self.max_result_mb < 1:
            raise ValueError(f"limits out of range: {self}")
        if (self.max_rows is not None and self.max_rows < 1) or (self.timeout_s is not None and self.timeout_s <= 0):
            raise ValueError(f"limits out of range: {self}")

    def settings(self, spill_dir: str | os.PathLike) -> dict:
        """DuckDB's settings for these limits, fixed before the sandbox locks the configuration."""
        return {
            "memory_limit": f"{self.memory_mb}MiB",
            "max_temp_directory_size": f"{self.spill_mb}MiB",
            "temp_directory": str(spill_dir),
            "max_expression_depth": MAX_DEPTH,
            "python_enable_replacements": False,  # no Python variable is a table in here
        }


__all__ = ["QueryLimits", "MEMORY_MB", "SPILL_MB", "MAX_RESULT_MB"]
