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

from budgetscope.derive.classify import CLIENT_ROOT_SQL, mentions
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
    rows, where it lacks them; `new_spans()`: SQL of the spans landed since the last commit.

    A commit calls `before()`, derives, calls `after(derived)` (and derives again when it says so), then
    `kept(derived)`. Without imports that is one query a commit (`before`'s look for ids), and the archive's waiting
    records are read once, at the first commit."""

    def __init__(
        self,
        con,
        published: Callable[[int | None, int | None], str | None],
        bring_back: Callable[[str], None],
        new_spans: Callable[[], str],
    ):
        self.con = con
        self.new_spans = new_spans
        self.published = published
        self.bring_back = bring_back
        self.waiting: int | None = None  # rows of `bs_waiting`; None until read from the archive
        self.touched = False  # this commit's derivation met a request id: the waiting records may change

    @property
    def tracking(self) -> bool:
        """Whether this commit needs the traces it derives (`derived` of `after` and `kept`): it met a request id,
        or records wait."""
        self._seed()
        return self.touched or bool(self.waiting)

    def before(self) -> None:
        """Add to `pending_traces` the traces on the other side of the request ids that the spans landed since the
        last commit hold (imported records), and that the pending traces' rows held (their records must be derived
        with them again). Only the new spans are searched, the text first: a span's JSON is parsed only when the
        attribute's name is in it (over a working set of 205,000 spans: 30 ms a commit parsing every pending
        trace's spans, docs/benchmarks.md)."""
        (found,) = self.con.execute(f"""CREATE OR REPLACE TEMP TABLE bs_ids AS
            SELECT CAST(attributes->>'{ID_ATTR}' AS VARCHAR) AS rid, min(start_ns) AS lo, max(end_ns) AS hi
            FROM ({self.new_spans()}) n WHERE {mentions(ID_ATTR)} AND {CLIENT_ROOT_SQL}
              AND (attributes->>'{ID_ATTR}') IS NOT NULL GROUP BY 1
            UNION ALL
            SELECT client_request_id, min(coalesce(client_sent_ns, arrival_ns)), max(coalesce(end_ns, arrival_ns))
            FROM requests WHERE {_IN_PENDING} AND client_request_id IS NOT NULL GROUP BY 1""").fetchone()
        self.touched = bool(found)
        if found:
            self._widen()

    def after(self, derived: str) -> bool:
        """After a derivation of the traces `derived` (SQL of trace ids): add to `pending_traces` those of the
        records that their new server rows' ids wait for (and every row with those ids); whether any was added."""
        self._seed()
        if not self.waiting:
            return False
        (found,) = self.con.execute(f"""CREATE OR REPLACE TEMP TABLE bs_ids AS
            SELECT r.request_id AS rid, min(least(r.arrival_ns, w.lo)) AS lo,
                   max(greatest(coalesce(r.end_ns, r.arrival_ns), w.hi)) AS hi
            FROM requests r JOIN bs_waiting w ON w.request_id = r.request_id
            WHERE r.trace_id IN ({derived}) AND r.server_span_id IS NOT NULL AND NOT r.has_client_span
            GROUP BY 1""").fetchone()
        if not found:
            return False
        self.touched = True
        return self._widen()

    def kept(self, derived: str) -> None:
        """After the last derivation of a commit: the waiting records as the traces `derived` left them."""
        if not self.tracking:
            return
        con = self.con
        con.execute(f"DELETE FROM bs_waiting WHERE trace_id IN ({derived})")
        con.execute(f"""INSERT INTO bs_waiting
            SELECT client_request_id, trace_id, client_sent_ns, coalesce(client_end_ns, client_sent_ns)
            FROM requests WHERE trace_id IN ({derived}) AND {WAITING}""")
        (self.waiting,) = con.execute("SELECT count(*) FROM bs_waiting").fetchone()
        self.touched = False

    def _seed(self) -> None:
        """Read the archive's waiting records, once."""
        if self.waiting is not None:
            return
        rows = self._rows(None, None)
        (self.waiting,) = self.con.execute(f"""CREATE OR REPLACE TEMP TABLE bs_waiting AS
            SELECT client_request_id AS request_id, trace_id, client_sent_ns AS lo,
                   coalesce(client_end_ns, client_sent_ns) AS hi FROM ({rows}) WHERE {WAITING}""").fetchone()

    def _rows(self, lo: int | None, hi: int | None) -> str:
        """The archive's live `requests` rows: the working set's, and the published ones in the window."""
        published = self.published(lo, hi)
        return "SELECT * FROM requests" + (f" UNION ALL BY NAME SELECT * FROM ({published})" if published else "")

    def _widen(self) -> bool:
        """The rows of the ids in `bs_ids` (rid, lo, hi) → their traces, read back and added to `pending_traces`;
        whether any trace was added."""
        con = self.con
        lo, hi = con.execute("SELECT min(lo), max(hi) FROM bs_ids WHERE rid IS NOT NULL").fetchone()
        if lo is None:
            return False
        rows = self._rows(lo - MARGIN_NS, hi + MARGIN_NS)
        (added,) = con.execute(f"""CREATE OR REPLACE TEMP TABLE bs_linked AS
            SELECT * FROM ({_WINDOWS.format(rows=rows, ids="SELECT rid FROM bs_ids")})
            WHERE trace_id NOT IN (SELECT trace_id FROM pending_traces)""").fetchone()
        if added:
            self.bring_back("SELECT trace_id, lo, hi FROM bs_linked")
            con.execute("INSERT INTO pending_traces SELECT trace_id FROM bs_linked")
        con.execute("DROP TABLE bs_linked")
        return bool(added)
