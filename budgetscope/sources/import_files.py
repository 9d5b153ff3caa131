"""One file of another tool into an open archive: a benchmark export (vllm-bench, aiperf, guidellm), vLLM offline
metrics, a Triton trace file or saved Prometheus `/metrics` text (`budgetscope import`, docs/sources.md).

Each file is one batch: it lands whole or not at all, and the same file lands once (recorded in ingest_batches).
"""

from __future__ import annotations

from pathlib import Path

from budgetscope.archive.archive import is_single_file
from budgetscope.archive.reader import ArchiveReader
from budgetscope.archive.spool import RawBatch
from budgetscope.sources import guidellm, importers, joins, vllm_offline
from budgetscope.sources.formats import JOINED, wrong_format
from budgetscope.sources.prometheus import PrometheusError
from budgetscope.sources.server_metrics import land


class NotImported(Exception):
    """A file that is not what it was said to be: one line naming it (and the command that reads it, when it is
    another known format). Nothing of it landed."""


def import_file(
    a,
    archive: str,
    path: Path,
    kind: str,
    *,
    start_ns: int | None = None,
    clock_offset_ns: int | None = None,
    service_name: str | None = None,
) -> dict:
    """Land the file `path` of `kind` in the archive `a`, open for writing at `archive`; return its summary entry
    (docs/cli.md, `import --format json`). `start_ns`: vllm-bench's start, or prometheus' scrape time (int64 ns;
    default its `date`, or the file's modification time). Raises NotImported."""
    data = path.read_bytes()
    try:
        if kind == "prometheus":
            return _land_metrics(a, path, data, start_ns, service_name)
        doc = _spans_document(path, data, kind, start_ns, clock_offset_ns)
    except (importers.ImportFormatError, PrometheusError) as e:
        said = str(e) if str(e).startswith(str(path)) else f"{path}: {e}"
        raise NotImported(wrong_format(path, kind) or said) from None
    report = a.ingest([RawBatch(doc, "otlp-json", str(path), f"{kind} file")])
    entry = {
        "file": str(path),
        "spans": report.spans,
        "spans_inserted": report.spans_inserted,
        "already_imported": report.batches_already_ingested > 0,
        "requests_derived": report.requests_derived,
        "rejected": str(report.rejected[0]) if report.rejected else None,
    }
    if kind in JOINED and not report.rejected:
        entry |= joined_entry(_joins(a, archive, joins.request_ids(doc)), str(path), kind)
    return entry


def joined_entry(rep: joins.JoinReport, path: str, kind: str) -> dict:
    """The summary entry's fields of what became of a file's records (docs/cli.md)."""
    return {
        "joined_to_server_rows": rep.joined,
        "no_server_row": rep.no_server_row,
        "ambiguous_request_ids": rep.ambiguous,
        "warning": rep.warning(path, JOIN_KEYS[kind]),
    }


JOIN_KEYS = {"aiperf": "x_request_id", "guidellm": "response_id"}
"""What each tool calls the request id its records are joined by."""


def _spans_document(path: Path, data: bytes, kind: str, start_ns: int | None, clock_offset_ns: int | None) -> bytes:
    """The file's records as one OTLP/JSON document of spans."""
    if kind == "vllm-bench":
        return importers.vllm_bench(path, data, start_ns)
    if kind == "aiperf":
        return importers.aiperf(path, data)
    if kind == "guidellm":
        return guidellm.guidellm(path, data)
    if kind == "vllm-metrics":
        return vllm_offline.vllm_metrics(path, data)
    return importers.triton(path, data, clock_offset_ns)


def _land_metrics(a, path: Path, data: bytes, ts_ns: int | None, service_name: str | None) -> dict:
    """Prometheus text into server_metrics, scraped at `ts_ns` (default the file's modification time)."""
    n = land(
        a,
        data.decode("utf-8", "replace"),
        instance=str(path),
        service_name=service_name or path.stem,
        ts_ns=ts_ns if ts_ns is not None else path.stat().st_mtime_ns,
        origin=str(path),
        position="document",
    )
    return {"file": str(path), "samples": n, "rejected": None}


def _joins(a, archive: str, ids: dict[str, str]) -> joins.JoinReport:
    """What became of the records `ids` (client span id → request id) once landed in `a` (open at `archive`)."""
    if is_single_file(archive):
        return joins.join_report(a.con, ids)
    with ArchiveReader(archive) as r:
        return joins.join_report(r.con, ids)
