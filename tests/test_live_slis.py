"""`collect --budgets`: the live SLIs on GET /metrics count each request once, judged exactly as `report` judges
it, and the attribution gauges say what `report` says over the same requests.

A real collector (in process, OTLP/HTTP on a free port), real exports, the real exposition read back with
prometheus_client's parser."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import otlp_wire as w
from budgetscope.analysis import coverage, slo
from budgetscope.analysis.budgets import parse_budgets
from budgetscope.analysis.judging import value_sql
from budgetscope.analysis.report import build_report
from budgetscope.collector import Collector, CollectorError
from budgetscope.collector.sli import HISTOGRAM_FIGURES, bounds_ms
from budgetscope.opener import Archive

BUDGETS = parse_budgets(
    """
[tiers.interactive]
percentile = 99
ttft_ms = 60
tpot_ms = 2
e2e_ms = 300
[tiers.interactive.stages]
network = 3
queue = 30
decode = 150
[tiers.batch]
match = { model = "big" }
percentile = 90
e2e_ms = 400
""",
    "budgets.toml",
)
OUTCOMES = ["ok"] * 6 + ["error", "timeout", "rejected", "cancelled"]


def _request(rng: random.Random, i: int) -> list[dict]:
    """One request's spans: random stage times around the budgets, an outcome, a client span or not, and one
    output token now and then (TPOT unknown: NaN)."""
    tier = rng.choice(["interactive", "batch"])
    stages = (
        ("frontend", rng.uniform(0.5, 3)),
        ("queue", rng.choice([1, 5, 20, 45, 120])),
        ("prefill", rng.uniform(5, 30)),
        ("decode", rng.choice([20, 100, 200])),
        ("postprocess", 1),
    )
    return w.native_request(
        arrival=w.T0 + i * 50 * w.MS,
        stages=stages,
        tier=tier,
        model=rng.choice(["big", "small"]),
        output_tokens=rng.choice([1, 40, 100]),
        client=(rng.uniform(0.2, 4), 1) if rng.random() < 0.6 else None,
        extra_root={"budgetscope.outcome": rng.choice(OUTCOMES)},
    )[1]


def _post(port: int, spans: list[dict]) -> None:
    r = httpx.post(
        f"http://127.0.0.1:{port}/v1/traces",
        content=json.dumps(w.export(spans)),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200, r.text


def _scrape(port: int) -> dict:
    """(name, labels as a sorted tuple) → value of every sample on /metrics, as prometheus_client reads them."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _until(predicate, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@contextmanager
def _collected(archive_path, seed: int, n: int):
    """A collector with BUDGETS that has received, derived and counted `n` random requests."""
    rng = random.Random(seed)
    with Collector(
        archive_path, grpc_port=None, http_port=0, budgets=BUDGETS, sli_settle_s=0, attribution_every_s=3600
    ) as c:
        for first in range(0, n, 40):  # a few exports of many requests: each export lingers for company
            _post(c.http_port, [s for i in range(first, first + 40) for s in _request(rng, i)])
        _until(lambda: c.stats.requests_derived >= n and c.sli.waiting == 0)
        yield c


