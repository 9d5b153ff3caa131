"""The `budgetscope` command: a thin face on the library. Errors are one line on stderr and exit 2."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import click

from budgetscope import __version__


class UsageError(click.ClickException):
    """Bad input: one line on stderr, exit status 2, no traceback."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"budgetscope: {self.format_message()}", err=True)


def _fail(e: Exception) -> UsageError:
    return UsageError(str(e))


# Commands whose modules pull in more (torch, servers, gRPC) load only when invoked.
LAZY_COMMANDS = {
    "engine": "budgetscope.engine.command:engine",
    "collect": "budgetscope.collector.command:collect",
    "collect-router": "budgetscope.collector.command:collect_router",
    "load": "budgetscope.loadgen.command:load",
    "dashboard": "budgetscope.dashboard_command:dashboard",
    "postmortem": "budgetscope.dashboard_command:postmortem",
    "import": "budgetscope.sources.commands:import_",
    "scrape": "budgetscope.sources.commands:scrape",
    "gpu": "budgetscope.instrument.gpu_command:gpu",
    "derive": "budgetscope.spark.derive:derive",
    "expire": "budgetscope.archive.expire_command:expire",
    "sweep": "budgetscope.sweep.command:sweep",
}


class _LazyGroup(click.Group):
    def _lazy(self) -> dict[str, str]:
        from importlib.util import find_spec

        return {n: t for n, t in LAZY_COMMANDS.items() if find_spec(t.split(":")[0]) is not None}

    def list_commands(self, ctx) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy()})

    def get_command(self, ctx, name):
        target = self._lazy().get(name)
        if target is None:
            return super().get_command(ctx, name)
        from importlib import import_module

        module, attr = target.split(":")
        return getattr(import_module(module), attr)

    def invoke(self, ctx):
        """A command whose optional extra is not installed says which one to install, in one line."""
        from budgetscope.extras import MissingExtra, extra_for

        try:
            return super().invoke(ctx)
        except MissingExtra as e:
            raise UsageError(str(e)) from None
        except ModuleNotFoundError as e:
            extra = extra_for(e)
            if extra is None:
                raise
            raise UsageError(str(MissingExtra(extra, ctx.invoked_subcommand or "this command", e.name))) from None


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="budgetscope")
def main() -> None:
    """budgetscope: where the time of your slowest LLM requests went, against declared latency budgets.

    \b
      budgetscope ingest traces.jsonl --archive prod/
      budgetscope report --archive prod/ --budgets budgets.toml
      budgetscope query --archive prod/ "SELECT tier, count(*) FROM requests GROUP BY 1"
    """


# -- ingest ----------------------------------------------------------------------------------------------------
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
            click.echo(f"\r  {100 * self.done / self.total:5.1f}% of {self.total / 1e6:,.1f} MB{rate}   ", err=True, nl=False)

    def close(self) -> None:
        if self.enabled:
            click.echo("\r" + " " * 60 + "\r", err=True, nl=False)


class NewArchive:
    """An archive a command is about to write. If the command created it and nothing landed (every file it was
    given was rejected), `discard_if_empty` removes it again, so a rejected file leaves no empty archive behind."""

    def __init__(self, path: str):
        import os

        self.path = path
        self.was_empty_dir = os.path.isdir(path) and not any(os.scandir(path))
        self.existed = os.path.exists(path) and not self.was_empty_dir

    def discard_if_unused(self) -> bool:
        """After a failure: `discard_if_empty`, with the counts of what was committed (True if removed)."""
        from budgetscope.opener import Archive

        try:
            with Archive(self.path, read_only=True, create=False) as a:
                counts = a.counts()
        except Exception:  # noqa: BLE001 - nothing committed that a reader can open (or the folder is gone)
            counts = {}
        try:
            return self.discard_if_empty(counts)
        except OSError:  # a read-only file system: the command created nothing there
            return False

    def discard_if_empty(self, counts: dict[str, int]) -> bool:
        import os
        import shutil

        if self.existed or any(counts.values()) or not os.path.exists(self.path):
            return False
        if os.path.isdir(self.path):
            for entry in os.scandir(self.path):  # only what this command wrote: the folder was empty or absent
                shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.remove(entry.path)
            if not self.was_empty_dir:
                os.rmdir(self.path)
        else:
            for leftover in (self.path, self.path + ".wal"):
                if os.path.exists(leftover):
                    os.remove(leftover)
        return True


