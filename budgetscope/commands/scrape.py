"""`budgetscope scrape`: Prometheus `/metrics` into the archive's server_metrics."""

from __future__ import annotations

import json
import sys
import time
from urllib.parse import urlsplit

import click

from budgetscope.commands.live import AUTH_TOKEN_FILE, collector_for
from budgetscope.commands.options import NEW_ARCHIVE, UsageError, format_option, period_s


@click.command("scrape")
@click.argument("urls", nargs=-1, required=True)
@NEW_ARCHIVE
@click.option("--every", default="1s", show_default=True, help="Scrape interval: 500ms, 1s, 1.5s, 1m.")
@click.option("--duration", type=float, help="Stop after this many seconds (default: until interrupted).")
@click.option("--count", type=int, help="Stop after this many scrapes of each URL.")
@click.option("--service-name", help="Name of the server in server_metrics (default: the URL's host:port).")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Per-request timeout, seconds.")
@AUTH_TOKEN_FILE
@format_option("table", "json", help="The summary on stdout at the end: a line, or one JSON document.")
def scrape(urls, archive, every, duration, count, service_name, timeout, auth_token_file, fmt) -> None:
    """Scrape Prometheus `/metrics` (vLLM, SGLang, TGI, llama.cpp, Triton) into the archive's server_metrics.

    Each scrape is one batch (atomic, recorded in ingest_batches). A scrape that fails (refused, timeout, HTTP
    error, a line that is not Prometheus text) is reported on stderr and skipped; the next one goes on. The
    archive is held while scraping; into a folder archive that `budgetscope collect` is writing, each scrape goes
    through that collector instead (the same command; --auth-token-file when it takes a token).

    \b
      budgetscope scrape http://127.0.0.1:8000/metrics --archive prod/ --every 1s --duration 600
    """
    from budgetscope.archive.errors import ArchiveError, ArchiveLocked
    from budgetscope.opener import Archive
    from budgetscope.sources.prometheus import parse
    from budgetscope.sources.server_metrics import land, scrape_document

    interval = period_s(every, "every")
    for u in urls:
        if urlsplit(u).scheme not in ("http", "https"):
            raise UsageError(f"bad URL {u!r}; expected http://host:port/metrics")
    loop = _Loop(urls, interval, duration, count, service_name, timeout)
    try:
        try:
            with Archive(archive) as a:
                loop.run(lambda body, **where: land(a, body, **where))
        except ArchiveLocked as locked:  # a collector writes it: each scrape goes through it (commands/live.py)
            client = collector_for(archive, locked, auth_token_file)

            def send(body: str, **where) -> int:
                n = len(parse(body))  # a body that is not Prometheus text fails here, as it would landing
                client.send_scrape(scrape_document(body, **where))
                return n

            loop.run(send)
    except ArchiveError as e:
        raise UsageError(str(e)) from None
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "archive": archive,
                    "scrapes": loop.done,
                    "urls": list(urls),
                    "samples": loop.rows,
                    "failed": loop.failures,
                }
            )
        )
    else:
        click.echo(
            f"{archive}: {loop.done} scrapes of {len(urls)} URL(s), {loop.rows:,} samples, {loop.failures} failed"
        )
    if loop.failures and loop.failures == loop.done * len(urls):
        sys.exit(2)


class _Loop:
    """Scrape every URL each interval, until the duration or count runs out (or Ctrl-C), landing each scrape with
    the `land` given to `run`; counts what it did."""

    def __init__(self, urls, interval: float, duration: float | None, count: int | None, service_name, timeout):
        self.urls, self.interval, self.count = urls, interval, count
        self.service_name, self.timeout = service_name, timeout
        self.t_end = None if duration is None else time.monotonic() + duration
        self.done = self.failures = self.rows = 0

    def run(self, land) -> None:
        # imported on use: urllib.request 60 ms to import
        import urllib.error
        import urllib.request

        from budgetscope.collector.endpoint import CollectorUnreachable
        from budgetscope.sources.prometheus import PrometheusError

        next_at = time.monotonic()
        try:
            while (self.count is None or self.done < self.count) and (
                self.t_end is None or time.monotonic() < self.t_end
            ):
                for u in self.urls:
                    ts = time.time_ns()
                    try:
                        with urllib.request.urlopen(u, timeout=self.timeout) as resp:
                            body = resp.read().decode("utf-8", "replace")
                        self.rows += land(
                            body, instance=u, service_name=self.service_name or urlsplit(u).netloc, ts_ns=ts, origin=u
                        )
                    except (OSError, urllib.error.URLError, PrometheusError, CollectorUnreachable) as e:
                        self.failures += 1
                        click.echo(f"budgetscope: {u}: scrape failed: {getattr(e, 'reason', None) or e}", err=True)
                self.done += 1
                next_at += self.interval
                time.sleep(max(0.0, next_at - time.monotonic()))
        except KeyboardInterrupt:
            pass
