"""Load modes users of other load tools expect: a closed loop (`--concurrency N` as the driver), a warm-up left out
of the figures, Retry-After honoured by a closed loop, and per-request records as CSV - against the stub server
(and a fake refusing server) on 127.0.0.1."""

import csv
import io

import orjson
import pytest
from click.testing import CliRunner

from budgetscope.commands.load import load
from budgetscope.loadgen import Arrivals, Distribution, Mix, Target, Workload, build_plan, run_load
from budgetscope.loadgen.dataset import Dataset, DatasetPrompt, apply_dataset
from budgetscope.loadgen.plan import build_closed_plan
from budgetscope.loadgen.records_csv import columns
from budgetscope.loadgen.stub_server import StubServer
from budgetscope.loadgen.warmup import Warmup
from fake_refusing_server import refusing

WORKLOAD = Workload(Distribution.parse("16"), Distribution.parse("5"), Mix.parse(None), Mix.parse(None))


@pytest.fixture
def server():
    srv = StubServer(tokens=5, token_delay_s=0.002, record=True).start_in_thread()
    yield srv
    srv.stop_thread()


def peak_in_flight(records) -> int:
    """The most requests in flight at once, from the records' own sent/end times."""
    events = sorted([(r.sent_ns, 1) for r in records] + [(r.end_ns, -1) for r in records], key=lambda e: (e[0], e[1]))
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def test_closed_loop_keeps_exactly_n_in_flight(server):
    result = run_load(build_closed_plan(WORKLOAD, 3, seed=1, num_requests=24), Target(server.url, model="stub"))
    recs = result.records
    assert len(recs) == 24 and all(r.is_ok for r in recs) and len(server.received) == 24
    assert peak_in_flight(recs) == 3
    # each request is due when its slot frees: the first three at once, every later one after some finish
    first_end = min(r.end_ns for r in recs)
    assert sum(r.sent_ns < first_end for r in recs) == 3
    assert all(r.scheduled_ns <= r.sent_ns for r in recs)
    s = result.summary()
    assert s["mode"] == "closed loop" and s["concurrency"] == 3 and s["planned_rate_rps"] is None


def test_closed_loop_duration_grows_the_plan_and_stops_starting(server):
    plan = build_closed_plan(WORKLOAD, 2, seed=1)
    assert len(plan) == 2 and plan.more is not None
    result = run_load(plan, Target(server.url, model="stub"), duration_s=0.4)
    recs = result.records
    assert len(recs) > 2 and all(r.is_ok for r in recs)
    t0 = min(r.sent_ns for r in recs)
    assert all(r.scheduled_ns - t0 < 0.4e9 + 0.05e9 for r in recs)  # nothing started past the duration
    assert [r.index for r in recs] == list(range(len(recs)))


def test_closed_plan_draws_the_same_requests_as_the_open_plan():
    closed = build_closed_plan(WORKLOAD, 4, seed=9, num_requests=10)
    open_ = build_plan(Arrivals.parse("poisson", 5), WORKLOAD, seed=9, num_requests=10)
    assert [r.seed for r in closed.requests] == [r.seed for r in open_.requests]
    grown = build_closed_plan(WORKLOAD, 4, seed=9)
    grown.requests += grown.more(6)
    assert [r.seed for r in grown.requests] == [r.seed for r in open_.requests]


def test_a_growing_closed_plan_takes_the_dataset_prompts(tmp_path):
    data = Dataset(str(tmp_path / "d.json"), [DatasetPrompt("alpha", 1, 3), DatasetPrompt("beta", 1, None)], 0, True)
    plan = apply_dataset(build_closed_plan(WORKLOAD, 2, seed=1), data)
    later = plan.more(4)
    assert {r.prompt for r in plan.requests + later} == {"alpha", "beta"}


@pytest.mark.parametrize(
    "spec, warm", [("5", Warmup(num_requests=5)), ("2.5s", Warmup(seconds=2.5)), ("", Warmup()), ("0", Warmup())]
)
def test_warmup_parse(spec, warm):
    assert Warmup.parse(spec) == warm