def test_counters_and_histograms_judge_every_request_once_as_report_does(archive_path):
    with _collected(archive_path, 5, 160) as c:
        got = _scrape(c.http_port)
    with Archive(archive_path, read_only=True) as a:
        rep = build_report(a.con, BUDGETS)
        values = {
            (tb.name, f): a.con.execute(
                f"SELECT {value_sql(f)} FROM requests WHERE tier = ? {'AND model = ?' if tb.match else ''} "
                f"AND outcome = 'ok' AND {value_sql(f)} IS NOT NULL AND NOT isnan({value_sql(f)})",
                [tb.name, *tb.match.values()],
            ).fetchall()
            for tb in BUDGETS.tiers
            for f in HISTOGRAM_FIGURES
        }
    checked = 0
    for t in rep["tiers"]:
        for f, v in t["burn_rates"]["figures"].items():
            key = (("figure", f), ("tier", t["name"]))
            assert got[(slo.JUDGED, key)] == v["period"]["judged"], (t["name"], f)
            assert got[(slo.WITHIN, key)] == v["period"]["within"], (t["name"], f)
            checked += 1
    assert checked == 7  # interactive: ttft, tpot, e2e, network, queue, decode; batch: e2e
    # failures are misses, cancelled requests are not judged, every request counted once
    interactive = next(t for t in rep["tiers"] if t["name"] == "interactive")
    assert interactive["burn_rates"]["figures"]["ttft"]["period"]["judged"] == interactive["judged_requests"]
    assert 0 < interactive["judged_requests"] < interactive["requests"]
    # an unknown figure is neither met nor missed: the network stage is judged only where a client span is
    judged = {f: got[(slo.JUDGED, (("figure", f), ("tier", "interactive")))] for f in ("ttft", "network")}
    assert 0 < judged["network"] < judged["ttft"]
    bounds = bounds_ms(BUDGETS)
    assert {30.0, 60.0, 2.0, 300.0, 150.0, 3.0, 400.0} <= set(bounds)  # every budget is a bucket bound
    for (tier, f), rows in values.items():
        labels = (("figure", f), ("tier", tier))
        assert got[(slo.DURATION + "_count", labels)] == len(rows)
        assert got[(slo.DURATION + "_sum", labels)] == pytest.approx(sum(r[0] for r in rows) / 1000, abs=1e-6)
        for b in bounds:
            le = (("figure", f), ("le", repr(b / 1000).removesuffix(".0")), ("tier", tier))
            assert got[(slo.DURATION + "_bucket", le)] == sum(r[0] <= b for r in rows), (tier, f, b)
    assert got[(slo.OBJECTIVE, (("tier", "batch"),))] == 0.9


@pytest.mark.slow
def test_late_spans_change_a_waiting_request_and_never_count_it_twice(archive_path):
    """The server's spans arrive, then (while the row waits) the client's: counted once, by the client's TTFT.
    A span after it was counted re-derives it again: not counted again, and said so."""
    with Collector(
        archive_path, grpc_port=None, http_port=0, budgets=BUDGETS, sli_settle_s=600, attribution_every_s=3600
    ) as c:
        stages = (("frontend", 1), ("queue", 5), ("prefill", 40), ("decode", 20), ("postprocess", 1))
        tid, spans = w.native_request(stages=stages, client=(30, 1))  # server TTFT 46 ms; client 46 + 30 + 1
        server, client = spans[:-1], spans[-1:]
        _post(c.http_port, server)
        _until(lambda: c.sli.waiting == 1)
        _post(c.http_port, client)
        _until(lambda: c.stats.requests_derived >= 2)
        assert c.sli.waiting == 1  # the newer row replaced the waiting one
        c.sli.settle_s = 0  # now settle: the writer counts what waits after its next commit
        _until(lambda: c.sli.waiting == 0)
        ttft = (("figure", "ttft"), ("tier", "interactive"))
        got = _scrape(c.http_port)
        assert (got[(slo.JUDGED, ttft)], got[(slo.WITHIN, ttft)]) == (1, 0)  # the client's 77 ms > 60
        assert got[(slo.LATE, ())] == 0
        root = server[0]["spanId"]
        _post(c.http_port, [w.span(tid, w.span_id(), "cache.lookup", w.T0, w.T0 + w.MS, parent=root)])
        _until(lambda: c.stats.requests_derived >= 3)
        _until(lambda: _scrape(c.http_port)[(slo.LATE, ())] == 1)
        got = _scrape(c.http_port)
        assert (got[(slo.JUDGED, ttft)], got[(slo.WITHIN, ttft)]) == (1, 0)
        assert got[(slo.PENDING, ())] == 0


