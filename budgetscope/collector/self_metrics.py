"""The collector's own figures in the Prometheus text format (version 0.0.4), served at `GET /metrics` on its
OTLP/HTTP port, as the OpenTelemetry Collector serves its own telemetry: what was received, landed, rejected and
refused, the bytes pending, and how long ago the archive last committed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from budgetscope.collector.writer import CollectorStats

METRICS_PATH = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "budgetscope_collector_"


def _family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> Iterator[str]:
    """The lines of one metric family: HELP, TYPE, then `name{labels} value` per (labels, value). A counter's
    name ends in `_total` on its HELP and TYPE lines too: in the text format 0.0.4 a family's samples carry its name
    as it is, and Prometheus types a sample by the TYPE line of that name."""
    full = f"{PREFIX}{name}{'_total' if kind == 'counter' else ''}"
    yield f"# HELP {full} {help_text}"
    yield f"# TYPE {full} {kind}"
    for labels, value in samples:
        yield f"{full}{labels} {value}"


def _named_family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> Iterator[str]:
    """The lines of a family named in full (a counter's name ends in `_total`); a sample's labels may start with
    the suffix of a histogram's series (`_bucket{...}`, `_sum`, `_count`)."""
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} {kind}"
    for labels, value in samples:
        yield f"{name}{labels} {value}"


def render(
    stats: CollectorStats,
    pending_bytes: int,
    max_pending_bytes: int,
    refused_connections: int,
    now_ns: int | None = None,
    extra: list[tuple[str, str, str, list[tuple[str, float]]]] = (),
) -> bytes:
    """The exposition of one snapshot. Counters count since the collector started; `commit_age_seconds` is the
    time since the archive last committed (spans landed or requests derived), or since the start before any.
    `extra`: families named in full (`collect --budgets`: the live SLIs and the attribution gauges)."""
    now_ns = time.monotonic_ns() if now_ns is None else now_ns
    since = stats.last_commit_ns or stats.started_ns
    families = [
        ("batches_received", "counter", "OTLP export requests that reached the writer.", [("", stats.batches)]),
        (
            "batches_landed",
            "counter",
            "Export requests whose spans are new in the archive.",
            [("", stats.batches_landed)],
        ),
        (
            "batches_already_stored",
            "counter",
            "Export requests whose identical bytes had landed before (a retry).",
            [("", stats.batches_already_stored)],
        ),
        (
            "batches_rejected",
            "counter",
            "Export requests that were not OTLP or held a bad span (400).",
            [("", stats.batches_rejected)],
        ),
        (
            "batches_failed",
            "counter",
            "Export requests the archive failed to store (503).",
            [("", stats.batches_failed)],
        ),
        (
            "requests_refused",
            "counter",
            "Export requests refused before reading: busy (429) or closing (503).",
            [('{reason="busy"}', stats.refused_busy), ('{reason="closing"}', stats.refused_closed)],
        ),
        (
            "connections_refused",
            "counter",
            "HTTP connections over the connection limit (503, closed).",
            [("", refused_connections)],
        ),
        ("spans_landed", "counter", "Spans in the landed export requests.", [("", stats.spans)]),
        ("requests_derived", "counter", "`requests` rows derived.", [("", stats.requests_derived)]),
        ("pending_bytes", "gauge", "Bytes accepted but not yet answered.", [("", pending_bytes)]),
        (
            "pending_bytes_limit",
            "gauge",
            "The pending bytes past which exports are refused (429).",
            [("", max_pending_bytes)],
        ),
        (
            "commit_age_seconds",
            "gauge",
            "Seconds since the archive last committed (the commit lag).",
            [("", round((now_ns - since) / 1e9, 3))],
        ),
    ]
    lines = [line for family in families for line in _family(*family)]
    lines += [line for family in extra for line in _named_family(*family)]
    return ("\n".join(lines) + "\n").encode()
