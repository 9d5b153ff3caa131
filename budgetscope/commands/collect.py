"""`budgetscope collect`: the CLI face of `Collector`. Light at import: click only."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import sys
import threading

import click

from budgetscope.collector.options import TOKEN_ENV
from budgetscope.commands.options import NEW_ARCHIVE, UsageError, format_option, load_budgets_or_fail, period_s

MAX_MESSAGE_MB = click.option(
    "--max-message-mb",
    type=click.FloatRange(min=0.001),
    default=16,
    show_default=True,
    help="Largest request accepted (after decompression: 413 past it); the OTLP/HTTP bodies being inflated "
    "together hold at most twice this.",
)
"""The receivers' message limit, the same for `collect` and `collect-router`."""


@click.command()
@NEW_ARCHIVE
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address both receivers listen on (0.0.0.0 for every interface: set a token and TLS; without "
    "a token it warns).",
)
@click.option(
    "--grpc-port",
    type=click.IntRange(0, 65535),
    default=4317,
    show_default=True,
    help="OTLP/gRPC port; 0 picks a free one (printed).",
)
@click.option(
    "--http-port",
    type=click.IntRange(0, 65535),
    default=4318,
    show_default=True,
    help="OTLP/HTTP port; 0 picks a free one (printed).",
)
@click.option("--no-grpc", is_flag=True, help="Do not serve OTLP/gRPC.")
@click.option("--no-http", is_flag=True, help="Do not serve OTLP/HTTP.")
@click.option(
    "--shard",
    metavar="ID",
    help="Write shard ID of a sharded archive, ARCHIVE/shard=ID/ (letters, digits, . _ -). Readers read "
    "ARCHIVE as one archive. For collectors behind a load balancer that routes by trace id.",
)
@click.option(
    "--max-pending-mb",
    type=click.FloatRange(min=1),
    default=64,
    show_default=True,
    help="Request bytes held in memory (received, not yet answered) before new requests are refused with "
    "429 / RESOURCE_EXHAUSTED.",
)
@click.option(
    "--max-unlanded-spans",
    type=click.IntRange(min=1),
    default=160_000,
    show_default=True,
    help="Spans held in memory as decoded columns, acknowledged but not yet landed (their bytes wait in the "
    "spool on disk); past it new requests wait, then are refused as above.",
)
@click.option(
    "--max-unlanded-mb",
    type=click.FloatRange(min=1),
    default=256,
    show_default=True,
    help="The same spans' decoded columns, in MiB: with large spans this limit is reached before the count.",
)
@MAX_MESSAGE_MB
@click.option(
    "--linger-ms",
    type=click.FloatRange(0, 5000),
    default=50,
    show_default=True,
    help="How long a request waits for others to share its group (less once requests stop coming).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=512,
    show_default=True,
    help="Open OTLP/HTTP connections at most; past it a new one takes the slot of the one idle longest "
    "(503 only while every slot is making progress).",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False),
    help="PEM certificate (chain): serve gRPC and HTTP over TLS. With --tls-key.",
)
@click.option("--tls-key", type=click.Path(dir_okay=False), help="PEM private key of --tls-cert.")
@click.option(
    "--auth-token-file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help=f"Require 'authorization: Bearer TOKEN' on every export; TOKEN is the file's first line. "
    f"Default: ${TOKEN_ENV} when set.",
)
@click.option(
    "--retention",
    metavar="AGE",
    help="Drop the hour partitions older than AGE (30d, 36h) as it goes, "
    "by each table's own time (folder archives; `budgetscope expire` does it once).",
)
@click.option(
    "--reader-grace",
    metavar="AGE",
    help="Keep segments that compaction or expiry replaced this long "
    "(90s, 10m, 2h) for readers of older commits, such as a Spark job or a notebook; recorded in the "
    "archive for every later writer. Default: as the archive has it (60 s when never set).",
)
@click.option("--no-metrics", is_flag=True, help="Do not serve OTLP metrics (GPU samples into gpu_samples).")
@click.option(
    "--budgets",
    "-b",
    type=click.Path(),
    help="Budgets TOML: serve its live SLIs on GET /metrics (per tier and budgeted figure, requests judged and "
    "within budget; histograms; the tail attribution over a sliding window). A folder archive only.",
)
@click.option(
    "--sli-settle",
    default="10s",
    show_default=True,
    metavar="PERIOD",
    help="With --budgets: how long a request's row waits for late spans before it is counted (0 counts at once).",
)
@click.option(
    "--attribution-window",
    default="10m",
    show_default=True,
    metavar="PERIOD",
    help="With --budgets: the attribution gauges are over the requests that arrived this long before now.",
)
@click.option(
    "--attribution-every",
    default="15s",
    show_default=True,
    metavar="PERIOD",
    help="With --budgets: how often the attribution gauges are recomputed from the archive's last commit.",
)
@click.option("--verbose", "-v", is_flag=True, help="Log every HTTP request on stderr.")
@format_option(
    "table",
    "json",
    help="The summary at exit: a line, or one JSON document on stdout (the banner then goes to stderr).",
)
def collect(
    archive: str,
    host: str,
    grpc_port: int,
    http_port: int,
    no_grpc: bool,
    no_http: bool,
    shard: str | None,
    max_pending_mb: float,
    max_unlanded_spans: int,
    max_unlanded_mb: float,
    max_message_mb: float,
    linger_ms: float,
    max_connections: int,
    tls_cert: str | None,
    tls_key: str | None,
    auth_token_file: str | None,
    retention: str | None,
    reader_grace: str | None,
    no_metrics: bool,
    budgets: str | None,
    sli_settle: str,
    attribution_window: str,
    attribution_every: str,
    verbose: bool,
    fmt: str,
) -> None:
    """Receive OTLP traces and metrics (gRPC :4317, HTTP :4318 POST /v1/traces and /v1/metrics) into an archive.

    Each export is answered success only once it is safe on disk (and known to be good); the `requests` rows of the
    traces it touched are derived and published within about a second (and always before the collector exits).
    Metrics land as GPU samples in `gpu_samples`. Bad payloads get 400 / INVALID_ARGUMENT and change nothing; when
    too many bytes are pending the collector answers 429 / RESOURCE_EXHAUSTED with a retry delay. Ctrl-C (or
    SIGTERM) stops accepting, lands everything already accepted, prints a summary and exits (stopped while the disk
    is full, it says how many acknowledged batches wait in the spool for the next writer). GET /metrics on the HTTP
    port serves the collector's own figures (received, landed, rejected, refused, pending bytes, commit lag) in
    Prometheus text; with --budgets also the live SLIs of that file and the tail attribution over a sliding
    window, for `budgetscope rules` (docs/alerting.md).

    Beyond this machine (--host 0.0.0.0): --tls-cert/--tls-key and a bearer token (--auth-token-file, or
    $BUDGETSCOPE_COLLECT_TOKEN), which OTLP exporters send with
    OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer%20TOKEN".

    The archive is a folder: `report`, `query`, `postmortem` and the dashboard read it while this runs, and see
    each commit (about once a second) as a whole. A path ending in .duckdb is a single DuckDB file instead,
    which no other process can open while the collector holds it.

    \b
      budgetscope collect --archive prod/
      vllm serve MODEL --otlp-traces-endpoint grpc://127.0.0.1:4317   # in another shell
      budgetscope collect --archive /shared/prod/ --shard "$(hostname)"  # one of several shards
      budgetscope collect --archive prod/ --host 0.0.0.0 --tls-cert c.pem --tls-key k.pem --auth-token-file t
      budgetscope collect --archive prod/ --budgets budgets.toml   # + `budgetscope rules` for Prometheus
    """
    from budgetscope.archive.errors import ArchiveError
    from budgetscope.auth import exposure_warning
    from budgetscope.collector import Collector, CollectorError
    from budgetscope.collector.options import check

    _log_to_stderr(verbose)
    b = load_budgets_or_fail(budgets)
    if b is not None and no_http:
        raise UsageError("--budgets serves its SLIs on the OTLP/HTTP port's GET /metrics: drop --no-http")
    live = {
        "sli_settle_s": _period(sli_settle, "sli-settle", zero=True),
        "attribution_window_s": _period(attribution_window, "attribution-window"),
        "attribution_every_s": _period(attribution_every, "attribution-every"),
    }
    try:
        opts = check(
            archive, shard=shard, auth_token_file=auth_token_file, retention=retention, reader_grace=reader_grace
        )
    except (ValueError, ArchiveError) as e:
        raise UsageError(str(e)) from None
    try:
        collector = Collector(
            opts.archive,
            host=host,
            grpc_port=None if no_grpc else grpc_port,
            http_port=None if no_http else http_port,
            max_pending_bytes=int(max_pending_mb * (1 << 20)),
            max_unlanded_spans=max_unlanded_spans,
            max_unlanded_bytes=int(max_unlanded_mb * (1 << 20)),
            max_message_bytes=int(max_message_mb * (1 << 20)),
            linger_s=linger_ms / 1000,
            metrics=not no_metrics,
            max_connections=max_connections,
            tls_cert=tls_cert,
            tls_key=tls_key,
            auth_token=opts.token,
            retention_ns=opts.retention_ns,
            reader_grace_s=opts.reader_grace_s,
            budgets=b,
            **live,
        )
        collector.start()
    except CollectorError as e:
        raise UsageError(str(e)) from None
    archive, token = opts.archive, opts.token
    if warning := exposure_warning(
        host,
        token is not None,
        tls_cert is not None,
        f"set --auth-token-file or ${TOKEN_ENV}, and --tls-cert/--tls-key",
    ):
        click.echo(f"budgetscope collect: {warning}", err=True)
    stop = threading.Event()
    previous = _on_signals(stop)  # before the banner: whoever reads it may signal at once
    click.echo(
        f"budgetscope collect: {', '.join(collector.endpoints)}; writing {archive} (Ctrl-C to stop)", err=fmt == "json"
    )
    sys.stdout.flush()
    try:
        while not stop.wait(0.5) and not collector.error:
            pass
        click.echo("budgetscope collect: stopping: landing what was accepted…", err=True)
        stats = collector.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    unclaimed = _unclaimed(archive) if not collector.error else None
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "archive": archive,
                    "endpoints": list(collector.endpoints),
                    "stats": dataclasses.asdict(stats),
                    "error": str(collector.error or "") or None,
                    "unclaimed_spans": unclaimed,
                }
            )
        )
    else:
        click.echo(f"budgetscope collect: {stats.summary()}")
    if note := stats.spool_note(archive):
        click.echo(f"budgetscope collect: {note}", err=True)
    _unclaimed_lines(unclaimed, stats, fmt)
    if collector.error:
        click.echo(f"budgetscope: {collector.error}", err=True)
        sys.exit(1)


