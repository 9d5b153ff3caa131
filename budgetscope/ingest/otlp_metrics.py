"""Decoder for OTLP metrics exports (`ExportMetricsServiceRequest`, JSON or protobuf) into `gpu_samples` rows.

What lands: every number data point (gauge or sum) that names a GPU (`gpu.uuid`, else `hw.id`, on the point or
its resource), with its own `timeUnixNano`. Metrics that name no GPU are skipped and counted, not an error (an
SDK pointed at the collector sends its own). A batch lands whole or not at all: a point without a valid time or
value, a `gpu.index` that is not an integer, or a GPU id or `host.name` that is not a string, rejects the batch
with a one-line `BadBatch`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson
from google.protobuf.message import DecodeError

from budgetscope.ingest.otlp_json import attributes as json_attributes
from budgetscope.ingest.otlp_proto import _attrs
from budgetscope.ingest.spanbatch import BadBatch

JSON = "otlp-metrics-json"
PROTO = "otlp-metrics-proto"
FORMATS = (JSON, PROTO)
_EMPTY: dict = {}
_NONFINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


@dataclass(slots=True)
class PointRows:
    """Decoded points as columns, in `gpu_samples` order (less `batch_id`)."""

    ts_ns: list = field(default_factory=list)
    host_name: list = field(default_factory=list)
    gpu_uuid: list = field(default_factory=list)
    gpu_index: list = field(default_factory=list)
    metric: list = field(default_factory=list)
    value: list = field(default_factory=list)
    unit: list = field(default_factory=list)
    skipped: int = 0  # points that name no GPU

    def __len__(self) -> int:
        return len(self.ts_ns)

    def add(self, where: str, ts, host, uuid, index, metric, value, unit) -> None:
        try:
            t = int(ts) if ts is not None else 0
        except (TypeError, ValueError):
            raise BadBatch(f"{where}: invalid timeUnixNano {ts!r}") from None
        if t <= 0:
            raise BadBatch(f"{where}: no timeUnixNano")
        # gpu_samples holds BIGINT ns and an INTEGER index: past them the batch is bad, not the archive
        # (pyarrow's OverflowError had failed the whole ingest; found by fuzz/targets.py otlp_metrics)
        if t >= 1 << 63:
            raise BadBatch(f"{where}: invalid timeUnixNano {ts!r} (past 2262)")
        if value is None:
            raise BadBatch(f"{where}: no value (asDouble or asInt)")
        # pyarrow's ArrowTypeError on an intValue id had failed the whole ingest (fuzz/targets.py otlp_metrics)
        for name, v in (("gpu.uuid (or hw.id)", uuid), ("host.name", host)):
            if v is not None and not isinstance(v, str):
                raise BadBatch(f"{where}: {name} {v!r} is not a string")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            try:
                index = int(index)
            except (TypeError, ValueError):
                raise BadBatch(f"{where}: gpu.index {index!r} is not an integer") from None
        if index is not None and not -(1 << 31) <= index < 1 << 31:
            raise BadBatch(f"{where}: gpu.index {index!r} is out of range")
        self.ts_ns.append(t)
        self.host_name.append(host)
        self.gpu_uuid.append(uuid)
        self.gpu_index.append(index)
        self.metric.append(metric)
        self.value.append(value)
        self.unit.append(unit or None)

    def to_arrow(self, batch_id: int):
        # imported on use: pyarrow 1027 ms to import
        import pyarrow as pa

        return pa.table(
            {
                "ts_ns": pa.array(self.ts_ns, pa.int64()),
                "host_name": pa.array(self.host_name, pa.string()),
                "gpu_uuid": pa.array(self.gpu_uuid, pa.string()),
                "gpu_index": pa.array(self.gpu_index, pa.int32()),
                "metric": pa.array(self.metric, pa.string()),
                "value": pa.array(self.value, pa.float64()),
                "unit": pa.array(self.unit, pa.string()),
                "batch_id": pa.array([batch_id] * len(self), pa.int64()),
            }
        )


def _gpu(point: dict, resource: dict) -> tuple:
    uuid = point.get("gpu.uuid") or point.get("hw.id") or resource.get("gpu.uuid") or resource.get("hw.id")
    index = point["gpu.index"] if "gpu.index" in point else resource.get("gpu.index")
    host = point.get("host.name") or resource.get("host.name")
    return uuid, index, host


def _json_value(dp: dict):
    if "asDouble" in dp:
        v = dp["asDouble"]
        if isinstance(v, str):
            if v in _NONFINITE:
                return _NONFINITE[v]
            try:
                return float(v)
            except ValueError:
                raise BadBatch(f"invalid asDouble {v!r}") from None
        return None if v is None else float(v)
    if "asInt" in dp:
        try:
            return float(int(dp["asInt"]))
        except (TypeError, ValueError):
            raise BadBatch(f"invalid asInt {dp['asInt']!r}") from None
    return None


def decode_json(raw: bytes) -> PointRows:
    """Decode one OTLP/JSON metrics export (`{"resourceMetrics": [...]}`)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise BadBatch(f"not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceMetrics"), list):
        what = f"keys {sorted(doc)[:5]}" if isinstance(doc, dict) else f"a JSON {type(doc).__name__}"
        raise BadBatch(f"not an OTLP metrics export: no 'resourceMetrics' list (found {what})")
    rows = PointRows()
    try:
        for rm in doc["resourceMetrics"]:
            res = json_attributes((rm.get("resource") or _EMPTY).get("attributes", ()))
            for sm in rm.get("scopeMetrics", ()):
                for m in sm.get("metrics", ()):
                    name, unit = m.get("name"), m.get("unit")
                    data = m.get("gauge") or m.get("sum")
                    if not name or data is None:
                        continue  # histograms and summaries: not GPU samples
                    for i, dp in enumerate(data.get("dataPoints", ())):
                        uuid, index, host = _gpu(json_attributes(dp.get("attributes", ())), res)
                        if not uuid:
                            rows.skipped += 1
                            continue
                        where = f"metric {name!r} point {i}"
                        try:
                            value = _json_value(dp)
                        except BadBatch as e:
                            raise BadBatch(f"{where}: {e}") from None
                        rows.add(where, dp.get("timeUnixNano"), host, uuid, index, name, value, unit)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, BadBatch):
            raise
        raise BadBatch(f"malformed OTLP JSON metrics ({type(e).__name__}: {e})") from None
    return rows


