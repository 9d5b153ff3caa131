"""`budgetscope import`: third-party files (benchmark exports, Triton traces, `/metrics` text) into an archive."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from budgetscope.commands.live import AUTH_TOKEN_FILE, collector_for
from budgetscope.commands.options import NEW_ARCHIVE, UsageError, time_ns
from budgetscope.sources.formats import IMPORT_KINDS, JOINED


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--from", "kind", type=click.Choice(IMPORT_KINDS), help="What the files are (see docs/sources.md).")
@click.option(
    "--format",
    "formats",
    multiple=True,
    type=click.Choice([*IMPORT_KINDS, "table", "json"]),
    help="table|json: the summary on stdout (default table). Also takes what the files are, as --from "
    "does: `--format vllm-bench --format json`.",
)
@NEW_ARCHIVE
@click.option(
    "--start",
    help="vllm-bench: when the run started (ISO-8601 or ns; default its `date`, as UTC); "
    "prometheus: the scrape time (default the file's modification time).",
)
@click.option(
    "--clock-offset-ns",
    type=int,
    help="triton: Unix ns minus Triton's steady-clock ns (default: anchor the file's last timestamp at "
    "its modification time).",
)
@click.option("--service-name", help="prometheus: the server's name in server_metrics (default: the file name).")
@AUTH_TOKEN_FILE
def import_(files, kind, formats, archive, start, clock_offset_ns, service_name, auth_token_file) -> None:
    """Import benchmark exports, vLLM offline metrics, Triton trace files or saved `/metrics` text into an archive.

    Every file is one batch: it lands whole or not at all, and the same file lands once (recorded in
    ingest_batches). Requests become `llm.client.request` spans (vllm-bench, aiperf, guidellm), vLLM `llm_request`
    spans (vllm-metrics: offline `RequestOutput.metrics` as JSON lines) or Triton `InferRequest` spans, derived
    into `requests` like any ingest; Prometheus text goes to `server_metrics`. An archive this command created
    stays only if something landed in it. AIPerf and GuideLLM records join the server row of the same request by
    the id the tool recorded (AIPerf `x_request_id`, GuideLLM `response_id`): one row a request, with network
    derived, whether the server's spans landed before or land after; a warning names the records not joined.
    Into an archive that `budgetscope collect` is writing, the files go through that collector (the same
    command; --auth-token-file when it takes a token), and the summary follows its next commit. AIPerf's raw export
    (`profile_export_raw.jsonl`, `--export-level raw`) beside `profile_export.jsonl` is read with it: each
    request's first-event time, so the network share of TTFT. A file of another known format is named in one line
    with the command that reads it.

    \b
      budgetscope import --from vllm-bench result.json --archive runs/
      budgetscope import --from vllm-bench result.json --archive runs/ --format json
      budgetscope import --from aiperf artifacts/*/profile_export.jsonl --archive runs/
      budgetscope import --from guidellm benchmarks.json --archive runs/
      budgetscope import --from vllm-metrics vllm-metrics.jsonl --archive runs/
      budgetscope import --from triton trace.json --archive runs/
      budgetscope import --from prometheus metrics.txt --start 2026-01-01T10:00:00Z --archive runs/
    """
    from budgetscope.archive.errors import ArchiveError, ArchiveLocked
    from budgetscope.collector.endpoint import CollectorUnreachable
    from budgetscope.commands.new_archive import NewArchive
    from budgetscope.ingest.files import input_problem
    from budgetscope.opener import Archive
    from budgetscope.opener import open as open_archive
    from budgetscope.sources.import_files import land_here, land_through

    kind, out_fmt = _import_kinds(kind, formats)
    options = {"start_ns": time_ns(start, "start"), "clock_offset_ns": clock_offset_ns, "service_name": service_name}
    try:
        for f in files:
            if problem := input_problem(f, "results file"):
                raise UsageError(f"{f}: {problem}")
        new = NewArchive(archive)
        try:
            with Archive(archive) as a:
                entries, rejected = _each(files, kind, options, out_fmt, lambda b: land_here(a, archive, b))
                counts = a.counts()
        except ArchiveLocked as locked:  # a collector writes it: through the collector (commands/live.py)
            client = collector_for(archive, locked, auth_token_file)
            entries, rejected = _each(files, kind, options, out_fmt, lambda b: land_through(client, archive, b))
            with open_archive(archive) as r:
                counts = r.counts()
        samples = sum(e.get("samples", 0) for e in entries)
        discarded = new.discard_if_empty({**counts, "server_metrics": samples})
    except (ArchiveError, CollectorUnreachable) as e:
        raise UsageError(str(e)) from None
    if out_fmt == "json":
        click.echo(
            json.dumps({"archive": archive, "kept": not discarded, "format": kind, "files": entries, "counts": counts})
        )
    elif discarded:
        click.echo(f"{archive}: nothing landed; not created")
    if rejected:
        sys.exit(2)


def _each(files, kind: str, options: dict, out_fmt: str, land) -> tuple[list[dict], bool]:
    """Read and land each file (`land`: here, or through a collector), saying what became of it; (the summary
    entries, whether any file was rejected)."""
    from budgetscope.sources.import_files import NotImported, build

    entries, rejected = [], False
    for f in files:
        try:
            entry = land(build(Path(f), kind, **options))
        except NotImported as e:
            click.echo(f"budgetscope: {e} (nothing from it landed)", err=True)
            entries.append({"file": f, "rejected": str(e)})
            rejected = True
            continue
        if entry["rejected"]:
            click.echo(f"budgetscope: {entry['rejected']} (nothing from it landed)", err=True)
            rejected = True
        elif entry.get("warning"):
            click.echo(f"budgetscope: warning: {entry['warning']}", err=True)
        entries.append(entry)
        if out_fmt == "table":
            click.echo(_summary_line(entry, kind in JOINED))
    return entries, rejected


def _summary_line(entry: dict, joined: bool) -> str:
    """One file's line of the table summary."""
    f = entry["file"]
    if "samples" in entry:
        return f"{f}: {entry['samples']:,} samples" + ("" if entry["samples"] else " (already imported, or empty)")
    if "through_collector" in entry:
        landed = f"through the collector (pid {entry['through_collector']})"
        if entry["spans"] is None:
            return f"{f}: taken {landed}, not yet committed"
    else:
        landed = f"{entry['requests_derived']:,} requests derived"
    return (
        f"{f}: {entry['spans']:,} spans ({entry['spans_inserted']:,} new), {int(entry['already_imported']):,} "
        f"already imported; {landed}"
        + (f"; {entry['joined_to_server_rows']:,} records joined to their server spans by request id" if joined else "")
    )


def _import_kinds(kind: str | None, formats: tuple[str, ...]) -> tuple[str, str]:
    """(what the files are, the summary format) from --from and the --format values."""
    kinds = {kind} - {None} | {f for f in formats if f in IMPORT_KINDS}
    outputs = {f for f in formats if f not in IMPORT_KINDS}
    if len(kinds) != 1:
        raise UsageError(
            "say what the files are: --from vllm-bench|aiperf|guidellm|vllm-metrics|triton|prometheus"
            if not kinds
            else f"the files are one kind, not {' and '.join(sorted(kinds))}"
        )
    if len(outputs) > 1:
        raise UsageError("--format: table or json, not both")
    return kinds.pop(), outputs.pop() if outputs else "table"
