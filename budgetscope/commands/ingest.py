"""`budgetscope ingest`: OTLP trace files into an archive."""

from __future__ import annotations

import json
import os
import sys

import click

from budgetscope.commands.new_archive import NewArchive, io_failure
from budgetscope.commands.options import FORMAT_SUMMARY, NEW_ARCHIVE, fail


class _Progress:
    """A one-line progress display on stderr, only when stderr is a terminal."""

    def __init__(self, total_bytes: int):
        self.total = max(total_bytes, 1)
        self.enabled = sys.stderr.isatty()
        self.done = 0

    def bytes(self, n: int) -> None:
        self.done = n
        self.show()

    def show(self, report=None) -> None:
        if self.enabled:
            rate = f", {report.spans_per_s:,.0f} spans/s" if report and report.seconds else ""
            click.echo(
                f"\r  {100 * self.done / self.total:5.1f}% of {self.total / 1e6:,.1f} MB{rate}   ", err=True, nl=False
            )

    def close(self) -> None:
        if self.enabled:
            click.echo("\r" + " " * 60 + "\r", err=True, nl=False)


def _ingest_entry(f: str, report) -> dict:
    """One file's ingest summary, as `--format json` prints it (docs/cli.md)."""
    return {
        "file": f,
        "batches": report.batches,
        "batches_landed": report.batches_landed,
        "batches_already_ingested": report.batches_already_ingested,
        "spans": report.spans,
        "spans_inserted": report.spans_inserted,
        "duplicate_spans": report.duplicate_spans,
        "requests_derived": report.requests_derived,
        "orphan_stage_spans": report.orphan_stage_spans,
        "gpu_points": report.gpu_points,
        "gpu_points_inserted": report.gpu_points_inserted,
        "seconds": round(report.seconds, 6),
        "rejected": [str(r) for r in report.rejected],
    }


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@NEW_ARCHIVE
@FORMAT_SUMMARY
def ingest(files: tuple[str, ...], archive: str, fmt: str) -> None:
    """Load OTLP trace files into an archive and derive one `requests` row per request.

    FILES are OpenTelemetry Collector file-exporter JSON lines, single OTLP/JSON documents, or binary OTLP
    protobuf (`ExportTraceServiceRequest`, bare or length-prefixed), each possibly gzip- or zstd-compressed
    (.gz, .zst; zstd needs `budgetscope[zstd]` before Python 3.14). Ingest is idempotent and atomic per
    batch: a bad batch lands not at all and is reported; the others land. Exits 2 if any batch was rejected,
    and, with one line and nothing written, if a FILE is no regular file with something in it or the archive
    cannot be written (a full disk, a read-only file system). An archive this command created stays only if
    something landed in it.

    The archive is a folder of Parquet segments (readable by any number of processes while one writes) or,
    for a path ending in .duckdb, a single DuckDB file.

    \b
      budgetscope ingest traces.jsonl --archive prod/
      budgetscope ingest traces.jsonl --archive prod/ --format json
    """
    from budgetscope.analysis.coverage import nothing_derived_warning, unclaimed_in, unclaimed_line
    from budgetscope.archive.errors import ArchiveError
    from budgetscope.ingest.files import check, input_problem, read_batches
    from budgetscope.opener import Archive
    from budgetscope.sources.formats import wrong_format

    rejected, entries, new, failed_files = [], [], None, False
    try:
        for f in files:
            if problem := input_problem(f):
                raise ArchiveError(f"{f}: {problem}")
            check(f)  # a compressed file that is cut short or cannot be read fails here, before anything is written
        new = NewArchive(archive)
        with Archive(archive) as a:
            for f in files:
                wrong = wrong_format(f, "otlp")
                if wrong:  # a tool's results, not spans: one line, not a rejection a line
                    click.echo(f"budgetscope: {wrong} (nothing from it landed)", err=True)
                    entries.append({"file": f, "rejected": wrong})
                    failed_files = True
                    continue
                progress = _Progress(os.path.getsize(f))
                report = a.ingest(read_batches(f, tracker=progress.bytes), progress=progress.show)
                progress.close()
                entries.append(_ingest_entry(f, report))
                if fmt == "table":
                    click.echo(_file_line(f, report))
                if report.orphan_stage_spans:
                    click.echo(
                        f"note: {report.orphan_stage_spans:,} stage spans have no request root yet; "
                        "they join their request when it arrives",
                        err=True,
                    )
                rejected += report.rejected
            counts = a.counts()
        discarded = new.discard_if_empty(counts)
    except ArchiveError as e:
        raise fail(e) from None
    except Exception as e:
        raise io_failure(e, archive, new) from None
    unclaimed = None if discarded else unclaimed_in(archive)
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "archive": archive,
                    "kept": not discarded,
                    "files": entries,
                    "counts": counts,
                    "unclaimed_spans": unclaimed,
                }
            )
        )
    elif discarded:
        click.echo(f"{archive}: nothing landed; not created")
    else:
        click.echo(f"{archive}: {counts['spans']:,} spans, {counts['requests']:,} requests")
        if line := unclaimed_line(unclaimed):
            click.echo(f"{archive}: {line}")
    if not discarded and (warning := nothing_derived_warning(counts["spans"], counts["requests"], unclaimed)):
        click.echo(f"budgetscope: {archive}: {warning}", err=True)
    _say_rejected(rejected)
    if rejected or failed_files:
        sys.exit(2)


def _file_line(f: str, report) -> str:
    """One file's line of the table summary."""
    return (
        f"{f}: {report.batches:,} batches, {report.spans:,} spans "
        f"({report.spans_inserted:,} new, {report.duplicate_spans:,} already stored), "
        f"{report.batches_already_ingested:,} batches already ingested; "
        f"{report.requests_derived:,} requests derived in {report.seconds:.2f} s "
        f"({report.spans_per_s:,.0f} spans/s)"
        + (
            f"; {report.gpu_points:,} GPU sample points ({report.gpu_points_inserted:,} new)"
            if report.gpu_points
            else ""
        )
    )


def _say_rejected(rejected: list, shown: int = 20) -> None:
    """The first `shown` rejected batches on stderr, one line each, and how many more."""
    for r in rejected[:shown]:
        click.echo(f"budgetscope: {r} (batch rejected; nothing from it landed)", err=True)
    if len(rejected) > shown:
        click.echo(f"budgetscope: … and {len(rejected) - shown} more rejected batches", err=True)