def _io_failure(e: Exception, archive: str, new: "NewArchive | None") -> Exception:
    """A write that failed (a full disk, a read-only file system) as one line; the exception itself otherwise.
    The archive keeps its last commit (the writer deleted what it had half-written); one this command created
    is removed if nothing of it was committed."""
    from budgetscope.archive.errors import io_reason, write_failure

    if io_reason(e) is None:
        return e
    created = new is not None and new.discard_if_unused()
    return UsageError(write_failure(e, archive, *(["nothing was created"] if created else [])))


FORMAT_SUMMARY = click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                              show_default=True, help="The summary on stdout: lines, or one JSON document.")


def _ingest_entry(f: str, report) -> dict:
    """One file's ingest summary, as `--format json` prints it (docs/cli.md)."""
    return {"file": f, "batches": report.batches, "batches_landed": report.batches_landed,
            "batches_already_ingested": report.batches_already_ingested, "spans": report.spans,
            "spans_inserted": report.spans_inserted, "duplicate_spans": report.duplicate_spans,
            "requests_derived": report.requests_derived, "orphan_stage_spans": report.orphan_stage_spans,
            "gpu_points": report.gpu_points, "gpu_points_inserted": report.gpu_points_inserted,
            "seconds": round(report.seconds, 6), "rejected": [str(r) for r in report.rejected]}


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--archive", "-a", required=True, type=click.Path(), help="Archive folder (created if missing), or a .duckdb file.")
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
    import os

    from budgetscope.analysis.coverage import nothing_derived_warning, unclaimed_in, unclaimed_line
    from budgetscope.archive.errors import ArchiveError
    from budgetscope.opener import Archive
    from budgetscope.ingest.files import check, input_problem, read_batches
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
                    click.echo(f"{f}: {report.batches:,} batches, {report.spans:,} spans "
                               f"({report.spans_inserted:,} new, {report.duplicate_spans:,} already stored), "
                               f"{report.batches_already_ingested:,} batches already ingested; "
                               f"{report.requests_derived:,} requests derived in {report.seconds:.2f} s "
                               f"({report.spans_per_s:,.0f} spans/s)"
                               + (f"; {report.gpu_points:,} GPU sample points ({report.gpu_points_inserted:,} new)"
                                  if report.gpu_points else ""))
                if report.orphan_stage_spans:
                    click.echo(f"note: {report.orphan_stage_spans:,} stage spans have no request root yet; "
                               "they join their request when it arrives", err=True)
                rejected += report.rejected
            counts = a.counts()
        discarded = new.discard_if_empty(counts)
    except ArchiveError as e:
        raise _fail(e) from None
    except Exception as e:
        raise _io_failure(e, archive, new) from None
    unclaimed = None if discarded else unclaimed_in(archive)
    if fmt == "json":
        click.echo(json.dumps({"archive": archive, "kept": not discarded, "files": entries, "counts": counts,
                               "unclaimed_spans": unclaimed}))
    elif discarded:
        click.echo(f"{archive}: nothing landed; not created")
    else:
        click.echo(f"{archive}: {counts['spans']:,} spans, {counts['requests']:,} requests")
        if line := unclaimed_line(unclaimed):
            click.echo(f"{archive}: {line}")
    if not discarded and (warning := nothing_derived_warning(counts["spans"], counts["requests"], unclaimed)):
        click.echo(f"budgetscope: {archive}: {warning}", err=True)
    if rejected:
        for r in rejected[:20]:
            click.echo(f"budgetscope: {r} (batch rejected; nothing from it landed)", err=True)
        if len(rejected) > 20:
            click.echo(f"budgetscope: … and {len(rejected) - 20} more rejected batches", err=True)
    if rejected or failed_files:
        sys.exit(2)


# -- report ----------------------------------------------------------------------------------------------------
_ENGINE = click.option("--engine", type=click.Choice(["duckdb", "spark"]), default="duckdb", show_default=True,
                       help="Run the SQL on DuckDB in this process, or on Spark over the same Parquet files.")
_SPARK_MASTER = click.option("--spark-master", metavar="URL",
                             help="Spark master for --engine spark: local[N] (default local[2]), spark://HOST:PORT, yarn.")


