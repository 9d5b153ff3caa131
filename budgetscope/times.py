"""Times given on a command line: ns since the Unix epoch, or ISO-8601 with a zone."""

from __future__ import annotations

from datetime import datetime


def parse_time_ns(value: str | None, option: str) -> int | None:
    """`value` as ns since the epoch (None stays None); ValueError naming `option` when it is neither form."""
    if value is None:
        return None
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{option}: {value!r} is neither ns since the epoch nor an ISO-8601 time") from None
    if dt.tzinfo is None:
        raise ValueError(f"{option}: {value!r} has no time zone (add Z or +00:00)")
    return int(dt.timestamp() * 1e9)