def _parse_proto(payload: bytes):
    # imported on use: the OTLP protobuf classes 64 ms to import
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    msg = ExportMetricsServiceRequest()
    try:
        msg.ParseFromString(payload)
    except DecodeError as e:
        raise BadBatch(f"not an OTLP protobuf metrics export ({e})") from None
    return msg


def decode_proto(payload: bytes) -> PointRows:
    """Decode one serialized `ExportMetricsServiceRequest`."""
    msg = _parse_proto(payload)
    if payload and not msg.resource_metrics:
        raise BadBatch("not an OTLP protobuf metrics export (no resource metrics in a non-empty message)")
    rows = PointRows()
    for rm in msg.resource_metrics:
        res = _attrs(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                which = m.WhichOneof("data")
                if which not in ("gauge", "sum"):
                    continue
                for i, dp in enumerate(getattr(m, which).data_points):
                    uuid, index, host = _gpu(_attrs(dp.attributes), res)
                    if not uuid:
                        rows.skipped += 1
                        continue
                    kind = dp.WhichOneof("value")
                    value = None if kind is None else float(getattr(dp, kind))
                    rows.add(
                        f"metric {m.name!r} point {i}", dp.time_unix_nano, host, uuid, index, m.name, value, m.unit
                    )
    return rows


def decode(payload: bytes, fmt: str) -> PointRows:
    """Decode a metrics batch of format `otlp-metrics-json` or `otlp-metrics-proto`."""
    return decode_json(payload) if fmt == JSON else decode_proto(payload)


INSERT_NEW = """
INSERT INTO gpu_samples SELECT * FROM (
  SELECT ts_ns, host_name, gpu_uuid, gpu_index, metric, value, unit, batch_id FROM bs_points
  QUALIFY row_number() OVER (PARTITION BY ts_ns, gpu_uuid, metric ORDER BY value) = 1) n
WHERE NOT EXISTS (SELECT 1 FROM gpu_samples g
                  WHERE g.ts_ns = n.ts_ns AND g.gpu_uuid = n.gpu_uuid AND g.metric = n.metric)"""


def land(con, rows: PointRows, batch_id: int) -> int:
    """Insert the points new to `gpu_samples` (same time, GPU and metric: already there); return how many."""
    if not len(rows):
        return 0
    con.register("bs_points", rows.to_arrow(batch_id))
    try:
        ((before,),) = con.execute("SELECT count(*) FROM gpu_samples WHERE batch_id = ?", [batch_id]).fetchall()
        con.execute(INSERT_NEW).fetchall()
        ((after,),) = con.execute("SELECT count(*) FROM gpu_samples WHERE batch_id = ?", [batch_id]).fetchall()
    finally:
        con.unregister("bs_points")
    return after - before


# -- telling metrics from traces --------------------------------------------------------------------------------
def is_metrics_json(payload: bytes) -> bool:
    """An OTLP/JSON metrics export: its top-level key (written first by every exporter) is `resourceMetrics`."""
    head = bytes(payload[:256])
    return b'"resourceMetrics"' in head and b'"resourceSpans"' not in head


def is_metrics_proto(payload: bytes) -> bool:
    """A protobuf message that parses as a metrics export with at least one named gauge or sum.

    Traces and metrics requests share field 1, so the bytes alone decide: a trace export's spans do not parse
    as metrics with data (a span's name, field 5, is not a valid `Gauge` message)."""
    try:
        msg = _parse_proto(payload)
    except BadBatch:
        return False
    return any(
        m.name and m.WhichOneof("data") in ("gauge", "sum")
        for rm in msg.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    )