def test_warmup_requests_are_sent_and_left_out_of_every_figure(server):
    plan = build_plan(Arrivals.parse("constant", 200), WORKLOAD, seed=3, num_requests=20)
    result = run_load(plan, Target(server.url, model="stub"), warmup=Warmup.parse("5"))
    assert len(server.received) == 20
    assert [r.index for r in result.warmup_records] == [0, 1, 2, 3, 4]
    s = result.summary()
    assert s["requests"] == 15 and s["warmup"] == {"rule": "the first 5 requests", "requests": 5}
    assert s["figures"]["client_ttft_ms"]["count"] == 15 and s["figures"]["itl_ms"]["count"] == 15 * 4
    every = result.to_json()["requests"]
    assert len(every) == 20 and [r["warmup"] for r in every] == [True] * 5 + [False] * 15


def test_warmup_by_seconds_marks_what_was_due_in_them(server):
    # constant 100/s: due at 0, 10, 20, … ms; the first 45 ms hold 5 of them
    plan = build_plan(Arrivals.parse("constant", 100), WORKLOAD, seed=3, num_requests=12)
    result = run_load(plan, Target(server.url, model="stub"), warmup=Warmup(seconds=0.045))
    assert len(result.warmup_records) == 5 and len(result.records) == 7


@pytest.fixture
def refusing_url():
    with refusing(refusals=2) as url:
        yield url


@pytest.mark.parametrize("honour", [True, False])
def test_closed_loop_honours_retry_after(refusing_url, honour):
    plan = build_closed_plan(WORKLOAD, 2, seed=1, num_requests=6)
    result = run_load(plan, Target(refusing_url, model="m"), honour_retry_after=honour)
    recs = sorted(result.records, key=lambda r: r.sent_ns)
    refused = [r for r in recs if r.status == 429]
    assert len(refused) == 2 and all(r.retry_after_s == 1.0 for r in refused)
    assert sum(r.is_ok for r in recs) == 4
    # each slot refused sent its next request no sooner than Retry-After (1 s) after its own refusal ended; both rest
    # as long, so they send in the order their refusals ended (measured from the later one, the earlier slot's
    # send came 12 ms "early" in a CI run where the two refusals ended 12 ms apart)
    ends = sorted(x.end_ns for x in refused)
    nxt = [r for r in recs if r.sent_ns > ends[0]][:2]
    waited = [(n.sent_ns - end) / 1e9 for n, end in zip(nxt, ends)]
    assert len(waited) == 2
    if honour:
        assert all(w >= 0.99 for w in waited), waited
    else:
        assert all(w < 0.99 for w in waited), waited


def test_a_slot_refused_again_and_again_backs_off_doubling():
    """One slot, three refusals in a row with Retry-After 0.2 s: it waits 0.2, 0.4, then 0.8 s; then served."""
    with refusing(refusals=3, retry_after="0.2") as url:
        result = run_load(build_closed_plan(WORKLOAD, 1, seed=1, num_requests=5), Target(url, model="m"))
    recs = sorted(result.records, key=lambda r: r.sent_ns)
    assert [r.status for r in recs] == [429, 429, 429, 200, 200]
    waits = [(b.sent_ns - a.end_ns) / 1e9 for a, b in zip(recs, recs[1:])]
    assert waits[0] >= 0.2 and waits[1] >= 0.4 and waits[2] >= 0.8, waits
    assert waits[3] < waits[2]  # served: the next request follows at once, the streak is over


# -- the command ------------------------------------------------------------------------------------------------
def test_cli_closed_loop_with_warmup(server):
    r = CliRunner().invoke(
        load, [server.url, "--concurrency", "3", "--requests", "12", "--warmup", "2", "--format", "json"]
    )
    assert r.exit_code == 0, r.output
    s = orjson.loads(r.stdout)
    assert s["mode"] == "closed loop" and s["requests"] == 10 and s["warmup"]["requests"] == 2
    assert len(server.received) == 12
    # the client's deadline (--timeout, 300 s by default) goes with every request, for the engine's admission
    assert {h.get("x-budgetscope-deadline-ms") for _, h, _ in server.received} == {"300000"}


