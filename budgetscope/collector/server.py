"""`Collector`: OTLP/gRPC and OTLP/HTTP trace receivers that write into one archive.

    receivers (HTTP threads, gRPC threads) ──► PendingQueue (bounded bytes) ──► ArchiveWriter (one thread)
                       ▲                                                              │ Archive.ingest (a group)
                       └──────────── each request answered by its own outcome ◄───────┘

A request is answered success only after its batch committed to the archive. See docs/collector.md.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from budgetscope.analysis.budgets import Budgets
from budgetscope.analysis.coverage import nothing_derived_warning, unclaimed_spans
from budgetscope.archive.archive import is_single_file
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.reader import ArchiveReader
from budgetscope.collector import endpoint
from budgetscope.collector.attribution_gauges import EVERY_S, WINDOW_S, AttributionGauges
from budgetscope.collector.listen import HostError, bind_failure, check_host, why_not
from budgetscope.collector.pending import PendingQueue
from budgetscope.collector.self_metrics import render
from budgetscope.collector.sli import SETTLE_S, SliCounters
from budgetscope.collector.writer import ArchiveWriter, CollectorStats

log = logging.getLogger("budgetscope.collector")

MiB = 1 << 20
STATUS_EVERY_S = 5.0
"""GET /status reads the archive's spans for the unclaimed ones at most this often; between, it answers the last."""


class CollectorError(Exception):
    """The collector cannot start (archive unusable, port in use, grpcio missing). The message is one line."""


@dataclass(slots=True)
class CollectorConfig:
    """Where to listen and how much to hold. A port of 0 picks a free one; None turns that receiver off."""

    host: str = "127.0.0.1"
    grpc_port: int | None = 4317
    http_port: int | None = 4318
    max_pending_bytes: int = 64 * MiB  # bytes accepted but not yet answered; past it: 429 / RESOURCE_EXHAUSTED
    max_message_bytes: int = 16 * MiB  # one request (decompressed); past it: 413 / RESOURCE_EXHAUSTED
    # acknowledged batches not yet landed, held as decoded columns (their bytes wait in the spool, on disk): past
    # either limit the acceptor waits for the lander (then the pending bytes fill, and new requests are refused).
    # Memory under overload follows the spans waiting more than their columns' bytes (docs/collector.md)
    max_unlanded_spans: int = 160_000
    max_unlanded_bytes: int = 256 * MiB
    linger_s: float = 0.05  # how long the first request of a group waits for company before the ingest
    linger_gap_s: float = 0.005  # ...unless none came for this long: then the group goes at once
    max_group_bytes: int = 16 * MiB  # bytes per Archive.ingest call
    retry_after_s: float = 1.0  # asked of clients refused while busy or closing
    drain_timeout_s: float = 60.0  # at stop: how long requests already accepted may take to be answered
    metrics: bool = True  # also serve OTLP metrics (POST /v1/metrics, gRPC MetricsService) into gpu_samples
    max_connections: int = 512  # open OTLP/HTTP connections; past it the idlest loses its slot (else 503)
    tls_cert: str | None = None  # PEM certificate chain: serve both receivers over TLS (with tls_key)
    tls_key: str | None = None  # PEM private key of tls_cert
    auth_token: str | None = None  # every export must carry `authorization: Bearer <auth_token>`
    retention_ns: int | None = None  # hour partitions older than this are dropped as it goes (folder archives)
    reader_grace_s: float | None = None  # the folder archive's readers' grace, kept in it (None: leave it as it is)
    budgets: Budgets | None = None  # serve the live SLIs and the attribution gauges of these budgets on GET /metrics
    sli_settle_s: float = SETTLE_S  # a trace's rows wait this long (late spans re-derive them) before they count
    attribution_window_s: float = WINDOW_S  # the attribution gauges are over the arrivals of this long
    attribution_every_s: float = EVERY_S  # ... recomputed this often

    def __post_init__(self) -> None:
        for name in ("grpc_port", "http_port"):
            port = getattr(self, name)
            if port is not None and not 0 <= port <= 65535:
                raise CollectorError(f"{name.replace('_', '-')} {port} is not a TCP port (0 picks a free one)")
        if self.grpc_port is None and self.http_port is None:
            raise CollectorError("both receivers are off: nothing to listen on")
        if self.max_message_bytes > self.max_pending_bytes:
            raise CollectorError(
                f"max_message_bytes ({self.max_message_bytes:,}) exceeds max_pending_bytes "
                f"({self.max_pending_bytes:,}): such a request could never be accepted"
            )
        if self.linger_s < 0 or self.linger_gap_s < 0 or self.retry_after_s <= 0 or self.max_group_bytes <= 0:
            raise CollectorError("linger_s and linger_gap_s must be >= 0, retry_after_s and max_group_bytes > 0")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise CollectorError("TLS needs both a certificate and its key (--tls-cert and --tls-key)")
        if self.max_connections < 1:
            raise CollectorError("max_connections must be at least 1")
        if self.auth_token is not None and (not self.auth_token or any(c.isspace() for c in self.auth_token)):
            raise CollectorError("the auth token must be one word (no spaces)")
        if self.sli_settle_s < 0 or self.attribution_window_s <= 0 or self.attribution_every_s <= 0:
            raise CollectorError("sli_settle_s must be >= 0, attribution_window_s and attribution_every_s > 0")

    def tls(self) -> tuple[bytes, bytes] | None:
        """(certificate chain PEM, key PEM), or None without TLS; CollectorError (one line) if unreadable."""
        if self.tls_cert is None:
            return None
        out = []
        for what, path in (("certificate", self.tls_cert), ("key", self.tls_key)):
            try:
                out.append(Path(path).read_bytes())
            except OSError as e:
                raise CollectorError(f"cannot read the TLS {what} {path} ({e.strerror or e})") from None
        return out[0], out[1]

    def ssl_context(self):
        """The server-side `ssl.SSLContext` of the HTTP receiver, or None without TLS."""
        if self.tls_cert is None:
            return None
        # imported on use: ssl 26 ms to import
        import ssl

        self.tls()  # unreadable files: the one-line error above
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        except (ssl.SSLError, ValueError) as e:
            raise CollectorError(
                f"the TLS certificate {self.tls_cert} and key {self.tls_key} do not load "
                f"({e.args[-1] if e.args else e})"
            ) from None
        return ctx


