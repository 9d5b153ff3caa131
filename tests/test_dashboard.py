"""Every dashboard page under Streamlit's AppTest on the sample archives: no exception, and the numbers shown
are the report's (`build_report`); empty archives and missing budgets say what is missing; the commands'
bad input is one line and exit 2."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="streamlit is not installed (the dashboard extra has it)")
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from budgetscope.analysis import build_report, load_budgets
from budgetscope.analysis.overview import headline
from budgetscope.cli import main
from budgetscope.opener import Archive

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
APP = str(ROOT / "dashboards" / "app.py")
PAGES = [
    "pages/budgets.py",
    "pages/breakdown.py",
    "pages/tail_explorer.py",
    "pages/timeline.py",
    "pages/request.py",
    "pages/sql.py",
    "pages/what_if.py",
    "pages/capacity.py",
]


@pytest.fixture(autouse=True)
def _release_archives():
    """The app caches a sandboxed connection per archive; drop it after each test, since DuckDB refuses to open a
    file again in this process with another configuration (the CLI's read-only one)."""
    yield
    import gc

    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()
    gc.collect()


def _app(monkeypatch, archive: Path, budgets: Path | None = SAMPLES / "budgets.toml") -> AppTest:
    monkeypatch.setenv("BUDGETSCOPE_ARCHIVE", str(archive))
    monkeypatch.setenv("BUDGETSCOPE_BUDGETS", str(budgets) if budgets else "")
    return AppTest.from_file(APP, default_timeout=60)


BOX = {"KEPT": "success", "BROKEN": "error", "UNKNOWN": "warning"}
"""The Streamlit element of a tier's verdict box by its status: green, red, yellow."""


def _clean(at: AppTest, page: str) -> None:
    """No exception, and no error box but the red verdict box of a BROKEN tier."""
    assert not at.exception, (page, [e.value for e in at.exception])
    errors = [e.value for e in at.error if not e.value.startswith("**BROKEN** — ")]
    assert not errors, (page, errors)


def _verdict_box(at: AppTest, entry: dict) -> str:
    """The kind of box (success, error, warning) the page shows the tier's headline in."""
    want = f"**{entry['status']}** — {headline(entry)}"
    found = [kind for kind in ("success", "error", "warning") if want in [b.value for b in getattr(at, kind)]]
    assert len(found) == 1, (want, found)
    return found[0]


def _report(name: str) -> dict:
    with Archive(SAMPLES / name, sandbox=True) as a:  # the app's configuration
        return build_report(a.con, load_budgets(SAMPLES / "budgets.toml"))


@pytest.mark.parametrize("name", ["burst", "slow-network", "long-outputs"])
def test_every_page_runs_and_budgets_match_the_report(monkeypatch, name):
    at = _app(monkeypatch, SAMPLES / name)
    rep = _report(name)["tiers"][0]
    for page in PAGES:
        if page != PAGES[0]:
            at.switch_page(page)
        at.run()
        _clean(at, page)
        assert at.title[0].value
        if page == "pages/budgets.py":
            assert _verdict_box(at, rep) == BOX[rep["status"]]
            assert rep["verdict"] in [m.value for m in at.markdown]
            metrics = {m.label: m.value for m in at.metric}
            assert metrics["Attainment (goodput)"] == f"{100 * rep['attainment']:.1f}%"
            assert metrics["Requests"] == f"{rep['requests']:,}"
            table = at.table[0].value
            from budgetscope.analysis.verdict import ms

            assert list(table["p99"]) == [ms(rep["metrics"][m]["p99"]) for m in ("ttft_ms", "tpot_ms", "e2e_ms")]
            # the burn rates and the error budget left: the report's (the same as Prometheus's, test_burn_parity.py)
            from budgetscope.analysis.render import burn_table

            _, headers, rows = burn_table(rep["burn_rates"])
            burn = at.table[1].value
            assert (list(burn.columns), burn.values.tolist()) == (headers, rows)
            assert "Error budget left (worst figure, over the selected range)" in metrics


def _ingested(tmp_path, outcomes: list[str]) -> Path:
    """An archive of one native `interactive` request an outcome, fast enough for budgets.toml when ok."""
    from otlp_wire import jsonl, outcome_requests

    docs = outcome_requests(outcomes)
    src, a = tmp_path / "t.jsonl", tmp_path / "a.duckdb"
    src.write_text(jsonl(*docs))
    assert CliRunner().invoke(main, ["ingest", str(src), "-a", str(a)]).exit_code == 0
    return a


@pytest.mark.parametrize(
    "outcomes, status",
    [
        (["error"] * 20, "BROKEN"),
        (["ok", "error"] * 10, "BROKEN"),
        (["ok"] * 20, "KEPT"),
        (["cancelled"] * 3, "UNKNOWN"),
    ],
)
def test_the_verdict_box_has_the_status_colour(monkeypatch, tmp_path, outcomes, status):
    a = _ingested(tmp_path, outcomes)
    with Archive(a, sandbox=True) as r:
        rep = build_report(r.con, load_budgets(SAMPLES / "budgets.toml"))["tiers"][0]
    assert rep["status"] == status
    at = _app(monkeypatch, a)
    at.run()
    _clean(at, "budgets")
    assert _verdict_box(at, rep) == BOX[status]


def test_breakdown_and_explorer_follow_the_percentile(monkeypatch):
    at = _app(monkeypatch, SAMPLES / "burst")
    at.switch_page("pages/breakdown.py").run()
    rep = _report("burst")["tiers"][0]
    a = rep["attribution"]["ttft"]
    assert f"the **{a['tail_size']:,}** requests" in at.markdown[0].value
    at.selectbox(key="bd_pct").set_value(90.0).run()
    _clean(at, "breakdown p90")
    assert "p90 =" in at.markdown[0].value
    at.switch_page("pages/tail_explorer.py").run()
    _clean(at, "tail explorer")
    dims = list(at.table[0].value["dimension"])
    assert "batch_size" in dims and "tenant" in dims


def test_pages_open_on_a_tier_that_has_requests(monkeypatch):
    # the demo budgets over the H200 sample: their `interactive` matches none of its requests, all in `default`
    at = _app(monkeypatch, SAMPLES / "h200-1b-served")
    for page, key in (
        ("breakdown", "bd_tier"),
        ("timeline", "tl_tier"),
        ("tail_explorer", "te_tier"),
        ("what_if", "wi_tier"),
    ):
        at.switch_page(f"pages/{page}.py").run()
        _clean(at, page)
        box = at.selectbox(key=key)
        assert (box.value, box.options) == ("default", ["interactive", "default (no budget)", *box.options[2:]]), page
    at.switch_page("pages/breakdown.py").run()
    assert "Tail = the **10** requests" in at.markdown[0].value


def test_budgets_page_does_not_open_on_a_budgeted_tier_without_requests(monkeypatch):
    # the same sample: no verdict box for the empty `interactive`, one line naming it, and a warning that names
    # the tier that holds the requests
    at = _app(monkeypatch, SAMPLES / "h200-1b-served")
    at.run()
    _clean(at, "budgets")
    assert not [h.value for h in at.header], "a tier without requests is shown as a tier"
    rep = _report("h200-1b-served")
    (n,) = rep["unbudgeted_tiers"].values()
    assert [w.value for w in at.warning] == [
        f"No budgeted tier has requests here; the requests are in tiers with no budget: default ({n:,} requests). "
        "Check the tiers' `match` in the budgets file, or open these tiers on the Breakdown page (at p99)."
    ]
    captions = [c.value for c in at.caption]
    assert "Budgeted tiers with no request in the selection (UNKNOWN: nothing to judge): interactive." in captions


def test_filters_narrow_every_page(monkeypatch):
    at = _app(monkeypatch, SAMPLES / "calm")
    at.run()
    lo, hi = at.slider(key="f_time").value
    assert at.slider(key="f_time").proto.format == "HH:mm:ss"  # one day: short labels that fit the sidebar
    assert any(c.value == f"{lo:%Y-%m-%d}, UTC" for c in at.sidebar.caption)
    at.slider(key="f_time").set_value((lo, lo + (hi - lo) / 2)).run()
    _clean(at, "filtered budgets")
    n = int(next(m.value for m in at.metric if m.label == "Requests").replace(",", ""))
    assert 0 < n < 45
    for page in PAGES[1:]:
        at.switch_page(page).run()
        _clean(at, f"filtered {page}")


def test_what_if_moves_attainment_and_verdict(monkeypatch):
    at = _app(monkeypatch, SAMPLES / "burst")
    at.switch_page("pages/what_if.py").run()
    assert at.metric[0].value == "71.0%"
    assert not at.metric[0].delta and not at.metric[1].delta  # nothing changed: no "↑ +0.0 pts"
    at.number_input(key="wi_ttft_ms_interactive").set_value(5000.0).run()
    at.number_input(key="wi_s_queue_interactive").set_value(1000.0).run()
    _clean(at, "what if")
    assert at.metric[0].value != "71.0%" and at.metric[0].delta.startswith("+")
    at.number_input(key="wi_ttft_ms_interactive").set_value(10.0).run()
    assert any("do not hold together" in w.value for w in at.warning)


def _digest(folder: Path) -> str:
    """One SHA-256 over every file of a folder archive (names and bytes), to see that nothing was written."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode() + f.read_bytes())
    return h.hexdigest()


def test_sql_page_runs_read_only_queries(monkeypatch):
    before = _digest(SAMPLES / "calm")
    at = _app(monkeypatch, SAMPLES / "calm")
    at.switch_page("pages/sql.py").run()
    assert at.dataframe[0].value.shape[0] == 1
    for sql in ("DELETE FROM requests", f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{SAMPLES / 'calm'}'"):
        at.text_area(key="sql_text").set_value(sql).run()
        at.button(key="sql_run").click().run()
        assert any("read-only" in w.value for w in at.warning)
    assert _digest(SAMPLES / "calm") == before
    at.text_area(key="sql_text").set_value("SELECT * FROM read_csv('/etc/passwd')").run()
    at.button(key="sql_run").click().run()
    assert any("may not touch files" in w.value for w in at.warning)
    assert not any("root" in str(df.value) for df in at.dataframe)


@pytest.mark.slow
def test_sql_page_bounds_each_query_and_survives_it(monkeypatch):
    """Issue 37: 10^5 rows of 100 kB passed 3 GB in the server; 350 nested calls showed a traceback; a query
    that crashed DuckDB took every user's page down. Each query runs in a process of its own within the page's
    limits: what fits in 64 MiB comes back, bad input is one line, and the page goes on."""
    at = _app(monkeypatch, SAMPLES / "calm")
    at.switch_page("pages/sql.py").run()
    at.text_area(key="sql_text").set_value("SELECT repeat('x', 100000) AS x FROM range(100000)").run()
    at.button(key="sql_run").click().run()
    assert not at.exception
    assert any("the result passed 64 MiB; the first" in c.value for c in at.caption)
    assert 0 < at.dataframe[0].value.shape[0] < 700
    at.text_area(key="sql_text").set_value("SELECT " + "abs(" * 350 + "1" + ")" * 350).run()
    at.button(key="sql_run").click().run()
    assert not at.exception
    (w,) = [w.value for w in at.warning if "did not run" in w.value]
    assert "nests expressions or subqueries more than 100 levels deep" in w and "\n" not in w
    at.text_area(key="sql_text").set_value("SELECT count(*) AS n FROM requests").run()
    at.button(key="sql_run").click().run()
    assert at.dataframe[0].value.shape[0] == 1


def test_request_page_opens_a_request_by_id(monkeypatch):
    with Archive(SAMPLES / "slow-network", sandbox=True) as a:
        (rid,) = a.con.execute("SELECT request_id FROM requests ORDER BY client_ttft_ms DESC LIMIT 1").fetchone()
    at = _app(monkeypatch, SAMPLES / "slow-network")
    at.switch_page("pages/request.py").run()
    at.text_input(key="rq_id").set_value(rid).run()
    _clean(at, "request")
    assert rid in at.markdown[0].value
    at.text_input(key="rq_id").set_value("nope").run()
    assert any("No request" in w.value for w in at.warning)


def test_spans_no_adapter_reads_are_named_on_the_page(monkeypatch, tmp_path):
    from otlp_wire import MS, T0, export, jsonl, span, span_id, trace_id

    src, a = tmp_path / "t.jsonl", tmp_path / "a.duckdb"
    src.write_text(
        jsonl(
            *[
                export([span(trace_id(), span_id(), f" Req {i:08x}", T0, T0 + MS, kind=2)], service="sglang")
                for i in range(3)
            ]
        )
    )
    assert CliRunner().invoke(main, ["ingest", str(src), "-a", str(a)]).exit_code == 0
    at = _app(monkeypatch, a)
    at.run()
    _clean(at, "budgets")
    assert [i.value for i in at.info] == [
        "warning: 3 spans arrived but no request was derived: no adapter reads their format (docs/sources.md lists "
        "the formats read); 3 spans no adapter claimed: ' Req <id>' of sglang (3)"
    ]


def test_spans_no_adapter_claimed_beside_requests_are_named_on_the_budgets_page(monkeypatch, tmp_path):
    """Requests, and spans of a server no adapter reads beside them: the Budgets page names those spans as the
    report's last lines do, for the selection."""
    from otlp_wire import MS, T0, export, jsonl, native_request, span, span_id, trace_id

    unread = [span(trace_id(), span_id(), f"handle {i:08x}", T0, T0 + MS, kind=2) for i in range(3)]
    src, a = tmp_path / "t.jsonl", tmp_path / "a"
    src.write_text(jsonl(export(native_request()[1]), export(unread, service="lmserve")))
    assert CliRunner().invoke(main, ["ingest", str(src), "-a", str(a)]).exit_code == 0
    at = _app(monkeypatch, a)
    at.run()
    _clean(at, "budgets")
    assert "ℹ️ 3 spans no adapter claimed: 'handle <id>' of lmserve (3)" in [c.value for c in at.caption]


def test_the_budgets_page_says_how_many_traces_of_a_sharded_root_were_split(monkeypatch, tmp_path):
    from test_shards import build_split_fleet

    root, _, split = build_split_fleet(tmp_path)
    at = _app(monkeypatch, root)
    at.run()
    _clean(at, "budgets")
    notes = [c.value for c in at.caption]
    assert any(n.startswith(f"ℹ️ {split} traces had spans on more than one shard") for n in notes), notes


def test_misread_requests_and_unread_events_are_named_on_every_page(monkeypatch, tmp_path):
    """As the report's coverage lines: a request that breaks an invariant of its format, and one whose span carries
    an event no adapter reads, are named in the notes under each page's title."""
    from otlp_wire import MS, T0, export, jsonl, native_request

    _, misread = native_request()
    root = next(s for s in misread if s["name"] == "llm.request")
    root["endTimeUnixNano"] = str(T0 + 100 * MS)  # its decode span runs past its end
    _, unread = native_request(arrival=T0 + 1000 * MS)
    next(s for s in unread if s["name"] == "llm.request")["events"] = [{"timeUnixNano": str(T0), "name": "odd"}]
    src, a = tmp_path / "t.jsonl", tmp_path / "a"
    src.write_text(jsonl(export(misread), export(unread)))
    assert CliRunner().invoke(main, ["ingest", str(src), "-a", str(a)]).exit_code == 0
    at = _app(monkeypatch, a)
    at.run()
    _clean(at, "budgets")
    notes = [c.value for c in at.caption]
    assert any("1 request misread (breaking an invariant of their format" in n for n in notes), notes
    assert any("1 request with span events no adapter reads: native 'odd' (1)" in n for n in notes), notes
    assert not any("Whole archive" in n or n.startswith("ℹ️ coverage: ") for n in notes), notes
    # the second request's second alone: the head's notes say they are the archive's, the Budgets page the selection's
    _, hi = at.slider(key="f_time").value
    at.slider(key="f_time").set_value((hi, hi)).run()
    _clean(at, "narrowed budgets")
    notes = [c.value for c in at.caption]
    assert any(n.startswith("ℹ️ Whole archive: 1 request misread (breaking an invariant") for n in notes), notes
    assert "ℹ️ coverage: 1 requests; 1 with server spans, 0 with client spans, 0 with both" in notes, notes
    selection = [n for n in notes if "Whole archive" not in n]
    assert any("1 request with span events no adapter reads: native 'odd' (1)" in n for n in selection), notes
    assert not any("misread" in n for n in selection), notes


def test_empty_archive_and_no_budgets_say_what_is_missing(monkeypatch, tmp_path):
    empty = tmp_path / "empty.duckdb"
    Archive(empty).close()
    at = _app(monkeypatch, empty, budgets=None)
    for page in PAGES:
        if page != PAGES[0]:
            at.switch_page(page)
        at.run()
        _clean(at, page)
        assert any("no requests yet" in i.value for i in at.info), page
    at = _app(monkeypatch, SAMPLES / "calm", budgets=None)
    at.run()
    _clean(at, "no budgets")
    assert any("without a budgets file" in c.value for c in at.caption)


def test_commands_bad_input_is_one_line_and_exit_2(tmp_path):
    r = CliRunner()
    bad = tmp_path / "bad.toml"
    bad.write_text("[tiers.x]\nttft_ms = -1\n")
    cases = [
        ["dashboard", "-a", str(tmp_path / "missing.duckdb")],
        ["dashboard", "-a", str(SAMPLES / "calm"), "-b", str(bad)],
        ["postmortem", "-a", str(SAMPLES / "calm"), "--from", "yesterday", "--to", "1", "-o", "x.html"],
        ["postmortem", "-a", str(SAMPLES / "calm"), "--from", "2", "--to", "1", "-o", "x.html"],
    ]
    for args in cases:
        res = r.invoke(main, args)
        assert res.exit_code == 2, (args, res.output)
        assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("budgetscope: "), res.stderr


def test_postmortem_writes_one_self_contained_file(tmp_path):
    out = tmp_path / "incident.html"
    res = CliRunner().invoke(
        main,
        [
            "postmortem",
            "-a",
            str(SAMPLES / "burst"),
            "-b",
            str(SAMPLES / "budgets.toml"),
            "--from",
            "2026-11-21T00:00:00Z",
            "--to",
            "2026-11-23T00:00:00Z",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    page = out.read_text()
    import html as h

    assert h.escape(headline(_report("burst")["tiers"][0])) in page
    assert "<script src=" not in page and "<link " not in page and "@import" not in page
    assert page.count("Plotly.newPlot") == 1 and "missing:" in page


def test_capacity_page_shows_the_sweep_as_the_analysis_computes_it(monkeypatch):
    from budgetscope.analysis import capacity

    sweep = SAMPLES / "sweep-tiny"
    budgets = SAMPLES / "sweep-tiny.toml"
    with Archive(sweep, sandbox=True, create=False) as a:
        res = capacity.analyze(a.con, load_budgets(budgets))
    at = _app(monkeypatch, sweep, budgets)
    at.switch_page("pages/capacity.py").run()
    _clean(at, "capacity")
    c = res["tiers"][0]
    assert c["verdict"] in [m.value for m in (*at.success, *at.warning)]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Capacity"] == f"{c['capacity_rps']:g} req/s"
    assert metrics["Knee"] == f"{c['knee_rps']:g} req/s"
    table = at.table[0].value
    assert list(table["rate/s"]) == [f"{r:g}" for r in res["rates"]]
    assert list(table["budgets"]) == [
        "keeps" if p["tiers"]["interactive"]["keeps"] else "BREAKS" for p in res["points"]
    ]


def test_an_archive_being_written_warns_of_the_requests_in_flight(monkeypatch, tmp_path):
    """Six requests with both sides' spans and four whose server spans have not landed: within the settle time of
    the archive's last commit every page says so under its title, as `report` does; past it, nothing."""
    import budgetscope.analysis.coverage as coverage
    from otlp_wire import MS, T0, export, jsonl, native_request

    spans = [native_request(arrival=T0 + i * 100 * MS, client=(1, 1))[1] for i in range(10)]
    src, a = tmp_path / "t.jsonl", tmp_path / "a"
    src.write_text(
        jsonl(
            *(export(s) for s in spans[:6]),
            *(export([x for x in s if x["name"] == "llm.client.request"]) for s in spans[6:]),
        )
    )
    assert CliRunner().invoke(main, ["ingest", str(src), "-a", str(a)]).exit_code == 0
    monkeypatch.setattr(coverage, "SETTLE_S", 10**9)  # the requests of 2026-01-01 count as just ended, now
    at = _app(monkeypatch, a)
    at.run()
    _clean(at, "budgets")
    (w,) = [w.value for w in at.warning if "being written" in w.value]
    assert w.startswith("warning: the archive is being written (last commit ")
    assert (
        "4 requests of the window with one side's spans only ended, or came, within 1e+09 s of it (4 client-only)" in w
    )
    monkeypatch.setattr(coverage, "SETTLE_S", 10.0)  # the default: those requests ended long before the commit
    at.run()
    _clean(at, "budgets")
    assert not [w.value for w in at.warning if "being written" in w.value]