def _period(text: str, name: str, zero: bool = False) -> float:
    """A PERIOD option in seconds (`period_s`); `zero`: 0 is allowed too."""
    if zero and text.strip() in ("0", "0s", "0ms"):
        return 0.0
    return period_s(text, name)


def _unclaimed(archive: str) -> dict | None:
    """The spans of the archive no adapter claimed, read once the collector has closed it (None if it cannot
    be read: the summary then goes without)."""
    from budgetscope.analysis.coverage import unclaimed_in
    from budgetscope.archive.errors import ArchiveError

    try:
        return unclaimed_in(archive)
    except ArchiveError:
        return None


def _unclaimed_lines(unclaimed: dict | None, stats, fmt: str) -> None:
    """At exit: the unclaimed spans (table format), and the warning when spans arrived but nothing was derived."""
    from budgetscope.analysis.coverage import nothing_derived_warning, unclaimed_line

    if unclaimed is None:
        return
    if fmt == "table" and (line := unclaimed_line(unclaimed)):
        click.echo(f"budgetscope collect: {line}")
    if warning := nothing_derived_warning(stats.spans, stats.requests_derived, unclaimed):
        click.echo(f"budgetscope collect: {warning}", err=True)


def _log_to_stderr(verbose: bool) -> None:
    log = logging.getLogger("budgetscope.collector")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("budgetscope collect: %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.DEBUG if verbose else logging.WARNING)


def _on_signals(stop: threading.Event) -> dict:
    """SIGINT/SIGTERM set `stop`; a second one exits at once (what was acknowledged is already durable)."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, frame):
        if stop.is_set():
            os._exit(128 + signum)
        stop.set()

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


@click.command("collect-router")
@click.option(
    "--shard",
    "shards",
    metavar="URL",
    multiple=True,
    help="A shard's OTLP/HTTP receiver, http://HOST:PORT (`collect --shard ID`); repeat, in the same "
    "order on every router: the order is the routing.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=4318,
    show_default=True,
    help="OTLP/HTTP port; 0 picks a free one (printed).",
)
@click.option(
    "--connections",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Exports in flight to each shard at once, each on its own keep-alive connection (protobuf "
    "parts waiting meanwhile go together as one export).",
)
@click.option(
    "--max-pending-mb",
    type=click.FloatRange(min=1),
    default=64,
    show_default=True,
    help="Request bytes held in memory before new requests are refused with 429.",
)
@MAX_MESSAGE_MB
def collect_router(
    shards: tuple[str, ...], host: str, port: int, connections: int, max_pending_mb: float, max_message_mb: float
) -> None:
    """Route OTLP/HTTP traces to collector shards by trace id: every span of a trace to one shard.

    Each export (POST /v1/traces, protobuf or JSON) is split by crc32(trace id) mod the number of shards and
    each part is forwarded to its shard's /v1/traces over keep-alive connections (protobuf parts waiting for
    the same shard go as one export). The exporter gets 200 once
    every part landed; 429 / 503 with Retry-After when a shard was busy, down or slow (its retry lands the rest;
    the shards store what they already had once); 200 with an OTLP partial success when a shard rejected its
    part as bad and the others landed theirs; 400 when every part was rejected. One process uses about one
    core: run one router per core (each with the same --shard list) behind the exporters' own balancing.
    GPU metrics are not routed: send them to one shard. No TLS and no bearer token, on either side: run it on a
    trusted network. Ctrl-C (or SIGTERM) answers what was read and exits with a summary.

    \b
      budgetscope collect --archive fleet/ --shard a --http-port 5001 --no-grpc
      budgetscope collect --archive fleet/ --shard b --http-port 5002 --no-grpc
      budgetscope collect-router --shard http://127.0.0.1:5001 --shard http://127.0.0.1:5002
    """
    from budgetscope.collector.router import TraceRouter

    if not shards:
        raise UsageError("give at least one --shard http://HOST:PORT")
    try:
        router = TraceRouter(
            list(shards),
            host,
            port,
            connections=connections,
            max_pending_bytes=int(max_pending_mb * (1 << 20)),
            max_message_bytes=int(max_message_mb * (1 << 20)),
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    router.start()
    stop = threading.Event()
    previous = _on_signals(stop)
    click.echo(
        f"budgetscope collect-router: OTLP/HTTP http://{host}:{router.port}/v1/traces → {len(shards)} shards "
        f"by crc32(trace id) mod {len(shards)}: {', '.join(shards)} (Ctrl-C to stop)"
    )
    sys.stdout.flush()
    try:
        stop.wait()
        s = router.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    per_shard = "; ".join(
        f"{x.url}: {x.spans:,} spans in {x.parts:,} parts, {x.posts:,} exports, {x.failed:,} not landed"
        for x in s.by_shard
    )
    click.echo(
        f"budgetscope collect-router: {s.requests:,} requests ({s.landed:,} landed, {s.partial:,} partial, "
        f"{s.rejected:,} rejected, {s.retryable:,} retryable), {s.spans_landed:,} spans landed ({per_shard})"
    )