def test_attribution_gauges_equal_the_report_over_the_window(archive_path):
    with _collected(archive_path, 9, 120) as c:
        # read as it will be once its last commit has settled (nothing in flight), over a window from an hour before
        # the first request
        now = time.time_ns() + int(coverage.SETTLE_S * 1e9) + 10**9
        window_s = (now - w.T0) // 10**9 + 3600
        c.attribution_gauges.window_s = window_s
        assert c.attribution_gauges.refresh(now_ns=now)
        got = _scrape(c.http_port)
    with Archive(archive_path, read_only=True) as a:
        rep = build_report(a.con, BUDGETS, since_ns=now - window_s * 10**9)
    infos = {k: v for k, v in got.items() if k[0] == slo.ATTRIBUTION_INFO}
    assert infos
    for t in rep["tiers"]:
        for kind, at in t["attribution"].items():
            if not at or at["shares"] is None:
                assert not any(dict(k[1])["tier"] == t["name"] and dict(k[1])["figure"] == kind for k in infos)
                continue
            for stage, share in at["shares"].items():
                labels = (("figure", kind), ("stage", stage), ("tier", t["name"]))
                assert got[(slo.ATTRIBUTION_SHARE, labels)] == pytest.approx(share, abs=1e-12)
            first = (t["contrast"].get(kind) or [None])[0]
            info = {"tier": t["name"], "figure": kind, "dominant": at["dominant"], "verdict": at["verdict"]}
            if first:
                info |= {"contrast_dimension": first["dimension"], "contrast_value": str(first["value"])}
            assert infos[(slo.ATTRIBUTION_INFO, tuple(sorted(info.items())))] == 1
            tail = (("figure", kind), ("tier", t["name"]))
            assert got[(slo.ATTRIBUTION_TAIL, tail)] == at["tail_size"]
    assert got[(slo.ATTRIBUTION_WINDOW, ())] == window_s
    assert got[(slo.ATTRIBUTION_LAG, ())] == 0


def test_the_attribution_lag_is_the_age_of_the_oldest_commit_it_does_not_reflect(archive_path):
    """After a pause in the stream (the gauges read a commit of minutes ago, then one new commit lands) the lag is
    how long that new commit has waited, not the pause; it grows while no refresh reads it."""
    from budgetscope.archive.reader import ArchiveReader
    from budgetscope.collector.attribution_gauges import AttributionGauges

    with _collected(archive_path, 3, 120):
        pass
    g = AttributionGauges(archive_path, BUDGETS, window_s=10**9)
    assert g.refresh()
    with ArchiveReader(archive_path) as r:
        read = r.manifest.committed_ns  # the commit it read
    assert g.lag_s() == 0
    g.published(read)  # the commit it read, told after: nothing unread
    assert g.lag_s() == 0
    later = read + 300 * 10**9  # five minutes of quiet, then two commits a second apart
    g.published(later)
    g.published(later + 10**9)
    assert g.lag_s(now_ns=later + 2 * 10**9) == 2.0
    assert g.lag_s(now_ns=later + 40 * 10**9) == 40.0


def test_budgets_need_a_folder_archive(tmp_path):
    with pytest.raises(CollectorError, match="folder archive"):
        Collector(tmp_path / "a.duckdb", grpc_port=None, http_port=0, budgets=BUDGETS)
    assert not (tmp_path / "a.duckdb").exists()


