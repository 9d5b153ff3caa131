"""Landing Prometheus samples in the archive's `server_metrics` table, one scrape a batch.

Each scrape (or imported `/metrics` text file) is one batch recorded in `ingest_batches` (format
`prometheus-text`), in one transaction with its rows: a scrape lands whole or not at all. The batch's content
hash covers the instance, the scrape time and the body, so the same scrape (or file) lands once.

A scrape for an archive that a collector writes travels to it as a JSON document (`scrape_document`: the body
and where and when it was scraped), which the collector lands with `land_scrape` (collector/endpoint.py).
"""

from __future__ import annotations

import hashlib
import json
import time

from budgetscope.ingest.rows import insert_rows
from budgetscope.schema import SERVER_METRICS
from budgetscope.sources.prometheus import parse


def land(
    archive, body: str, *, instance: str, service_name: str, ts_ns: int, origin: str, position: str = "scrape"
) -> int:
    """Parse `body` and land its samples (raises PrometheusError, landing nothing, on a bad line).

    Returns the number of rows inserted (0 when this exact batch was already landed)."""
    samples = parse(body)
    con = archive.con
    digest = scrape_digest(instance, ts_ns, body)
    con.execute(SERVER_METRICS.ddl())  # archives made before the table existed
    con.execute("BEGIN TRANSACTION")
    try:
        if con.execute("SELECT 1 FROM ingest_batches WHERE content_hash = ?", [digest]).fetchone():
            con.execute("ROLLBACK")
            return 0
        (batch_id,) = con.execute("SELECT coalesce(max(batch_id), 0) + 1 FROM ingest_batches").fetchone()
        con.execute(
            "INSERT INTO ingest_batches (batch_id, content_hash, origin, position, format, received_ns, "
            "span_count, spans_inserted, duplicate_spans) VALUES (?, ?, ?, ?, 'prometheus-text', ?, 0, 0, 0)",
            [batch_id, digest, origin, position, time.time_ns()],
        )
        rows = [(s.ts_ns or ts_ns, service_name, instance, s.metric, s.labels_json, s.value, batch_id) for s in samples]
        insert_rows(con, "server_metrics", rows, 7)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    archive.publish()  # a folder archive's readers see each scrape as it lands
    return len(rows)


def scrape_digest(instance: str, ts_ns: int, body: str) -> str:
    """The scrape's `ingest_batches.content_hash`: the same scrape (or file) lands once."""
    return hashlib.blake2b(f"{instance}\n{ts_ns}\n".encode() + body.encode(), digest_size=16).hexdigest()


SCRAPE_KEYS = ("body", "instance", "service_name", "ts_ns", "origin", "position")


def scrape_document(
    body: str, *, instance: str, service_name: str, ts_ns: int, origin: str, position: str = "scrape"
) -> bytes:
    """A scrape as the JSON document the collector takes (`land_scrape`'s argument)."""
    return json.dumps(
        {
            "body": body,
            "instance": instance,
            "service_name": service_name,
            "ts_ns": ts_ns,
            "origin": origin,
            "position": position,
        }
    ).encode()


def land_scrape(archive, doc: bytes) -> int:
    """Land a `scrape_document` (`land`); ValueError (one line) when it is not one, PrometheusError on a bad
    line of its body."""
    try:
        d = json.loads(doc)
    except ValueError as e:
        raise ValueError(f"not a scrape document: {e}") from None
    if not isinstance(d, dict) or any(k not in d for k in SCRAPE_KEYS) or not isinstance(d["ts_ns"], int):
        raise ValueError(f"not a scrape document: want the keys {', '.join(SCRAPE_KEYS)}, ts_ns an integer")
    text = {k: str(d[k]) for k in SCRAPE_KEYS if k != "ts_ns"}
    return land(
        archive,
        text["body"],
        instance=text["instance"],
        service_name=text["service_name"],
        ts_ns=d["ts_ns"],
        origin=text["origin"],
        position=text["position"],
    )