REPORT_EXIT = {"KEPT": 0, "BROKEN": 1, "UNKNOWN": 3}
"""`report`'s exit status by the report's status (2 stays for bad input)."""


def _reader(archive: str, engine: str, spark_master: str | None, since_ns=None, until_ns=None):
    """A reader of the archive (`.con` runs the analysis SQL) on the engine chosen."""
    if spark_master and engine != "spark":
        raise UsageError("--spark-master needs --engine spark")
    if engine == "spark":
        from budgetscope.spark.commands import spark_archive

        return spark_archive(archive, spark_master, since_ns, until_ns)
    from budgetscope.opener import Archive

    return Archive(archive, read_only=True, create=False, since_ns=since_ns, until_ns=until_ns)


def _time_ns(value: str | None, name: str) -> int | None:
    from budgetscope.times import parse_time_ns

    try:
        return parse_time_ns(value, f"--{name}")
    except ValueError as e:
        raise UsageError(str(e)) from None


@main.command()
@click.option("--archive", "-a", required=True, type=click.Path(), help="Archive folder, or a .duckdb file.")
@click.option("--budgets", "-b", type=click.Path(), help="Budgets TOML; without it every tier is shown at p99.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@click.option("--since", help="Only requests that arrived at or after this time (ISO-8601 or ns).")
@click.option("--until", help="Only requests that arrived before this time (ISO-8601 or ns).")
@_ENGINE
@_SPARK_MASTER
def report(archive: str, budgets: str | None, fmt: str, since: str | None, until: str | None, engine: str,
           spark_master: str | None) -> None:
    """Break the tail down against the budgets: exit 0 if every tier keeps them, 1 if one breaks them, 3 if
    one cannot be judged (its figures are unknown: no request, or no latency read), 2 on bad input.

    \b
      budgetscope report --archive prod/ --budgets budgets.toml
      budgetscope report --archive prod/ --budgets budgets.toml --format json
      budgetscope report --archive fleet/ --engine spark --spark-master spark://head:7077
    """
    import duckdb

    from budgetscope.analysis.budgets import BudgetError, load_budgets
    from budgetscope.analysis.render import render_markdown, render_text
    from budgetscope.analysis.report import build_report
    from budgetscope.archive.errors import ArchiveError
    from budgetscope.archive.reader import STALE

    try:
        b = load_budgets(budgets) if budgets else None
        since_ns, until_ns = _time_ns(since, "since"), _time_ns(until, "until")
        # a folder archive reads only the segments of the window
        with _reader(archive, engine, spark_master, since_ns, until_ns) as a:
            if a.pending_traces():
                click.echo(f"note: {a.pending_traces():,} traces await derivation (an ingest was interrupted); "
                           "run `budgetscope ingest` again to finish them", err=True)
            try:
                rep = build_report(a.con, b, since_ns, until_ns)
                if getattr(a, "split_traces", None) is not None:  # a sharded root (docs/archive.md)
                    rep["split_traces"] = a.split_traces
            # a segment gone: DuckDB's IO error (a sandbox's refused glob), Spark's file not found
            except (duckdb.IOException, duckdb.PermissionException, ArchiveError):
                if not a.stale():
                    raise
                raise ArchiveError(f"{archive}: {STALE}") from None
    except (BudgetError, ArchiveError) as e:
        raise _fail(e) from None
    if fmt == "json":
        click.echo(json.dumps(rep, indent=2, allow_nan=False, default=str))
    else:
        click.echo(render_markdown(rep) if fmt == "markdown" else render_text(rep), nl=False)
    for warning in rep["warnings"]:
        click.echo(f"budgetscope: {warning}", err=True)
    sys.exit(REPORT_EXIT[rep["status"]])


# -- convert ---------------------------------------------------------------------------------------------------
@main.command()
@click.argument("source", type=click.Path(dir_okay=False))
@click.argument("dest", type=click.Path(file_okay=False))
def convert(source: str, dest: str) -> None:
    """Convert a single-file .duckdb archive into a new folder archive (the source is only read).

    Rows, batch ids and derived requests are kept as they are; every command reads either format, so this is
    for archives that a collector should go on writing, or that other Parquet readers should see.

    \b
      budgetscope convert prod.duckdb prod/
    """
    from budgetscope.archive.convert import convert as run
    from budgetscope.archive.errors import ArchiveError

    try:
        m = run(source, dest)
    except ArchiveError as e:
        raise _fail(e) from None
    click.echo(f"{dest}: {m.rows('spans'):,} spans, {m.rows('requests'):,} requests in {len(m.segments)} segments")


# -- query -----------------------------------------------------------------------------------------------------
def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


@main.command()
@click.argument("sql")
@click.option("--archive", "-a", required=True, type=click.Path(), help="Archive folder, or a .duckdb file.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--max-rows", type=click.IntRange(min=1), default=None,
              help="Print at most this many rows, and say on stderr when more matched. Default: all.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop a query still running after this many seconds (DuckDB engine). Default: none.")
@_ENGINE
@_SPARK_MASTER
def query(sql: str, archive: str, fmt: str, max_rows: int | None, timeout_s: float | None, engine: str,
          spark_master: str | None) -> None:
    """Run one read-only SELECT over an archive (no writes, no file, setting or network access).

    Tables: spans, requests, ingest_batches, gpu_samples, server_metrics, engine_steps (see docs/archive.md).
    The SQL is DuckDB's dialect on either engine (Spark runs it transpiled). DuckDB's parser must read it as a
    single SELECT (DESCRIBE and SUMMARIZE included; EXPLAIN, COPY, SET, ATTACH and the like are refused), and
    it may read only those tables, its own CTEs and range/generate_series/unnest.

    \b
      budgetscope query -a prod/ "SELECT tier, quantile_cont(queue_ms, 0.99) FROM requests GROUP BY 1"
    """
    from budgetscope.query import ArchiveError, QueryError, run_query

    if spark_master and engine != "spark":
        raise UsageError("--spark-master needs --engine spark")
    if engine == "spark":
        from budgetscope.spark.commands import run_query as run_on_spark

        if timeout_s is not None:
            raise UsageError("--timeout applies to the DuckDB engine only")
        run_query = lambda a, q, max_rows, timeout_s: run_on_spark(a, q, spark_master, max_rows=max_rows)  # noqa: E731
    try:
        res = run_query(archive, sql, max_rows=max_rows, timeout_s=timeout_s)
    except (QueryError, ArchiveError) as e:
        raise _fail(e) from None
    if res.truncated:
        click.echo(f"budgetscope: more than {max_rows:,} rows matched; the first {max_rows:,} are printed "
                   "(--max-rows)", err=True)
    if fmt == "json":
        click.echo(json.dumps([dict(zip(res.columns, r)) for r in res.rows], default=str))
    elif fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(res.columns)
        w.writerows(res.rows)
        click.echo(buf.getvalue(), nl=False)
    else:
        from budgetscope.analysis.render import _table

        click.echo("\n".join(_table(res.columns, [[_cell(v) for v in r] for r in res.rows])))
        click.echo(f"({len(res.rows)} row{'s' if len(res.rows) != 1 else ''})")


# -- example ---------------------------------------------------------------------------------------------------
@main.command()
@click.argument("name", type=click.Choice(["otelcol", "otelcol-sharded", "budgets"]))
@click.option("--path", "show_path", is_flag=True, help="Print where the installed file is instead of its text.")
def example(name: str, show_path: bool) -> None:
    """Print a file that ships with budgetscope, to start your own from.

    \b
      otelcol          an OpenTelemetry Collector config: traces and metrics from your servers to `collect`
      otelcol-sharded  the same, load-balanced by trace id over several `collect --shard` processes
      budgets          the demo's budgets file (also the one of sample_traces/)

    \b
      budgetscope example otelcol > otelcol.yaml && otelcol-contrib --config otelcol.yaml
      budgetscope example budgets > budgets.toml
    """
    from budgetscope.shipped import MissingFile, demo_budgets, otelcol_config

    try:
        path = demo_budgets() if name == "budgets" else otelcol_config(name)
    except MissingFile as e:
        raise _fail(e) from None
    click.echo(str(path) if show_path else path.read_text(encoding="utf-8"), nl=show_path)


# -- demo ------------------------------------------------------------------------------------------------------
_SCENARIOS = ("calm", "burst", "long-prompts", "long-outputs", "slow-network")


@main.command()
@click.option("--scenario", type=click.Choice(["all", *_SCENARIOS]), default="all", show_default=True)
@click.option("--duration", type=click.FloatRange(2, 3600), default=15.0, show_default=True,
              help="Seconds of load per scenario.")
@click.option("--out", type=click.Path(file_okay=False), default="demo-out", show_default=True,
              help="Folder for the archives, engine logs and load results.")
@click.option("--budgets", "-b", type=click.Path(dir_okay=False), help="Budgets TOML (default: the demo's own).")
@click.option("--no-dashboard", is_flag=True,
              help="Do not open the dashboard at the end (it opens only on a terminal anyway).")
@click.option("--offline", is_flag=True, help="No engine: synthetic traces with a known tail cause instead.")
def demo(scenario: str, duration: float, out: str, budgets: str | None, no_dashboard: bool, offline: bool) -> None:
    """Run the reference engine, the collector and the load generator on loopback, and report each scenario.

    \b
    Scenarios, each causing its tail for real on the engine's tiny model:
      calm          a light steady load: every budget holds
      burst         bursty arrivals outrun the batch: queueing
      long-prompts  a few very long prompts: prefill
      long-outputs  a few very long outputs: decode (in the E2E tail)
      slow-network  some connections cross a delaying TCP hop: network

    \b
      budgetscope demo                          # all five, 15 s of load each
      budgetscope demo --scenario burst --duration 30
      budgetscope demo --offline                # synthetic traces, no engine
    """
    from budgetscope.analysis.budgets import BudgetError, load_budgets
    from budgetscope.demo.offline import demo_budgets_path

    if offline:
        from budgetscope.demo.offline import run_offline_demo

        result = run_offline_demo(out)
        click.echo(result.summary)
        click.echo(result.report_text, nl=False)
        click.echo(f"\nThe injected cause was queue; the report's dominant TTFT stage is {result.dominant_ttft}.")
        return
    from budgetscope.analysis.render import render_text
    from budgetscope.demo.live import DemoError, run_scenario
    from budgetscope.demo.scenarios import SCENARIOS

    from budgetscope.extras import MissingExtra, require

    try:
        require("engine", "the live demo", hint="or run `budgetscope demo --offline`")
        b = load_budgets(budgets or demo_budgets_path())
    except (BudgetError, MissingExtra) as e:
        raise _fail(e) from None
    names = list(SCENARIOS) if scenario == "all" else [scenario]
    rows = []
    for name in names:
        try:
            run = run_scenario(SCENARIOS[name], Path(out), b, duration, say=lambda m: click.echo(m, err=True))
        except DemoError as e:
            raise _fail(e) from None
        click.echo(f"\n### scenario {name}: {run.scenario.what}\n")
        click.echo(render_text(run.report), nl=False)
        t = run.report["tiers"][0]
        expect = run.scenario.expect or "nothing (budgets hold)"
        found = run.tail if run.scenario.expect else {"KEPT": "budgets held", "BROKEN": "a budget broke",
                                                      "UNKNOWN": "unknown"}[t["status"]]
        rows.append([name, expect, f"{run.scenario.metric.upper()}: {found}",
                     "-" if t["attainment"] is None else f"{100 * t['attainment']:.0f}%", str(run.archive)])
    from budgetscope.analysis.render import _table

    click.echo("\n### summary\n")
    click.echo("\n".join(_table(["scenario", "injected", "dominant stage of the tail", "attainment", "archive"], rows)))
    shown = next((r[4] for r in rows if r[0] == "burst"), rows[0][4])
    bpath = budgets or str(demo_budgets_path())
    click.echo(f"\nExplore:\n  budgetscope report -a {shown} --budgets {bpath} --format json\n"
               f"  budgetscope query -a {shown} \"SELECT * FROM requests LIMIT 5\"\n"
               f"  budgetscope dashboard -a {shown} --budgets {bpath}")
    # The dashboard serves until Ctrl-C: open it only for a person at a terminal, never in CI or a pipe.
    if not no_dashboard and sys.stdin.isatty() and sys.stdout.isatty():
        from budgetscope.dashboard_command import dashboard

        click.get_current_context().invoke(dashboard, archive=shown, budgets=bpath, port=8501)


if __name__ == "__main__":
    main()
