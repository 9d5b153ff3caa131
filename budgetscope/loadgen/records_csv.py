"""Per-request records of a load run as CSV: one row a request (warm-up included, flagged), the columns of
`RequestRecord.to_dict` - times in Unix-epoch ns, figures in ms, empty where unknown."""

from __future__ import annotations

import csv
from typing import TextIO

from budgetscope.loadgen.records import RequestRecord


def columns() -> list[str]:
    """The CSV header: `RequestRecord.to_dict`'s keys, in order."""
    return list(RequestRecord(0, 0, 0, 0).to_dict(0))


def write_csv(result, out: TextIO) -> int:
    """Write every request of `result` (a LoadResult) to `out`; returns the number of rows. `itl_ms` is the gaps
    joined by spaces (one cell), booleans are true/false."""
    writer = csv.writer(out, lineterminator="\n")
    names = columns()
    writer.writerow(names)
    rows = sorted(result.warmup_records + result.records, key=lambda r: r.index)
    for rec in rows:
        d = rec.to_dict(result.unix0)
        writer.writerow([_cell(d[k]) for k in names])
    return len(rows)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)