def test_a_bad_budgets_file_is_one_line_and_creates_no_archive(tmp_path):
    bad = tmp_path / "b.toml"
    bad.write_text("[tiers.x]\nttft_ms = -1\n")
    archive = tmp_path / "arch"
    out = subprocess.run(
        [sys.executable, "-m", "budgetscope.cli", "collect", "-a", str(archive), "--budgets", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"budgetscope: {bad}: tiers.x.ttft_ms: must be a positive number of ms, got -1"
    ]
    assert not archive.exists()


def test_budgets_without_the_http_receiver_is_one_line(tmp_path):
    (tmp_path / "b.toml").write_text("[tiers.x]\nttft_ms = 100\n")
    out = subprocess.run(
        [sys.executable, "-m", "budgetscope.cli", "collect", "-a", str(tmp_path / "a"), "--budgets"]
        + [str(tmp_path / "b.toml"), "--no-http"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (out.returncode, out.stderr.strip()) == (
        2,
        "budgetscope: --budgets serves its SLIs on the OTLP/HTTP port's GET /metrics: drop --no-http",
    )
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("behind_s", [0, 120], ids=["same-clock", "senders-2-min-behind"])
def test_the_attribution_gauges_leave_out_the_requests_in_flight(archive_path, behind_s):
    """Ten slow requests ended a few seconds ago and only their client's spans have landed (the server's are still
    in its exporter's batch): as client-only rows their TTFT is all `unaccounted`, and they are the tail. The gauges
    leave them out and count them; when the server's spans land, the gauges take them in and name their queue.
    Senders whose clocks are 2 minutes behind the collector's stamp requests that, by their end times, ended long
    before its last commit: they are in flight all the same, their spans having just come."""
    from budgetscope.archive.reader import ArchiveReader

    now = time.time_ns() - behind_s * 10**9  # the senders' clock

    def request(i: int, arrival: int, queue_ms: float) -> list[dict]:
        stages = (("frontend", 1), ("queue", queue_ms), ("prefill", 10), ("decode", 20), ("postprocess", 1))
        return w.native_request(arrival=arrival, stages=stages, client=(1, 1))[1]

    body = [s for i in range(50) for s in request(i, now - 60 * 10**9 + i * 100 * w.MS, 1 + (i % 10) * 3)]
    recent = [request(i, now - 3 * 10**9 + i * w.MS, 400) for i in range(10)]
    client_only = [s for spans in recent for s in spans if s["name"] == "llm.client.request"]
    servers = [s for spans in recent for s in spans if s["name"] != "llm.client.request"]
    with Collector(archive_path, grpc_port=None, http_port=0, budgets=BUDGETS, attribution_every_s=3600) as c:
        _post(c.http_port, body + client_only)
        _until(lambda: c.stats.requests_derived >= 60)
        assert c.attribution_gauges.refresh()
        early = _scrape(c.http_port)
        with ArchiveReader(archive_path) as r:  # what the report says of the same window, run at once
            rep = build_report(r.con, BUDGETS, since_ns=now - 600 * 10**9, last_commit_ns=r.manifest.committed_ns)
        _post(c.http_port, servers)
        _until(lambda: c.stats.requests_derived >= 70)
        assert c.attribution_gauges.refresh()
        landed = _scrape(c.http_port)

    def ttft_dominant(got: dict) -> str:
        ((labels, _),) = [
            (dict(k[1]), v)
            for k, v in got.items()
            if k[0] == slo.ATTRIBUTION_INFO and dict(k[1])["tier"] == "interactive" and dict(k[1])["figure"] == "ttft"
        ]
        return labels["dominant"]

    (tier,) = [t for t in rep["tiers"] if t["name"] == "interactive"]
    assert tier["attribution"]["ttft"]["dominant"] == "unaccounted"  # the client-only tail, which the report warns of
    assert rep["in_flight"]["client_only"] == 10 and "run the report again" in rep["warnings"][-1]
    assert early[(slo.ATTRIBUTION_IN_FLIGHT, ())] == 10
    assert ttft_dominant(early) == "queue"  # the landed requests' tail: their queue
    assert landed[(slo.ATTRIBUTION_IN_FLIGHT, ())] == 0
    assert ttft_dominant(landed) == "queue"
    tail = (("figure", "ttft"), ("tier", "interactive"))
    assert early[(slo.ATTRIBUTION_TAIL, tail)] == landed[(slo.ATTRIBUTION_TAIL, tail)] == 10
