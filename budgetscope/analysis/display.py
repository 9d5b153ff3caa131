"""Values for people, chosen by the unit a column's name carries (`*_ns` a time, `*_bytes` bytes, `*_ms` a
duration): what the dashboard's tables and captions and the postmortem show instead of 1795395905579997569 or
4e+09. The archive keeps the raw values; the SQL page shows them as stored."""

from __future__ import annotations

from datetime import datetime, timezone

from budgetscope.analysis.verdict import ms

_BYTE_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def utc(ns: int | None) -> str:
    """ns since the epoch → '2026-01-01 00:00:01.250 UTC'; 'n/a' for None."""
    if ns is None:
        return "n/a"
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def size(n: float | None) -> str:
    """A byte count in decimal units, three significant digits: 4.00 GB, 512 kB."""
    if n is None:
        return "n/a"
    value, unit = float(n), 0
    while abs(value) >= 1000 and unit < len(_BYTE_UNITS) - 1:
        value, unit = value / 1000, unit + 1
    return (
        f"{value:.0f} B"
        if unit == 0
        else f"{value:.3g} {_BYTE_UNITS[unit]}"
        if abs(value) >= 100
        else f"{value:.2f} {_BYTE_UNITS[unit]}"
    )


def number(v: float | int | None) -> str:
    """A plain figure with thousands separators and never an exponent: 12,345, 0.0123, 3.5."""
    if v is None:
        return "n/a"
    if isinstance(v, int) or float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) >= 0.001 else f"{v:.2e}"


def value(name: str, v) -> str:
    """`v` of the column or signal `name`, in the unit its name says."""
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if name.endswith("_ns"):
        return utc(int(v))
    if name.endswith("_bytes"):
        return size(v)
    if name.endswith("_ms"):
        return ms(v)
    return number(v)


def column(name: str) -> str:
    """The header of a column shown for people: `arrival_ns` → `arrival (UTC)`; others unchanged."""
    return f"{name.removesuffix('_ns')} (UTC)" if name.endswith("_ns") else name


def table(columns: list[str], rows: list[tuple]) -> list[dict]:
    """Rows as {header: value} with times as UTC strings and bytes in units; ids, counts and ms stay as they are
    (numbers sort as numbers in a table)."""
    out = []
    for row in rows:
        out.append(
            {
                column(c): (value(c, v) if c.endswith(("_ns", "_bytes")) and v is not None else v)
                for c, v in zip(columns, row)
            }
        )
    return out


def moved(signals: dict[str, dict]) -> str:
    """A breach window's `what_moved` in one line: `hbm_used_bytes 4.00 GB vs 3.10 GB; queue_depth_mean 12 vs 0.5`
    (mean inside the window vs outside), signals with no value inside left out."""
    return "; ".join(
        f"{k} {value(k, v['inside'])} vs {value(k, v['outside'])}"
        for k, v in signals.items()
        if v["inside"] is not None
    )


def change(before: float | None, after: float | None, unit: str, digits: int = 1) -> str | None:
    """The change from `before` to `after` as shown beside a figure (`+2.5 pts`), or None, drawn as no change at
    all, when either is unknown or the change rounds to zero: never a green "↑ +0.0"."""
    if before is None or after is None or round(after - before, digits) == 0:
        return None
    return f"{after - before:+.{digits}f} {unit}".rstrip()
