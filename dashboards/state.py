"""What every page shares: the archive and budgets the dashboard was opened with, the sidebar filters, and
cached calls into `budgetscope.analysis` (layout only: no SQL and no math here)."""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

import streamlit as st

from budgetscope.analysis import charts, coverage, explore, overview, request_view, timeline
from budgetscope.analysis.budgets import BudgetError, Budgets, TierBudget, load_budgets, parse_budgets
from budgetscope.analysis.report import Selection, build_report, tier_report
from budgetscope.analysis.whatif import to_toml
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.reader import committed_ns
from budgetscope.opener import Archive

NONE_TENANT = "(none)"


def _arg(name: str, env: str) -> str:
    """--name VALUE after `streamlit run app.py --`, else the environment variable the CLI sets."""
    argv = sys.argv[1:]
    if f"--{name}" in argv and argv.index(f"--{name}") + 1 < len(argv):
        return argv[argv.index(f"--{name}") + 1]
    return os.environ.get(env, "")


LIVE_EVERY_S = 2.0
"""With --live, how often the page looks for a new commit of the archive."""
_AT = "@commit="


def plain_path() -> str:
    """The archive's path as given."""
    return _arg("archive", "BUDGETSCOPE_ARCHIVE")


def is_live() -> bool:
    return os.environ.get("BUDGETSCOPE_LIVE") == "1" or "--live" in sys.argv[1:]


def commit_of(path: str) -> int:
    """The archive's last commit (0 where there is none to read yet); a sharded root's grows with every shard's."""
    from budgetscope.archive.reader import last_commit

    return last_commit(path)


def archive_path() -> str:
    """The key every cached call reads the archive by: its path and the commit read (`PATH@commit=N`), so that a
    new commit is read afresh and an old one's results are not shown as new. With --live, the last commit.
    Without, the commit found first, kept for every session until a writer's compaction or expiry deletes its files
    (once the archive's readers' grace has passed): then the last commit, and the sidebar says so."""
    path = plain_path()
    if not path:
        return path
    if is_live():
        return f"{path}{_AT}{commit_of(path)}"
    pin = _pinned(path)
    key = pin.get("key")
    if key is None or _stale(key):
        if key is not None:
            pin["was"] = key.split(_AT)[1]
        pin["key"] = key = f"{path}{_AT}{commit_of(path)}"
    return key


@st.cache_resource(show_spinner=False)
def _pinned(path: str) -> dict:
    """Without --live, the key every session reads the archive by (`key`), and the commit it replaced (`was`)."""
    return {}


@st.cache_resource(show_spinner=False, max_entries=4)
def _archive(key: str) -> Archive:
    # sandboxed as `budgetscope query`'s: the pages read through it only, and nothing of the machine's beyond
    return Archive(key.split(_AT)[0], sandbox=True, create=False)


QUERY_SLOTS = 2
"""How many SQL-page queries the server runs at once (each a process of its own, within the page's limits)."""


@st.cache_resource(show_spinner=False)
def _query_slots() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(QUERY_SLOTS)


@contextmanager
def query_slot(wait_s: float):
    """One of the server's QUERY_SLOTS for an SQL-page query, waiting at most `wait_s` for one (QueryError)."""
    from budgetscope.query import QueryError

    slots = _query_slots()
    if not slots.acquire(timeout=wait_s):
        raise QueryError(f"{QUERY_SLOTS} queries kept this server busy for {wait_s:g} s; run it again in a moment")
    try:
        yield
    finally:
        slots.release()


def _stale(key: str) -> bool:
    try:
        return _archive(key).stale()
    except ArchiveError:  # not there (yet): the page says so when it reads it
        return False


def con():
    """A cursor of the cached read-only archive connection (one per script run: DuckDB cursors are per thread)."""
    return _archive(archive_path()).con.cursor()


def watch_for_commits(key: str) -> None:
    """With --live: look for a new commit every LIVE_EVERY_S and rerun the page when one lands. Without: say when
    the commit first read was deleted and a later one is read instead."""
    path, seq = key.split(_AT)
    if not is_live():
        was = _pinned(path).get("was")
        if was is not None:
            st.sidebar.caption(
                f"Reading commit {seq}: the files of commit {was}, read until then, were replaced by "
                "the writer's compaction or expiry (`--live` follows every commit)"
            )
        return

    @st.fragment(run_every=LIVE_EVERY_S)
    def _watch() -> None:
        st.caption(f"Live: commit {seq}, checked {datetime.now(timezone.utc):%H:%M:%S} UTC")
        if str(commit_of(path)) != seq:
            st.rerun()

    with st.sidebar:
        _watch()


def budgets_text() -> tuple[str, str | None]:
    """(TOML text of the budgets, its path); ("", None) when the dashboard was opened without budgets."""
    path = _arg("budgets", "BUDGETSCOPE_BUDGETS")
    if not path:
        return "", None
    return to_toml(load_budgets(path)), path


