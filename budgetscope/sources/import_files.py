"""One file of another tool into an open archive: a benchmark export (vllm-bench, aiperf, guidellm), vLLM offline
metrics, a Triton trace file or saved Prometheus `/metrics` text (`budgetscope import`, docs/sources.md).

Each file is one batch: it lands whole or not at all, and the same file lands once (recorded in ingest_batches).
Into an archive this process writes (`land_here`), or one a running collector writes, through that collector
(`land_through`, collector/endpoint.py): the same bytes either way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from budgetscope.archive.archive import is_single_file
from budgetscope.archive.reader import ArchiveReader
from budgetscope.archive.spool import RawBatch
from budgetscope.ingest.batches import content_hash
from budgetscope.sources import guidellm, importers, joins, vllm_offline
from budgetscope.sources.formats import JOINED, wrong_format
from budgetscope.sources.prometheus import PrometheusError, parse
from budgetscope.sources.server_metrics import land, scrape_digest, scrape_document


class NotImported(Exception):
    """A file that is not what it was said to be: one line naming it (and the command that reads it, when it is
    another known format). Nothing of it landed."""


@dataclass(slots=True)
class Built:
    """A file read and turned into what lands: an OTLP/JSON document of spans (`doc`), or for `prometheus` a
    scrape (`scrape`: its text and where and when it was scraped) with its samples counted."""

    path: Path
    kind: str
    doc: bytes | None = None
    scrape: dict | None = None
    samples: int = 0

    @property
    def batch(self) -> RawBatch:
        """The spans as the batch that lands, here or through a collector (the same bytes: it lands once)."""
        return RawBatch(self.doc, "otlp-json", str(self.path), f"{self.kind} file")


def build(
    path: Path,
    kind: str,
    *,
    start_ns: int | None = None,
    clock_offset_ns: int | None = None,
    service_name: str | None = None,
) -> Built:
    """Read the file `path` of `kind` into what lands. `start_ns`: vllm-bench's start, or prometheus' scrape time
    (int64 ns; default its `date`, or the file's modification time). Raises NotImported."""
    data = path.read_bytes()
    try:
        if kind == "prometheus":
            body = data.decode("utf-8", "replace")
            scrape = {
                "body": body,
                "instance": str(path),
                "service_name": service_name or path.stem,
                "ts_ns": start_ns if start_ns is not None else path.stat().st_mtime_ns,
                "origin": str(path),
                "position": "document",
            }
            return Built(path, kind, scrape=scrape, samples=len(parse(body)))
        return Built(path, kind, doc=_spans_document(path, data, kind, start_ns, clock_offset_ns))
    except (importers.ImportFormatError, PrometheusError) as e:
        said = str(e) if str(e).startswith(str(path)) else f"{path}: {e}"
        raise NotImported(wrong_format(path, kind) or said) from None


def import_file(a, archive: str, path: Path, kind: str, **options) -> dict:
    """Land the file `path` of `kind` in the archive `a`, open for writing at `archive`; return its summary entry
    (docs/cli.md, `import --format json`). `options`: those of `build`. Raises NotImported."""
    return land_here(a, archive, build(path, kind, **options))


def land_here(a, archive: str, built: Built) -> dict:
    """Land what `build` made in the archive `a` this process writes (open at `archive`); its summary entry."""
    path = str(built.path)
    if built.scrape is not None:
        return {"file": path, "samples": land(a, **_scrape_args(built.scrape)), "rejected": None}
    report = a.ingest([built.batch])
    entry = {
        "file": path,
        "spans": report.spans,
        "spans_inserted": report.spans_inserted,
        "already_imported": report.batches_already_ingested > 0,
        "requests_derived": report.requests_derived,
        "rejected": str(report.rejected[0]) if report.rejected else None,
    }
    if built.kind in JOINED and not report.rejected:
        entry |= joined_entry(_joins(a, archive, joins.request_ids(built.doc)), path, built.kind)
    return entry


VISIBLE_WITHIN_S = 30.0
"""How long `land_through` waits for the collector's commit to show a batch it took (it commits about once a
second)."""


def land_through(client, archive: str, built: Built, wait_s: float = VISIBLE_WITHIN_S) -> dict:
    """Send what `build` made to `client` (`collector.endpoint.CollectorClient`: the collector writing
    `archive`), wait for a reader to see it (up to `wait_s`), and return its summary entry: the same fields as
    `land_here`'s, `requests_derived` None (the collector derives them with whatever else it holds), and
    `through_collector` its pid. Raises `CollectorUnreachable` when the collector does not take it."""
    path = str(built.path)
    if built.scrape is not None:
        digest = scrape_digest(built.scrape["instance"], built.scrape["ts_ns"], built.scrape["body"])
        before = _batch_row(archive, digest)
        client.send_scrape(scrape_document(**_scrape_args(built.scrape)))
        seen = before or _wait_for(archive, digest, wait_s)
        entry = {"file": path, "samples": 0 if before else built.samples, "rejected": None}
        return entry | _through(client, seen, wait_s)
    digest = content_hash(built.batch)
    before = _batch_row(archive, digest)
    client.send_spans(built.doc, origin=path)
    seen = before or _wait_for(archive, digest, wait_s)
    entry = {
        "file": path,
        "spans": seen[0] if seen else None,
        "spans_inserted": 0 if before else (seen[1] if seen else None),
        "already_imported": before is not None,
        "requests_derived": None,
        "rejected": None,
    }
    if built.kind in JOINED and seen:
        entry |= joined_entry(_joins(None, archive, joins.request_ids(built.doc)), path, built.kind)
    return entry | _through(client, seen, wait_s)


def _through(client, seen, wait_s: float) -> dict:
    entry = {"through_collector": client.endpoint.pid}
    if not seen:  # taken (safe in its spool), but no commit showed it yet: a full disk, say
        entry["warning"] = (
            f"{client.who} took it, but no commit of it showed it within {wait_s:.0f} s; it lands with the "
            "collector's next commit"
        )
    return entry


def _batch_row(archive: str, digest: str) -> tuple[int, int] | None:
    """(spans, spans new to the archive) of the batch with this content hash, as a reader sees the archive
    now; None while it is not there."""
    with ArchiveReader(archive) as r:
        row = r.con.execute(
            "SELECT span_count, spans_inserted FROM ingest_batches WHERE content_hash = ?", [digest]
        ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def _wait_for(archive: str, digest: str, wait_s: float) -> tuple[int, int] | None:
    deadline = time.monotonic() + wait_s
    while True:
        seen = _batch_row(archive, digest)
        if seen is not None or time.monotonic() >= deadline:
            return seen
        time.sleep(0.2)


def _scrape_args(scrape: dict) -> dict:
    return {"body": scrape["body"]} | {k: v for k, v in scrape.items() if k != "body"}


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


def _joins(a, archive: str, ids: dict[str, str]) -> joins.JoinReport:
    """What became of the records `ids` (client span id → request id) once landed in the archive at `archive`
    (`a`: its writer, open here, or None)."""
    if a is not None and is_single_file(archive):
        return joins.join_report(a.con, ids)
    with ArchiveReader(archive) as r:
        return joins.join_report(r.con, ids)
