"""Landing Prometheus samples in the archive's `server_metrics` table, one scrape a batch.

Each scrape (or imported `/metrics` text file) is one batch recorded in `ingest_batches` (format
`prometheus-text`), in one transaction with its rows: a scrape lands whole or not at all. The batch's content
hash covers the instance, the scrape time and the body, so the same scrape (or file) lands once.
"""

from __future__ import annotations

import hashlib
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
    digest = hashlib.blake2b(f"{instance}\n{ts_ns}\n".encode() + body.encode(), digest_size=16).hexdigest()
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
