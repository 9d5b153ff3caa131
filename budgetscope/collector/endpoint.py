"""How another process reaches the collector that writes an archive: the collector's endpoint file, and a client.

A folder archive has one writer. While `budgetscope collect` writes one, it says in `_writer/collector.json` where
its OTLP/HTTP receiver listens (written once it listens, removed when it stops; the token is never written).
`budgetscope import` and `scrape`, finding the archive's writer lock held by that collector, send their batches
to it instead of writing the archive themselves: an import's spans as an OTLP/JSON export to `POST /v1/traces`,
the same bytes an import lands alone (so either way the same file lands once), and a scrape's samples to
`POST /v1/budgetscope/scrapes` (`sources/server_metrics.py`, `scrape_document`). The collector lands them as it
lands any export; readers see them with its next commit (about a second).

Light at import: no DuckDB (ssl and http.client load when a batch is sent).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from budgetscope.archive.manifest import WRITER_DIR

ENDPOINT_FILE = "collector.json"
"""In the archive's `_writer/` folder, beside the writer's lock."""
TRACES_PATH = "/v1/traces"
SCRAPES_PATH = "/v1/budgetscope/scrapes"
"""The collector's endpoint for a `/metrics` scrape (a JSON document: sources/server_metrics.py)."""
SCRAPE_CONTENT_TYPE = "application/json"
SCRAPE_FORMAT = "prometheus-scrape"
"""The batch format the receiver gives a scrape (landed by the collector's writer: collector/writer.py)."""
ORIGIN_HEADER = "x-budgetscope-origin"
"""A request header naming where a batch came from (a file's path): kept as its `ingest_batches.origin`."""
RETRIES = 30
"""Times a batch is sent again while the collector answers busy (429) or unavailable (503), after its
Retry-After."""


class CollectorUnreachable(Exception):
    """The archive's collector could not take a batch; the message is one line."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the collector writing an archive listens: `url` (scheme, host, port of its OTLP/HTTP receiver; None
    with --no-http), its TLS certificate (None without TLS) and whether it takes a bearer token."""

    pid: str
    url: str | None
    tls_cert: str | None
    auth: bool


def path_of(root: str | os.PathLike) -> Path:
    return Path(root) / WRITER_DIR / ENDPOINT_FILE


def write(root: str | os.PathLike, url: str | None, tls_cert: str | None, auth: bool) -> None:
    """Say where this process's collector listens (atomically: a reader sees the whole file or none)."""
    doc = {
        "pid": str(os.getpid()),
        "url": url,
        "tls_cert": None if tls_cert is None else os.path.abspath(tls_cert),
        "auth": auth,
    }
    target = path_of(root)
    tmp = target.with_name(f".{ENDPOINT_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, target)


def remove(root: str | os.PathLike) -> None:
    """Take this process's endpoint file away (a later collector's is left alone)."""
    target = path_of(root)
    try:
        if json.loads(target.read_text()).get("pid") == str(os.getpid()):
            target.unlink()
    except (OSError, ValueError):
        pass


def find(root: str | os.PathLike, holder_pid: str) -> Endpoint | None:
    """The endpoint of the collector whose process `holder_pid` holds the archive's writer lock; None when that
    writer is no collector (an `ingest`, a stale file left by a collector that died)."""
    try:
        doc = json.loads(path_of(root).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("pid") != holder_pid:
        return None
    return Endpoint(holder_pid, doc.get("url"), doc.get("tls_cert"), bool(doc.get("auth")))


def listen_url(host: str, port: int, tls: bool) -> str:
    """The URL another process on this machine reaches a receiver bound to `host`:`port` at (every interface: the
    loopback one)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"{'https' if tls else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"


class CollectorClient:
    """Sends batches to the collector at `endpoint` (with the bearer `token` it takes, if any)."""

    def __init__(self, endpoint: Endpoint, archive: str, token: str | None):
        self.endpoint = endpoint
        self.who = f"the collector writing {archive} (pid {endpoint.pid})"
        if endpoint.url is None:
            raise CollectorUnreachable(f"{self.who} serves no OTLP/HTTP (--no-http): batches reach it over HTTP only")
        if endpoint.auth and token is None:
            raise CollectorUnreachable(
                f"{self.who} takes a bearer token: give it with --auth-token-file or $BUDGETSCOPE_COLLECT_TOKEN"
            )
        self.token = token

    def send_spans(self, doc: bytes, origin: str | None = None) -> None:
        """An OTLP/JSON export of spans, from the file `origin` (kept as its batch's origin)."""
        self.send(TRACES_PATH, doc, "application/json", origin)

    def send_scrape(self, doc: bytes) -> None:
        """A scrape document (sources/server_metrics.py `scrape_document`)."""
        self.send(SCRAPES_PATH, doc, SCRAPE_CONTENT_TYPE)

    def send(self, path: str, body: bytes, content_type: str, origin: str | None = None) -> None:
        """POST `body` and wait for its answer: returns once the collector holds it safe (200); raises
        CollectorUnreachable with the collector's one-line reason otherwise. Busy and unavailable answers are
        retried after their Retry-After, RETRIES times."""
        headers = {"Content-Type": content_type, "Content-Length": str(len(body))}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if origin is not None:
            headers[ORIGIN_HEADER] = origin.encode("ascii", "backslashreplace").decode()[:512]
        for _ in range(RETRIES + 1):
            status, reason, retry_after = self._post(path, body, headers)
            if status == 200:
                return
            if status not in (429, 503):
                break
            time.sleep(retry_after)
        raise CollectorUnreachable(f"{self.who} answered {status}: {reason}")

    def _post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, float]:
        """(status, the one-line reason of an error, seconds to wait before retrying)."""
        # imported on use: http.client 30 ms, ssl 26 ms to import
        import http.client
        from urllib.parse import urlsplit

        url = urlsplit(self.endpoint.url)
        try:
            if url.scheme == "https":
                conn = http.client.HTTPSConnection(url.hostname, url.port, timeout=60, context=self._tls())
            else:
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            try:
                conn.request("POST", path, body, headers)
                resp = conn.getresponse()
                data = resp.read()
                retry_after = float(resp.getheader("Retry-After") or 1)
            finally:
                conn.close()
        except OSError as e:
            raise CollectorUnreachable(f"{self.who} at {self.endpoint.url} is not reachable ({e})") from None
        if resp.status == 200:
            return 200, "", 0.0
        return resp.status, _message(data) or resp.reason, min(max(retry_after, 0.1), 5.0)

    def _tls(self):
        """A TLS context that trusts the collector's own certificate, whatever name it carries: the endpoint
        file named it, on this machine."""
        # imported on use: ssl 26 ms to import
        import ssl

        try:
            ctx = ssl.create_default_context(cafile=self.endpoint.tls_cert)
        except (OSError, ssl.SSLError) as e:
            raise CollectorUnreachable(
                f"{self.who} serves TLS, and its certificate {self.endpoint.tls_cert} cannot be read ({e})"
            ) from None
        ctx.check_hostname = False  # pinned to that certificate instead
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        return ctx


def _message(data: bytes) -> str:
    """The one-line message of a collector's JSON error body (a google.rpc.Status); '' when there is none."""
    try:
        return str(json.loads(data).get("message", ""))
    except (ValueError, AttributeError):
        return ""
