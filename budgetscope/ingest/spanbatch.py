"""Decoded-but-unvalidated spans held as columns, ready to be staged for validation in one insert.

Decoders only extract; `budgetscope.ingest.staging` validates every span the same way, whatever decoded it.
"""

from __future__ import annotations

COLUMNS = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "start_raw",
    "end_raw",
    "service_name",
    "scope_name",
    "status_raw",
    "attributes",
    "resource",
)


class BadBatch(ValueError):
    """A batch that cannot land. The message is one line and says what is wrong."""


class SpanBatch:
    """Columns of raw span fields (ids as text, times as decimal text, attributes as JSON text)."""

    __slots__ = COLUMNS

    def __init__(self) -> None:
        for c in COLUMNS:
            setattr(self, c, [])

    def __len__(self) -> int:
        return len(self.trace_id)

    def append(
        self,
        trace_id,
        span_id,
        parent,
        name,
        kind,
        start,
        end,
        service,
        scope,
        status,
        attributes: bytes,
        resource: bytes,
    ) -> None:
        self.trace_id.append(trace_id)
        self.span_id.append(span_id)
        self.parent_span_id.append(parent)
        self.name.append(name)
        self.kind.append(None if kind is None else str(kind))
        self.start_raw.append(None if start is None else str(start))
        self.end_raw.append(None if end is None else str(end))
        self.service_name.append(service)
        self.scope_name.append(scope)
        self.status_raw.append(None if status is None else str(status))
        self.attributes.append(attributes)
        self.resource.append(resource)

    def to_arrow(self, batch_id: int):
        """A pyarrow table in the column order of the staging table."""
        # imported on use: pyarrow 1027 ms to import
        import pyarrow as pa

        cols = {"batch_id": pa.array([batch_id] * len(self), type=pa.int64())}
        for c in COLUMNS:
            v = getattr(self, c)
            cols[c] = (
                pa.array(v, type=pa.binary()).cast(pa.string())
                if c in ("attributes", "resource")
                else pa.array(v, type=pa.string())
            )
        return pa.table(cols)