def budgets_from(text: str) -> Budgets | None:
    return parse_budgets(text, "budgets") if text else None


@st.cache_data(show_spinner=False, max_entries=4)
def archive_overview(path: str) -> dict:
    return overview.overview(_archive(path).con.cursor())


def in_flight_note(key: str, since_ns: int | None, until_ns: int | None) -> str | None:
    """The report's warning of the requests in the time range that may still lack spans (`coverage.in_flight`: the
    archive being written, its last commit under 10 s old). Not cached: it depends on the time."""
    a = _archive(key)
    return coverage.in_flight_warning(coverage.in_flight(a.con.cursor(), since_ns, until_ns, committed_ns(a)))


@dataclass(frozen=True)
class Filters:
    """The sidebar's choices: arrival time range (ns, until exclusive) and tier/model/tenant values."""

    since_ns: int | None
    until_ns: int | None
    values: tuple[tuple[str, tuple], ...]  # (column, chosen values) for each narrowed column

    def as_dict(self) -> dict | None:
        return {c: list(v) for c, v in self.values} or None

    @property
    def narrowed(self) -> bool:
        """The selection leaves out some of the archive's requests (a time range or a value chosen)."""
        return self.since_ns is not None or self.until_ns is not None or bool(self.values)


@st.cache_data(show_spinner="Building the report…", max_entries=32)
def report(path: str, text: str, f: Filters, budgets_file: str | None = None) -> dict:
    a = _archive(path)  # the requests in flight are not asked for here: `in_flight_note`, uncached, says them
    rep = build_report(
        a.con.cursor(), budgets_from(text), f.since_ns, f.until_ns, f.as_dict(), split_traces=a.split_traces
    )
    rep["budgets_file"] = budgets_file or rep["budgets_file"]
    return rep


def tier_budget(text: str, name: str) -> TierBudget:
    b = budgets_from(text)
    for tb in b.tiers if b else ():
        if tb.name == name:
            return tb
    return TierBudget(name=name)


@st.cache_data(show_spinner="Attributing the tail…", max_entries=32)
def tier_at(path: str, text: str, name: str, percentile: float, f: Filters) -> dict:
    tb = replace(tier_budget(text, name), percentile=percentile)
    return tier_report(
        _archive(path).con.cursor(), tb, f.since_ns, f.until_ns, budgeted=bool(text), filters=f.as_dict()
    )


def tier_names(rep: dict) -> tuple[list[str], int]:
    """The tiers a page offers: the budgets' tiers, then the archive's tiers that no budget names (shown without
    budgets, at p99); and the index of the first that has requests (0 when none has), so that a page opens on a
    tier with requests, not on a budgeted tier that matched none (the demo budgets over a sample whose requests
    all sit in `default`)."""
    names = [e["name"] for e in rep["tiers"]] + list(rep["unbudgeted_tiers"])
    counts = [e["requests"] for e in rep["tiers"]] + list(rep["unbudgeted_tiers"].values())
    return names, next((i for i, n in enumerate(counts) if n), 0)


def pick_tier(where, rep: dict, path: str, text: str, f: Filters, key: str, more: tuple[str, ...] = ()):
    """A "Tier" select box in `where` (st, or a column) over `tier_names`, opening on the first tier with requests;
    returns (the name chosen, its report entry: the report's, or for a tier no budget names its report without
    budgets; None for one of `more`)."""
    names, first = tier_names(rep)
    bare = set(rep["unbudgeted_tiers"])
    name = where.selectbox(
        "Tier", names + list(more), index=first, key=key, format_func=lambda n: f"{n} (no budget)" if n in bare else n
    )
    if name in more:
        return name, None
    entry = next((e for e in rep["tiers"] if e["name"] == name), None)
    return name, entry if entry is not None else tier_at(path, text, name, 99.0, f)


@st.cache_data(show_spinner="Building the timeline…", max_entries=32)
def tier_timeline(path: str, text: str, name: str, f: Filters, entry: dict) -> dict:
    return timeline.tier_timeline(
        _archive(path).con.cursor(), tier_budget(text, name), entry, f.since_ns, f.until_ns, f.as_dict()
    )


@st.cache_data(show_spinner=False, max_entries=32)
def window_requests(path: str, text: str, name: str, start_ns: int, end_ns: int, f: Filters, order_by: str):
    return timeline.window_requests(
        _archive(path).con.cursor(), tier_budget(text, name), start_ns, end_ns, f.as_dict(), order_by
    )


@st.cache_data(show_spinner="Comparing the tail with the body…", max_entries=32)
def tail_mixes(path: str, text: str, tier: str | None, metric: str, q: float, f: Filters):
    c = _archive(path).con.cursor()
    sel = Selection(tier_budget(text, tier).filters if tier else {}, f.since_ns, f.until_ns, f.as_dict())
    sp = explore.split(c, sel, metric, q)
    return sp, (explore.distributions(c, sel, sp) if sp else [])