def test_cli_no_deadline_sends_none(server):
    r = CliRunner().invoke(load, [server.url, "--concurrency", "2", "--requests", "2", "--no-deadline"])
    assert r.exit_code == 0, r.output
    assert all("x-budgetscope-deadline-ms" not in h for _, h, _ in server.received)


def test_cli_csv_on_stdout_and_to_a_file(server, tmp_path):
    out = tmp_path / "records.csv"
    r = CliRunner().invoke(
        load, [server.url, "--rate", "200", "--requests", "6", "--warmup", "1", "--format", "csv", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert list(rows[0]) == columns() and len(rows) == 6
    assert [row["warmup"] for row in rows] == ["true"] + ["false"] * 5
    assert all(row["outcome"] == "ok" and row["output_tokens"] == "5" for row in rows)
    assert len(rows[0]["itl_ms"].split(" ")) == 4 and float(rows[0]["client_ttft_ms"]) >= 0
    assert out.read_text() == r.stdout


@pytest.mark.parametrize(
    "args, line",
    [
        (["--concurrency", "4", "--requests", "10"], "requests 10, 4 in flight, seed 0"),
        (
            ["--concurrency", "4", "--duration", "30"],
            "requests drawn as the run goes, until --duration, 4 in flight, seed 0",
        ),
    ],
)
def test_cli_dry_run_of_a_closed_loop_says_what_it_is(server, args, line):
    r = CliRunner().invoke(load, [server.url, *args, "--dry-run"])
    assert r.exit_code == 0 and "plan: closed loop of 4; prompt 128, output 64" in r.stdout and line in r.stdout
    assert server.received == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["--concurrency", "0", "--requests", "5"], "--concurrency must be >= 1, got 0"),
        (["--concurrency", "4"], "a closed loop needs --requests N or --duration S (or both)"),
        (["--concurrency", "4", "--requests", "5", "--arrivals", "gamma:cv=2"], "--arrivals shapes an open loop"),
        (["--rate", "5", "--requests", "5", "--warmup", "soon"], "--warmup 'soon': give a number of requests (20)"),
        (["--rate", "5", "--requests", "5", "--out", "/nonexistent/dir/x.csv"], "its folder does not exist"),
    ],
)
def test_cli_bad_mode_input_is_one_line_and_sends_nothing(server, args, message):
    r = CliRunner().invoke(load, [server.url, *args])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert r.stderr.startswith("budgetscope: ") and server.received == []


@pytest.mark.slow
def test_closed_loop_overload_of_a_four_slot_engine_keeps_serving():
    """64 in flight against the tiny engine with 4 slots and 8 queue places, 3 s: the queue fills, the rest is
    refused with Retry-After, and every refused slot rests before its next request, longer after each refusal in
    a row (1, 2, 4 s…), so within 3 s a slot is refused at most twice. Every request is answered (ok or 429, none
    timed out) and the engine finished ok exactly the requests its clients received ok: no work for a client that
    had left."""
    pytest.importorskip("torch")
    from budgetscope.engine.engine_config import EngineConfig
    from engine_fixtures import running_server

    config = EngineConfig(model="tiny", max_model_len=512, num_kv_blocks=256, max_num_seqs=4, max_waiting=8)
    workload = Workload(Distribution.parse("16"), Distribution.parse("16"), Mix.parse(None), Mix.parse(None))
    with running_server(config) as (url, engine):
        result = run_load(
            build_closed_plan(workload, 64, seed=1),
            Target(url, model="tiny", stream=True),
            duration_s=3.0,
            timeout_s=120.0,
        )
        served = engine.metrics.outcomes.get("ok", 0)
    outcomes = result.summary()["outcomes"]
    assert set(outcomes) <= {"ok", "http_429"}, outcomes
    refused = [r for r in result.records if r.status == 429]
    assert refused and all(r.retry_after_s is not None and r.retry_after_s >= 1 for r in refused)
    assert len(refused) <= 64 * 2, len(refused)
    assert outcomes["ok"] >= 1 and served == outcomes["ok"]
