"""What became of an imported file's records: joined to their server rows by request id, or not, and why.

A load tool's export (AIPerf, GuideLLM) has no trace context; each record keeps the id the server also records:
  aiperf    `metadata.x_request_id`: AIPerf sends it as the `X-Request-ID` header; budgetscope's engine (and
            vLLM, SGLang) take that header as the request id;
  guidellm  `response_id`: the `id` of the OpenAI response, which the server sets to its request id.
The importer keeps that id on the client span (`ID_ATTR`); the archive's derivation joins the record to the one
server row with that request id, whichever landed first (derive/requests.py `ID_LINKS`, derive/id_links.py). This
module only reads back what happened to a file's records, for the summary and its warning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from budgetscope.derive.client import ID_ATTR

SHOWN_IDS = 5
"""How many of the ids not joined a warning names."""


@dataclass(slots=True)
class JoinReport:
    records: int = 0  # records of the file carrying a request id
    joined: int = 0  # ... joined to their server row
    no_server_row: list[str] = field(default_factory=list)  # ids no server row has (yet)
    ambiguous: list[str] = field(default_factory=list)  # ids several server rows (or several records) have

    def warning(self, path: str, key: str) -> str | None:
        """One line saying which records were not joined and why, or None when all were."""
        parts = []
        if self.no_server_row:
            parts.append(
                f"{len(self.no_server_row):,} found no server row with their {key} ({_ids(self.no_server_row)}): "
                "client-only rows until the server's spans land, when they join"
            )
        if self.ambiguous:
            parts.append(
                f"{len(self.ambiguous):,} whose {key} more than one server row or record has "
                f"({_ids(self.ambiguous)}): not joined"
            )
        if not parts:
            return None
        return f"{path}: {self.records - self.joined:,} of {self.records:,} records not joined: " + "; ".join(parts)


def _ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN_IDS])
    return shown + (f", … {len(ids) - SHOWN_IDS:,} more" if len(ids) > SHOWN_IDS else "")


def request_ids(doc_bytes: bytes) -> dict[str, str]:
    """client span id → request id (`ID_ATTR`), over the client spans of an importer's OTLP/JSON document."""
    doc = json.loads(doc_bytes)
    out = {}
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                for kv in s.get("attributes", []):
                    if kv.get("key") == ID_ATTR and "stringValue" in kv.get("value", {}):
                        out[s["spanId"]] = kv["value"]["stringValue"]
    return out


def join_report(con, ids: dict[str, str]) -> JoinReport:
    """What became of the records `ids` (client span id → request id) in the archive read by `con` (its
    `requests`)."""
    rep = JoinReport(records=len(ids))
    if not ids:
        return rep
    rows = con.execute(
        """SELECT r.client_span_id, r.server_span_id IS NOT NULL FROM requests r
        WHERE r.client_span_id IN (SELECT unnest(?::VARCHAR[]))""",
        [list(ids)],
    ).fetchall()
    joined = {span for span, has_server in rows if has_server}
    rep.joined = len(joined)
    waiting = sorted({rid for span, rid in ids.items() if span not in joined})
    if not waiting:
        return rep
    counts = dict(
        con.execute(
            """SELECT request_id, count(*) FROM requests WHERE server_span_id IS NOT NULL
            AND request_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY 1""",
            [waiting],
        ).fetchall()
    )
    for rid in waiting:  # a server row that is there, yet not joined: another one, or another record, has the id
        (rep.ambiguous if counts.get(rid) else rep.no_server_row).append(rid)
    return rep