class Collector:
    """Receives OTLP traces and lands them in the archive at `archive_path`, which it holds open (and locked
    against other processes) from `start()` to `stop()`.

        with Collector("prod/", grpc_port=0, http_port=0) as c:
            print(c.grpc_port, c.http_port)   # the actual ports
        # stopped: everything accepted is in the archive
    """

    def __init__(
        self,
        archive_path: str | os.PathLike,
        host: str = "127.0.0.1",
        grpc_port: int | None = 4317,
        http_port: int | None = 4318,
        **options,
    ):
        """`options`: the other `CollectorConfig` fields (limits in bytes, times in seconds)."""
        self.archive_path = Path(archive_path)
        self.config = CollectorConfig(host=host, grpc_port=grpc_port, http_port=http_port, **options)
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self._queue = PendingQueue(self.config.max_pending_bytes)
        self._sli: SliCounters | None = None
        self._gauges: AttributionGauges | None = None
        budgets = self.config.budgets
        if budgets is not None:
            if is_single_file(self.archive_path):
                raise CollectorError(
                    f"{self.archive_path}: live SLIs (--budgets) follow a folder archive's commits; a single-file "
                    "archive has none (write a folder, or convert it with `budgetscope convert`)"
                )
            self._sli = SliCounters(budgets, self.config.sli_settle_s)
            self._gauges = AttributionGauges(
                self.archive_path, budgets, self.config.attribution_window_s, self.config.attribution_every_s
            )
        self._writer = ArchiveWriter(
            self.archive_path,
            self._queue,
            self.config.linger_s,
            self.config.max_group_bytes,
            self.config.linger_gap_s,
            self.config.max_unlanded_bytes,
            self.config.max_unlanded_spans,
            retention_ns=self.config.retention_ns,
            reader_grace_s=self.config.reader_grace_s,
            on_publish=self._published if budgets is not None else None,
            after_commit=self._settle if budgets is not None else None,
        )
        self._receivers: list = []
        self._state = "new"
        self._status_lock = threading.Lock()
        self._unclaimed_at: tuple[float, dict | None] = (0.0, None)

    def __enter__(self) -> Collector:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Open the archive, then bind and serve both receivers, then land what a crash left in the spool (in the
        background: exports are answered meanwhile); CollectorError (one line) if any step before fails."""
        if self._state != "new":
            raise CollectorError("a Collector starts once")
        self._state = "starting"
        self._preflight()
        try:
            self._writer.start()
        except ArchiveError as e:
            raise CollectorError(str(e)) from None
        try:
            self._bind()
        except Exception:
            self._queue.close()
            self._writer.listening()
            self._writer.join()
            for r in self._receivers:
                r.stop_accepting(0)
                r.close(0)
            raise
        try:
            for r in self._receivers:
                r.start()
        finally:
            self._writer.listening()  # only now: what a crash left in the spool lands while exports are answered
        if self._gauges is not None:
            self._gauges.start()
        self._state = "running"
        self._say_where()

    def _say_where(self) -> None:
        """Tell `import` and `scrape`, which find the archive locked, where to send their batches instead
        (collector/endpoint.py); a folder archive's only (a single file has no `_writer/`)."""
        if is_single_file(self.archive_path):
            return
        cfg = self.config
        url = (
            None if self.http_port is None else endpoint.listen_url(cfg.host, self.http_port, cfg.tls_cert is not None)
        )
        try:
            endpoint.write(self.archive_path, url, cfg.tls_cert, cfg.auth_token is not None)
        except OSError as e:  # the collector works without it; imports then say the archive is locked
            log.error("cannot write %s: %s", endpoint.path_of(self.archive_path), e.strerror or e)

    def _preflight(self) -> None:
        """Before the archive is opened (or created): the host both receivers can take, and each given port
        free to bind (gRPC's own failure gives no reason, and logs a line of its own); CollectorError if not."""
        cfg = self.config
        try:
            check_host(cfg.host)
        except HostError as e:
            raise CollectorError(str(e)) from None
        for name, port in (("OTLP/gRPC", cfg.grpc_port), ("OTLP/HTTP", cfg.http_port)):
            if port and (why := why_not(cfg.host, port)):
                raise CollectorError(f"{name}: cannot listen on {cfg.host}:{port} ({why})")

    def _bind(self) -> None:
        cfg = self.config
        ssl_context = cfg.ssl_context()  # before either receiver: a certificate that does not load stops both
        if cfg.grpc_port is not None:
            # imported on use: concurrent.futures 92 ms to import
            from budgetscope.collector.grpc_receiver import GrpcUnavailable, OtlpGrpcReceiver

            try:
                grpc_receiver = OtlpGrpcReceiver(
                    cfg.host,
                    cfg.grpc_port,
                    self._queue,
                    cfg.max_message_bytes,
                    cfg.retry_after_s,
                    metrics=cfg.metrics,
                    tls=cfg.tls(),
                    token=cfg.auth_token,
                )
            except GrpcUnavailable as e:
                raise CollectorError(str(e)) from None
            except OSError as e:
                raise CollectorError(f"OTLP/gRPC: {e}") from None
            self._receivers.append(grpc_receiver)
            self.grpc_port = grpc_receiver.port
        if cfg.http_port is not None:
            # imported on use: concurrent.futures 92 ms, asyncio 89 ms, ssl 26 ms to import
            from budgetscope.collector.http_receiver import OtlpHttpReceiver

            try:
                http_receiver = OtlpHttpReceiver(
                    cfg.host,
                    cfg.http_port,
                    self._queue,
                    cfg.max_message_bytes,
                    cfg.retry_after_s,
                    metrics=cfg.metrics,
                    max_connections=cfg.max_connections,
                    ssl_context=ssl_context,
                    token=cfg.auth_token,
                    status=self.status,
                    self_metrics=self._self_metrics,
                )
            except OSError as e:
                raise CollectorError(
                    f"OTLP/HTTP: cannot listen on {cfg.host}:{cfg.http_port} ({bind_failure(e)})"
                ) from None
            self._receivers.append(http_receiver)
            self.http_port = http_receiver.port

    def stop(self) -> CollectorStats:
        """Stop accepting, land everything already accepted, answer it, close the archive; return the counts.

        Requests that arrive meanwhile are refused with a retryable status (503 / UNAVAILABLE)."""
        if self._state == "running":
            self._state = "stopping"
            endpoint.remove(self.archive_path)
            self._queue.close()
            for r in self._receivers:
                r.stop_accepting(self.config.drain_timeout_s)
            if not self._writer.join(self.config.drain_timeout_s):
                log.error("the archive writer did not finish within %.0f s", self.config.drain_timeout_s)
            for r in self._receivers:
                r.close(timeout_s=5.0)
            if self._gauges is not None:
                self._gauges.stop()
            self._state = "stopped"
        return self.stats

    def _self_metrics(self) -> bytes:
        """`GET /metrics`: this collector's figures in Prometheus text, and with budgets the live SLIs and the
        attribution gauges."""
        refused = sum(getattr(r, "num_refused_connections", 0) for r in self._receivers)
        extra = [*self._sli.families(), *self._gauges.families()] if self._sli and self._gauges else []
        return render(self.stats, self._queue.pending_bytes, self._queue.max_pending_bytes, refused, extra=extra)

    def _published(self, con, manifest) -> None:
        """A commit was published (the writer's thread): the live SLIs take its rows, the gauges its time."""
        try:
            self._sli.published(con)
        except Exception as e:  # noqa: BLE001 - the SLIs must never stop the writer; the commit stands
            log.error("live SLIs: counting a commit failed: %s", (str(e).splitlines() or [type(e).__name__])[0])
        self._gauges.published(manifest.committed_ns)

    def _settle(self) -> None:
        try:
            self._sli.settle()
        except Exception as e:  # noqa: BLE001 - as above
            log.error("live SLIs: settling failed: %s", (str(e).splitlines() or [type(e).__name__])[0])

    @property
    def sli(self) -> SliCounters | None:
        """The live SLI counters (None without budgets)."""
        return self._sli

    @property
    def attribution_gauges(self) -> AttributionGauges | None:
        """The sliding-window attribution (None without budgets)."""
        return self._gauges

    @property
    def stats(self) -> CollectorStats:
        """The counts so far (a copy)."""
        return self._writer.snapshot()

    def status(self) -> dict:
        """What GET /status answers: the counts so far, the spans no adapter claimed (a folder archive's last
        commit, read at most every STATUS_EVERY_S; None for a single-file archive, which the writer holds), and
        the warnings: spans arrived but no request was derived; acknowledged batches wait in the spool, unseen by
        readers (a full disk)."""
        stats = self.stats
        unclaimed = self._unclaimed()
        warning = nothing_derived_warning(stats.spans, stats.requests_derived, unclaimed or {"total": None})
        warnings = [w for w in (warning, stats.spool_note(str(self.archive_path))) if w]
        return {
            "state": self._state,
            "endpoints": self.endpoints,
            "stats": dataclasses.asdict(stats),
            "error": self.error,
            "unclaimed_spans": unclaimed,
            "warnings": warnings,
        }

    def _unclaimed(self) -> dict | None:

        if is_single_file(self.archive_path):
            return None
        with self._status_lock:
            at, found = self._unclaimed_at
            if found is None or time.monotonic() - at >= STATUS_EVERY_S:
                try:
                    with ArchiveReader(self.archive_path) as r:
                        found = unclaimed_spans(r.con)
                except ArchiveError as e:  # nothing committed yet, or the archive is unreadable: say so
                    found = {"total": None, "groups": None, "top": [], "error": str(e)}
                self._unclaimed_at = (time.monotonic(), found)
            return found

    @property
    def error(self) -> str | None:
        """Set when the archive broke and could not be reopened: every request now fails (503 / UNAVAILABLE)."""
        return self._writer.error

    @property
    def endpoints(self) -> list[str]:
        """Where exporters should point, e.g. `OTLP/gRPC 127.0.0.1:4317`."""
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        out = []
        if self.grpc_port is not None:
            out.append(f"OTLP/gRPC {host}:{self.grpc_port}" + (" (TLS)" if self.config.tls_cert else ""))
        if self.http_port is not None:
            scheme = "https" if self.config.tls_cert else "http"
            out.append(f"OTLP/HTTP {scheme}://{host}:{self.http_port}/v1/traces")
        return out
