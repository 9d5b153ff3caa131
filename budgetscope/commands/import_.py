"""`budgetscope import` and `budgetscope scrape`: third-party files and `/metrics` into an archive.

Registered lazily in budgetscope/cli.py; importing this module loads only click.
"""

from __future__ import annotations

import sys
import time

import click


class _InputError(click.ClickException):
    """Bad input: one line on stderr, exit status 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"budgetscope: {self.format_message()}", err=True)


def _start_ns(value: str | None) -> int | None:
    from budgetscope.times import parse_time_ns

    try:
        return parse_time_ns(value, "--start")
    except ValueError as e:
        raise _InputError(str(e)) from None


KINDS = ("vllm-bench", "aiperf", "guidellm", "vllm-metrics", "triton", "prometheus")
JOINED = ("aiperf", "guidellm")
"""Formats whose records carry the server's request id: joined to its server spans (sources/joins.py)."""


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--from", "kind", type=click.Choice(KINDS), help="What the files are (see docs/sources.md).")
@click.option("--format", "formats", multiple=True, type=click.Choice([*KINDS, "table", "json"]),
              help="table|json: the summary on stdout (default table). Also takes what the files are, as --from "
                   "does: `--format vllm-bench --format json`.")
@click.option("--archive", "-a", required=True, type=click.Path(), help="Archive folder (created if missing), or a .duckdb file.")
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
    from budgetscope.cli import NewArchive
    from budgetscope.ingest.files import input_problem
    from budgetscope.sources import guidellm, importers, joins, vllm_offline
    from budgetscope.sources.formats import wrong_format
    from budgetscope.sources.prometheus import PrometheusError

    fmt, out_fmt = _import_kinds(kind, formats)
    anchor = _start_ns(start)
    rejected, entries, samples = False, [], 0
    say = click.echo if out_fmt == "table" else (lambda *a, **k: None)
    try:
        for f in files:
            if problem := input_problem(f, "results file"):
                raise _InputError(f"{f}: {problem}")
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
        raise _InputError(str(e)) from None
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
        raise _InputError("say what the files are: --from vllm-bench|aiperf|guidellm|vllm-metrics|triton|prometheus"
                          if not kinds else f"the files are one kind, not {' and '.join(sorted(kinds))}")
    if len(outputs) > 1:
        raise _InputError("--format: table or json, not both")
    return kinds.pop(), outputs.pop() if outputs else "table"


@click.command("scrape")
@click.argument("urls", nargs=-1, required=True)
@click.option("--archive", "-a", required=True, type=click.Path(), help="Archive folder (created if missing), or a .duckdb file.")
@click.option("--every", default="1s", show_default=True, help="Scrape interval: 500ms, 1s, 1.5s, 1m.")
@click.option("--duration", type=float, help="Stop after this many seconds (default: until interrupted).")
@click.option("--count", type=int, help="Stop after this many scrapes of each URL.")
@click.option("--service-name", help="Name of the server in server_metrics (default: the URL's host:port).")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Per-request timeout, seconds.")
@click.option("--format", "out_fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="The summary on stdout at the end: a line, or one JSON document.")
def scrape(urls, archive, every, duration, count, service_name, timeout, out_fmt) -> None:
    """Scrape Prometheus `/metrics` (vLLM, SGLang, TGI, llama.cpp, Triton) into the archive's server_metrics.

    Each scrape is one batch (atomic, recorded in ingest_batches). A scrape that fails (refused, timeout, HTTP
    error, a line that is not Prometheus text) is reported on stderr and skipped; the next one goes on. The
    archive is held while scraping: DuckDB allows one writer per file, so scrape into an archive no collector
    holds (or point the OpenTelemetry Collector's prometheus receiver at budgetscope collect instead).

    \b
      budgetscope scrape http://127.0.0.1:8000/metrics --archive prod.duckdb --every 1s --duration 600
    """
    import urllib.error
    import urllib.request
    from urllib.parse import urlsplit

    from budgetscope.archive.archive import Archive, ArchiveError
    from budgetscope.sources.prometheus import PrometheusError
    from budgetscope.sources.server_metrics import land

    interval = _interval(every)
    for u in urls:
        if urlsplit(u).scheme not in ("http", "https"):
            raise _InputError(f"bad URL {u!r}; expected http://host:port/metrics")
    t_end = None if duration is None else time.monotonic() + duration
    done = failures = rows = 0
    try:
        with Archive(archive) as a:
            next_at = time.monotonic()
            while (count is None or done < count) and (t_end is None or time.monotonic() < t_end):
                for u in urls:
                    ts = time.time_ns()
                    try:
                        with urllib.request.urlopen(u, timeout=timeout) as resp:
                            body = resp.read().decode("utf-8", "replace")
                        rows += land(a, body, instance=u, service_name=service_name or urlsplit(u).netloc,
                                     ts_ns=ts, origin=u)
                    except (OSError, urllib.error.URLError, PrometheusError) as e:
                        failures += 1
                        click.echo(f"budgetscope: {u}: scrape failed: {getattr(e, 'reason', None) or e}", err=True)
                done += 1
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))
    except ArchiveError as e:
        raise _InputError(str(e)) from None
    except KeyboardInterrupt:
        pass
    if out_fmt == "json":
        import json

        click.echo(json.dumps({"archive": archive, "scrapes": done, "urls": list(urls), "samples": rows,
                               "failed": failures}))
    else:
        click.echo(f"{archive}: {done} scrapes of {len(urls)} URL(s), {rows:,} samples, {failures} failed")
    if failures and failures == done * len(urls):
        sys.exit(2)


def _interval(text: str) -> float:
    units = (("ms", 1e-3), ("s", 1.0), ("m", 60.0))
    for suffix, scale in units:
        if text.endswith(suffix):
            try:
                value = float(text[: -len(suffix)]) * scale
            except ValueError:
                break
            if value > 0:
                return value
            break
    raise _InputError(f"--every: {text!r} is not an interval like 500ms, 1s or 1m")