@st.cache_data(show_spinner=False, max_entries=8)
def sweep_runs(path: str) -> list[str]:
    from budgetscope.analysis.capacity import sweep_runs as runs

    return runs(_archive(path).con.cursor())


@st.cache_data(show_spinner="Reading the sweep…", max_entries=8)
def capacity(path: str, text: str, run: str | None = None) -> dict:
    from budgetscope.analysis.capacity import analyze

    return analyze(_archive(path).con.cursor(), budgets_from(text), run)


@st.cache_data(show_spinner=False, max_entries=32)
def slowest(path: str, f: Filters, column: str) -> list:
    sel = Selection({}, f.since_ns, f.until_ns, f.as_dict())
    return request_view.slowest_requests(_archive(path).con.cursor(), sel, column, 50)


def one_request(path: str, key: str) -> dict | None:
    return request_view.request_view(_archive(path).con.cursor(), key)


def _utc(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)


def sidebar_filters(ov: dict) -> Filters:
    """The filters every page applies, chosen in the sidebar and kept across pages."""
    sb = st.sidebar
    sb.markdown("### Filters")
    since = until = None
    lo, hi = ov["first_arrival_ns"], ov["last_arrival_ns"]
    if lo is not None and hi > lo:
        start, end = _utc(lo).replace(microsecond=0), _utc(hi).replace(microsecond=0)
        end = end if end > start else start + timedelta(seconds=1)
        step = max((end - start) / 200, timedelta(seconds=1))
        # the labels under the slider must fit the sidebar: the time of day alone when the archive spans one day
        # (the day goes in the caption), minutes and the day when it spans several
        one_day = start.date() == end.date()
        picked = sb.slider(
            "Arrival time (UTC)",
            min_value=start,
            max_value=end,
            value=(start, end),
            step=step,
            format="HH:mm:ss" if one_day else "MM-DD HH:mm",
            key="f_time",
        )
        sb.caption(f"{start:%Y-%m-%d}, UTC" if one_day else f"{start:%Y-%m-%d} → {end:%Y-%m-%d}, UTC")
        if picked != (start, end):
            since = int(picked[0].timestamp() * 1e9)
            until = int(picked[1].timestamp() * 1e9) + 1_000_000_000  # the slider's second, inclusive
    chosen = []
    for col, label in (("tier", "Tier"), ("model", "Model"), ("tenant", "Tenant")):
        options = [NONE_TENANT if v is None else v for v in ov["values"][col]]
        if len(options) < 2:
            continue
        got = sb.multiselect(label, options, key=f"f_{col}", placeholder="all")
        if got:
            chosen.append((col, tuple(None if v == NONE_TENANT else v for v in got)))
    sb.caption(f"Archive: `{os.path.basename(plain_path().rstrip('/'))}` · {ov['requests']:,} requests")
    return Filters(since, until, tuple(chosen))


def start_page(title: str):
    """Common head of every page: the title, the archive's notes, the filters. Returns (overview, filters,
    budgets text, budgets path) or stops the page with what is missing and why."""
    st.title(title)
    path = archive_path()
    if not path:
        st.info("No archive given: open the dashboard with `budgetscope dashboard --archive A --budgets B`.")
        st.stop()
    watch_for_commits(path)
    try:
        ov = archive_overview(path)
    except ArchiveError as e:
        st.warning(f"The archive cannot be opened: {e}")
        st.stop()
    try:
        text, bpath = budgets_text()
    except BudgetError as e:
        st.warning(f"The budgets file cannot be used: {e}. Showing every tier at p99 without budgets.")
        text, bpath = "", None
    f = sidebar_filters(ov)
    if not ov["requests"]:
        st.info(ov["notes"][0])
        st.stop()
    # the archive's coverage and misreads; a narrowed selection's own are on the pages that read it (Budgets)
    whole = "Whole archive: " if f.narrowed else ""
    for note in ov["notes"]:
        st.caption("ℹ️ " + whole + note)
    if flight := in_flight_note(path, f.since_ns, f.until_ns):
        st.warning(flight)
    return ov, f, text, bpath


VERDICT_BOX = {"KEPT": st.success, "BROKEN": st.error, "UNKNOWN": st.warning}
"""The colour of a tier's verdict box by its status: green, red, yellow."""


def verdict_box(entry: dict) -> None:
    """A tier's headline in a box of its status's colour, inside a container keyed `verdict-<status>` (the
    browser test finds the box by it)."""
    from budgetscope.analysis.overview import headline

    with st.container(key=f"verdict-{entry['status'].lower()}-{entry['name']}"):
        VERDICT_BOX[entry["status"]](f"**{entry['status']}** — {headline(entry)}")


def ms(v) -> str:
    from budgetscope.analysis.verdict import ms as fmt

    return fmt(v)


utc = charts.utc
