"""`budgetscope import`: third-party files (benchmark exports, Triton traces, `/metrics` text) into an archive."""

from __future__ import annotations

import sys

import click

from budgetscope.commands.options import NEW_ARCHIVE, UsageError, time_ns




KINDS = ("vllm-bench", "aiperf", "guidellm", "vllm-metrics", "triton", "prometheus")
JOINED = ("aiperf", "guidellm")
"""Formats whose records carry the server's request id: joined to its server spans (sources/joins.py)."""


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--from", "kind", type=click.Choice(KINDS), help="What the files are (see docs/sources.md).")
@click.option("--format", "formats", multiple=True, type=click.Choice([*KINDS, "table", "json"]),
              help="table|json: the summary on stdout (default table). Also takes what the files are, as --from "
                   "does: `--format vllm-bench --format json`.")
@NEW_ARCHIVE
@click.option("--start", help="vllm-bench: when the run started (ISO-8601 or ns; default its `date`, as UTC); "
                              "prometheus: the scrape time (default the file's modification time).")
@click.option("--clock-offset-ns", type=int,
              help="triton: Unix ns minus Triton's steady-clock ns (default: anchor the file's last timestamp at "
                   "its modification time).")
@click.option("--service-name", help="prometheus: the server's name in server_metrics (default: the file name).")
def import_(files, kind, formats, archive, start, clock_offset_ns, service_name) -> None:
    """Import benchmark exports, vLLM offline metrics, Triton trace files or saved `/metrics` text into an archive.

    Every file is one batch: it lands whole or not at all, and the same file lands once (recorded in
    ingest_batches). Requests become `llm.client.request` spans (vllm-bench, aiperf, guidellm), vLLM `llm_request`
    spans (vllm-metrics: offline `RequestOutput.metrics` as JSON lines) or Triton `InferRequest` spans, derived
    into `requests` like any ingest; Prometheus text goes to `server_metrics`. An archive this command created
    stays only if something landed in it. AIPerf and GuideLLM records join the server row of the same request
    already in the archive, by the id the tool recorded (AIPerf `x_request_id`, GuideLLM `response_id`): one row
    a request, with network derived; import them after the server's spans. AIPerf's raw export
    (`profile_export_raw.jsonl`, `--export-level raw`) beside `profile_export.jsonl` is read with it: each
    request's first-event time, so the network share of TTFT. A file of another known format is named in one line
    with the command that reads it.

    \b
      budgetscope import --format vllm-bench result.json --archive runs.duckdb
      budgetscope import --from vllm-bench result.json --archive runs/ --format json
      budgetscope import --format aiperf artifacts/*/profile_export.jsonl --archive runs.duckdb
      budgetscope import --format guidellm benchmarks.json --archive runs.duckdb
      budgetscope import --format vllm-metrics vllm-metrics.jsonl --archive runs.duckdb
      budgetscope import --format triton trace.json --archive runs.duckdb
      budgetscope import --format prometheus metrics.txt --start 2026-01-01T10:00:00Z --archive runs.duckdb
    """
    import json
    from pathlib import Path

    from budgetscope.archive.archive import Archive, ArchiveError, RawBatch
    from budgetscope.commands.new_archive import NewArchive
    from budgetscope.ingest.files import input_problem
    from budgetscope.sources import guidellm, importers, joins, vllm_offline
    from budgetscope.sources.formats import wrong_format
    from budgetscope.sources.prometheus import PrometheusError

    fmt, out_fmt = _import_kinds(kind, formats)
    anchor = time_ns(start, "start")
    rejected, entries, samples = False, [], 0
    say = click.echo if out_fmt == "table" else (lambda *a, **k: None)
    try:
        for f in files:
            if problem := input_problem(f, "results file"):
                raise UsageError(f"{f}: {problem}")
        new = NewArchive(archive)
        with Archive(archive) as a:
            for f in files:
                path = Path(f)
                data = path.read_bytes()
                joined = 0
                try:
                    if fmt == "prometheus":
                        from budgetscope.sources.server_metrics import land

                        n = land(a, data.decode("utf-8", "replace"), instance=str(path),
                                 service_name=service_name or path.stem,
                                 ts_ns=anchor if anchor is not None else path.stat().st_mtime_ns, origin=str(path),
                                 position="document")
                        samples += n
                        entries.append({"file": f, "samples": n, "rejected": None})
                        say(f"{f}: {n:,} samples" + ("" if n else " (already imported, or empty)"))
                        continue
                    if fmt == "vllm-bench":
                        doc = importers.vllm_bench(path, data, anchor)
                    elif fmt == "aiperf":
                        doc = importers.aiperf(path, data)
                    elif fmt == "guidellm":
                        doc = guidellm.guidellm(path, data)
                    elif fmt == "vllm-metrics":
                        doc = vllm_offline.vllm_metrics(path, data)
                    else:
                        doc = importers.triton(path, data, clock_offset_ns)
                    if fmt in JOINED:
                        doc, joined = joins.join(doc, _server_lookup(a, archive))
                except (importers.ImportFormatError, PrometheusError) as e:
                    msg = wrong_format(path, fmt) or (str(e) if str(e).startswith(str(path)) else f"{path}: {e}")
                    click.echo(f"budgetscope: {msg} (nothing from it landed)", err=True)
                    entries.append({"file": f, "rejected": msg})
                    rejected = True
                    continue
                report = a.ingest([RawBatch(doc, "otlp-json", str(path), f"{fmt} file")])
                for r in report.rejected:
                    click.echo(f"budgetscope: {r} (nothing from it landed)", err=True)
                    rejected = True
                entries.append({"file": f, "spans": report.spans, "spans_inserted": report.spans_inserted,
                                "already_imported": report.batches_already_ingested > 0,
                                "requests_derived": report.requests_derived, "joined_to_server_rows": joined,
                                "rejected": str(report.rejected[0]) if report.rejected else None})
                say(f"{f}: {report.spans:,} spans ({report.spans_inserted:,} new), "
                    f"{report.batches_already_ingested:,} already imported; "
                    f"{report.requests_derived:,} requests derived"
                    + (f"; {joined:,} records joined to their server spans by request id" if fmt in JOINED else ""))
            counts = a.counts()
        discarded = new.discard_if_empty({**counts, "server_metrics": samples})
    except ArchiveError as e:
        raise UsageError(str(e)) from None
    if out_fmt == "json":
        click.echo(json.dumps({"archive": archive, "kept": not discarded, "format": fmt, "files": entries,
                               "counts": counts}))
    elif discarded:
        click.echo(f"{archive}: nothing landed; not created")
    if rejected:
        sys.exit(2)


def _server_lookup(a, archive: str):
    """`ids → {id: trace id}` over the server rows already in the archive `a` (open at `archive`)."""
    from budgetscope.archive.archive import is_single_file
    from budgetscope.sources import joins

    def lookup(ids: list[str]) -> dict[str, str]:
        if is_single_file(archive):
            return joins.server_traces(a.con, ids)
        from budgetscope.archive.reader import ArchiveReader

        with ArchiveReader(archive) as r:
            return joins.server_traces(r.con, ids)
    return lookup


def _import_kinds(kind: str | None, formats: tuple[str, ...]) -> tuple[str, str]:
    """(what the files are, the summary format) from --from and the --format values."""
    kinds = {kind} - {None} | {f for f in formats if f in KINDS}
    outputs = {f for f in formats if f not in KINDS}
    if len(kinds) != 1:
        raise UsageError("say what the files are: --from vllm-bench|aiperf|guidellm|vllm-metrics|triton|prometheus"
                          if not kinds else f"the files are one kind, not {' and '.join(sorted(kinds))}")
    if len(outputs) > 1:
        raise UsageError("--format: table or json, not both")
    return kinds.pop(), outputs.pop() if outputs else "table"
