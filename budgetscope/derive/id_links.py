"""Imported records and their server spans, derived together whichever arrived first.

An imported client record (AIPerf, GuideLLM: no trace context) stays in the trace of its file and joins the server
row with the request id it recorded (requests.py, `ID_LINKS`), when a derivation sees both. A writer derives only
the traces whose spans changed (`pending_traces`), so `IdLinks` adds the traces on the other side of each such
request id before and after a derivation, reading them back from the archive's segments where the writer's working
set no longer holds them:

  before   an imported record landed (its id), or a trace whose row already holds a record (the row's
           `client_request_id`: it is derived again, so its record must be there again) → every server row and
           every record with that id;
  after    a server row just derived, with no client span, whose request id an unjoined record waits for
           (`bs_waiting`) → that record and every other row with the id; derived once more.

So a file imported before, after or between the server's spans, or imported twice, gives one row a request, and
the archive's rows are the ones a derivation of all its spans at once gives (`budgetscope derive`).
`bs_waiting` (request id → the record's trace and times) holds the unjoined records: read once from the archive
when a writer first needs it, then kept with each derivation. Everything here is skipped by a writer whose
derivations meet no record with an id and that waits for none (an archive without imports).
"""

from __future__ import annotations

from collections.abc import Callable

from budgetscope.derive.classify import CLIENT_ROOT_SQL
from budgetscope.derive.client import ID_ATTR

MARGIN_NS = 3_600 * 10**9
"""A record and its server row are looked for within an hour of each other (the tool's clock and the server's
agree to far better on the runs this reads; segments are read only within the window)."""

WAITING = "client_request_id IS NOT NULL AND server_span_id IS NULL"
"""SQL over `requests`: an imported record's client-only row: its server row is not there, or not one."""

_IN_PENDING = "trace_id IN (SELECT trace_id FROM pending_traces)"
_WINDOWS = """
SELECT trace_id, min(lo) AS lo, max(hi) AS hi FROM (
  SELECT trace_id, arrival_ns AS lo, coalesce(end_ns, arrival_ns) AS hi FROM ({rows}) WHERE request_id IN ({ids})
  UNION ALL
  SELECT coalesce(client_trace_id, trace_id), coalesce(client_sent_ns, arrival_ns),
         coalesce(client_end_ns, end_ns, arrival_ns) FROM ({rows}) WHERE client_request_id IN ({ids})
) GROUP BY trace_id"""
"""The traces on both sides of the request ids `{ids}` among the rows `{rows}`, each with its time window."""


class IdLinks:
    """One a writer. `published(lo_ns, hi_ns)`: SQL of the archive's live `requests` rows in that arrival window
    (None for all) that its working set does not hold, or None when the working set is the whole archive (a single
    file); `bring_back(sql)`: read the traces `sql` yields (trace_id, lo, hi) back into the working set, spans and
    rows, where it lacks them."""

    def __init__(
        self, con, published: Callable[[int | None, int | None], str | None], bring_back: Callable[[str], None]
    ):
        self.con = con
        self.published = published
        self.bring_back = bring_back
        self._seeded = False

    def before(self) -> None:
        """Add to `pending_traces` the traces on the other side of the request ids the pending ones hold."""
        con = self.con
        con.execute(f"""CREATE OR REPLACE TEMP TABLE bs_ids AS
            SELECT CAST(attributes->>'{ID_ATTR}' AS VARCHAR) AS rid, min(start_ns) AS lo, max(end_ns) AS hi
            FROM spans WHERE {_IN_PENDING} AND {CLIENT_ROOT_SQL} AND attributes->>'{ID_ATTR}' IS NOT NULL GROUP BY 1
            UNION ALL
            SELECT client_request_id, min(coalesce(client_sent_ns, arrival_ns)), max(coalesce(end_ns, arrival_ns))
            FROM requests WHERE {_IN_PENDING} AND client_request_id IS NOT NULL GROUP BY 1""")
        self._widen()

    def after(self, derived: str) -> bool:
        """After a derivation of the traces `derived` (SQL of trace ids): add to `pending_traces` those of the
        records that their new server rows' ids wait for (and every row with those ids); whether any was added."""
        con = self.con
        self._seed()
        if not con.execute("SELECT count(*) FROM bs_waiting").fetchone()[0]:
            return False
        con.execute(f"""CREATE OR REPLACE TEMP TABLE bs_ids AS
            SELECT r.request_id AS rid, min(least(r.arrival_ns, w.lo)) AS lo,
                   max(greatest(coalesce(r.end_ns, r.arrival_ns), w.hi)) AS hi
            FROM requests r JOIN bs_waiting w ON w.request_id = r.request_id
            WHERE r.trace_id IN ({derived}) AND r.server_span_id IS NOT NULL AND NOT r.has_client_span
            GROUP BY 1""")
        return self._widen()

    def kept(self, derived: str) -> None:
        """After the last derivation of a commit: the waiting records as the traces `derived` left them."""
        if not self._seeded:
            if not self.con.execute(f"SELECT count(*) FROM requests WHERE {WAITING}").fetchone()[0]:
                return  # nothing waits: no need to read the archive's waiting records yet
            self._seed()
        self.con.execute(f"DELETE FROM bs_waiting WHERE trace_id IN ({derived})")
        self.con.execute(f"""INSERT INTO bs_waiting
            SELECT client_request_id, trace_id, client_sent_ns, coalesce(client_end_ns, client_sent_ns)
            FROM requests WHERE trace_id IN ({derived}) AND {WAITING}""")

    def _seed(self) -> None:
        if self._seeded:
            return
        con = self.con
        rows = self._rows(None, None)
        con.execute(f"""CREATE OR REPLACE TEMP TABLE bs_waiting AS
            SELECT client_request_id AS request_id, trace_id, client_sent_ns AS lo,
                   coalesce(client_end_ns, client_sent_ns) AS hi FROM ({rows}) WHERE {WAITING}""")
        self._seeded = True

    def _rows(self, lo: int | None, hi: int | None) -> str:
        """The archive's live `requests` rows: the working set's, and the published ones in the window."""
        published = self.published(lo, hi)
        return "SELECT * FROM requests" + (f" UNION ALL BY NAME SELECT * FROM ({published})" if published else "")

    def _widen(self) -> bool:
        """The rows of the ids in `bs_ids` (rid, lo, hi) → their traces, read back and added to `pending_traces`;
        whether any trace was added."""
        con = self.con
        lo, hi, n = con.execute("SELECT min(lo), max(hi), count(*) FROM bs_ids WHERE rid IS NOT NULL").fetchone()
        if not n:
            return False
        rows = self._rows(lo - MARGIN_NS, hi + MARGIN_NS)
        ids = "SELECT rid FROM bs_ids"
        con.execute(f"""CREATE OR REPLACE TEMP TABLE bs_linked AS
            SELECT * FROM ({_WINDOWS.format(rows=rows, ids=ids)}) WHERE trace_id NOT IN (SELECT trace_id FROM pending_traces)""")
        (added,) = con.execute("SELECT count(*) FROM bs_linked").fetchone()
        if added:
            self.bring_back("SELECT trace_id, lo, hi FROM bs_linked")
            con.execute("INSERT INTO pending_traces SELECT trace_id FROM bs_linked")
        con.execute("DROP TABLE bs_linked")
        return bool(added)
