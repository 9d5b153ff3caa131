"""Deadline-aware admission: the measured service rate, the decision, and the server's 429 over real HTTP."""

import threading

import pytest

from budgetscope.engine.admission import ServiceRate, expected_wait_s, finishes_to_wait, refusal

S = 1_000_000_000


def _rate_with(finishes_at_s: list[float], run_s: float = 0.1, busy_since_s: float | None = 0.0) -> ServiceRate:
    rate = ServiceRate(window_s=10.0, min_finishes=4)
    if busy_since_s is not None:
        rate.observe_busy(True, int(busy_since_s * S))
    for t in finishes_at_s:
        rate.observe_finish(int(run_s * S), int(t * S))
    return rate


def test_rate_is_finishes_over_busy_time_in_the_window():
    rate = _rate_with([1, 2, 3, 4, 5])  # 5 finishes in 5 s of busy time
    assert rate.rate_per_s(5 * S) == pytest.approx(1.0)
    assert rate.run_s() == pytest.approx(0.1)
    # finishes older than the window leave it: 1, 2 and 3 are gone, two are left in 10 s of busy time, which is
    # evidence of a slow engine (a stall), not the lack of it
    assert rate.rate_per_s(14 * S) == pytest.approx(0.2)
    rate.observe_busy(False, 14 * S)
    assert rate.rate_per_s(15 * S) is None  # idle for a second of the window: too few finishes to tell


def test_an_engine_busy_for_a_whole_window_without_a_finish_refuses_what_must_wait():
    """Overload that stalls the engine (its admitted requests abandoned before they run) leaves no finishes; that is
    a service rate of 0, so a request that must wait for a finish is refused (Retry-After capped at 60 s), while one
    that finds a free slot is still admitted."""
    rate = _rate_with([], busy_since_s=0.0)
    assert rate.rate_per_s(5 * S) is None  # busy for only 5 s of the 10 s window: no evidence yet
    assert rate.rate_per_s(11 * S) == 0.0
    wait = expected_wait_s(rate, finishes_to_wait(10, 0), 11 * S)
    assert wait == float("inf") and refusal(rate, 30.0, wait) == 60
    assert expected_wait_s(rate, finishes_to_wait(0, 1), 11 * S) == 0.0


def test_an_idle_gap_does_not_count_as_service_time():
    rate = _rate_with([1.0, 1.5, 1.7, 2.0], busy_since_s=0.0)
    rate.observe_busy(False, 2 * S)  # idle from 2 s to 9 s
    rate.observe_busy(True, 9 * S)
    assert rate.rate_per_s(10 * S) == pytest.approx(4 / 3.0)  # 4 finishes in 2 + 1 s of busy time


def test_refusal_needs_evidence_a_wait_and_a_deadline():
    rate = _rate_with([1, 2, 3, 4, 5], run_s=0.5)  # 1 request/s, runs of 0.5 s
    now = 5 * S
    assert expected_wait_s(rate, 2, now) == pytest.approx(2.0)
    assert expected_wait_s(rate, 0, now) == 0.0 and expected_wait_s(ServiceRate(), 3, now) is None
    assert refusal(rate, None, 10.0) is None  # no deadline: always admitted
    assert refusal(rate, 1.0, 0.0) is None  # waits for no finish: starts now
    assert refusal(rate, 1.0, None) is None  # no evidence yet
    assert refusal(rate, 3.0, 2.0) is None  # 2 s of wait + 0.5 s run fits 3 s
    retry = refusal(rate, 2.0, 2.0)  # 2 s wait, only 1.5 s of slack
    assert retry == 1
    assert refusal(rate, 2.0, 30.0) == 29  # 30 s of wait - 1.5 s slack, rounded up
    assert refusal(rate, 2.0, 1000.0) == 60  # capped


def test_a_full_batch_makes_a_request_wait_for_one_more_finish():
    """With every slot taken the request waits for those ahead of it and for its own slot; free slots start that
    many of them at once."""
    assert finishes_to_wait(0, 1) == 0 and finishes_to_wait(3, 4) == 0  # a free slot for it
    assert finishes_to_wait(0, 0) == 1 and finishes_to_wait(2, 0) == 3
    assert finishes_to_wait(5, 2) == 4
    rate = _rate_with([1, 2, 3, 4, 5], run_s=0.5)  # 1 request/s, runs of 0.5 s
    assert refusal(rate, 2.5, expected_wait_s(rate, finishes_to_wait(2, 1), 5 * S)) is None  # 2 s + 0.5 s fits
    assert refusal(rate, 2.5, expected_wait_s(rate, finishes_to_wait(2, 0), 5 * S)) == 1  # 3 s of wait does not


def test_waits_longer_than_forecast_shrink_what_is_admitted():
    """Past capacity every admitted request sits at the edge: when they wait 1.25x their forecasts, admission
    forecasts 1.25x and refuses what the raw forecast would have let in to time out."""
    rate = _rate_with([1, 2, 3, 4, 5], run_s=0.5)
    assert rate.wait_factor() == 1.0
    for _ in range(7):
        rate.observe_wait(2.0, 2.5)
    rate.observe_wait(0.1, 5.0)  # too short a forecast to calibrate
    assert rate.wait_factor() == 1.0  # 7 waits: too few yet
    rate.observe_wait(2.0, 2.5)
    assert rate.wait_factor() == pytest.approx(1.25)
    assert refusal(rate, 2.5, 1.6) is None  # 2 s calibrated + 0.5 s run fits 2.5 s
    assert refusal(rate, 2.5, 1.8) == 1  # 2.25 s does not
    for _ in range(64):  # shorter waits than forecast never admit more than the raw forecast
        rate.observe_wait(2.0, 1.0)
    assert rate.wait_factor() == 1.0
    for _ in range(64):
        rate.observe_wait(1.0, 100.0)
    assert rate.wait_factor() == 4.0  # capped


def test_run_time_is_the_90th_percentile_of_recent_runs():
    rate = ServiceRate(num_runs=10)
    for run_s in (0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.9, 2.0):
        rate.observe_finish(int(run_s * S), 0)
    assert rate.run_s() == pytest.approx(0.9)  # the mean, 0.35, admitted what the long runs could not finish
    for _ in range(10):  # the window keeps the last 10
        rate.observe_finish(int(0.2 * S), 0)
    assert rate.run_s() == pytest.approx(0.2)
    assert ServiceRate().run_s() == 0.0


httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")

from budgetscope.engine.engine_config import EngineConfig
from engine_fixtures import running_server, wait_for


def _busy_server(deadline_admission: bool):
    return running_server(
        EngineConfig(
            model="tiny",
            max_model_len=2048,
            num_kv_blocks=256,
            max_num_seqs=1,
            max_num_batched_tokens=64,
            deadline_admission=deadline_admission,
        )
    )


@pytest.mark.parametrize("deadline_admission", [True, False])
def test_a_request_that_cannot_start_in_time_gets_429_at_once(deadline_admission):
    with _busy_server(deadline_admission) as (url, engine):
        # runs of 40 tokens (70 ms here, more than the late request's 50 ms deadline) teach the service rate: its
        # forecast wait for 4 finishes is ~0.35 s, still 4x its slack on a 3x faster machine (with 2-token runs
        # the margin here was under 2x)
        warm = {"prompt": "warm", "max_tokens": 40, "ignore_eos": True}
        for _ in range(5):
            assert httpx.post(f"{url}/v1/completions", json=warm).status_code == 200
        hog = {"prompt": "hog", "max_tokens": 1500, "ignore_eos": True, "stream": True}
        waiters = []
        with httpx.stream("POST", f"{url}/v1/completions", json=hog) as first:
            lines = first.iter_lines()
            next(lines)  # running: holds the only sequence slot
            for i in range(3):
                t = threading.Thread(
                    target=httpx.post,
                    args=(f"{url}/v1/completions",),
                    kwargs={"json": {"prompt": f"wait {i}", "max_tokens": 2}, "timeout": 60},
                )
                t.start()
                waiters.append(t)
            assert wait_for(lambda: engine.scheduler.num_waiting == 3)
            late = httpx.post(
                f"{url}/v1/completions",
                json={"prompt": "in a hurry", "max_tokens": 2},
                headers={"x-budgetscope-deadline-ms": "50"},
                timeout=30,
            )
            patient = threading.Thread(
                target=httpx.post,
                args=(f"{url}/v1/completions",),
                kwargs={
                    "json": {"prompt": "patient", "max_tokens": 2, "budgetscope_deadline_ms": 600_000},
                    "timeout": 60,
                },
            )
            patient.start()
            assert wait_for(lambda: engine.scheduler.num_waiting == 4)  # the patient one was admitted
            waiters.append(patient)
        for t in waiters:
            t.join(60)
        metrics = httpx.get(f"{url}/metrics").text
    if deadline_admission:
        assert late.status_code == 429
        assert int(late.headers["retry-after"]) >= 1
        assert late.json()["error"]["type"] == "rate_limit_exceeded"
        assert "within its deadline" in late.json()["error"]["message"]
        assert "budgetscope_engine_deadline_refusals_total 1" in metrics
    else:  # admitted, then it waited past its deadline in the queue
        assert late.status_code == 504
        assert "budgetscope_engine_deadline_refusals_total 0" in metrics


def test_the_loop_observes_each_forecast_wait_once():
    """A forecast is observed at the first schedule (or when the request left the queue unscheduled), once."""
    from budgetscope.engine.engine_loop import EngineLoop
    from budgetscope.engine.llm_engine import LLMEngine
    from budgetscope.engine.sequence import Sequence, SequenceStatus

    loop = EngineLoop(LLMEngine(EngineConfig(model="tiny", max_model_len=512, num_kv_blocks=64)))
    loop.service.min_waits = 1
    waiting, started, gone = Sequence([1, 2]), Sequence([1, 2]), Sequence([1, 2])
    for seq in (waiting, started, gone):
        seq.wait_forecast = (0, 1.0)
    started.admitted_mono_ns = int(1.5 * S)
    gone.status = SequenceStatus.FINISHED
    for seq in (waiting, started, started):
        loop._observe_wait(seq, 3 * S)
    assert loop.service.wait_factor() == pytest.approx(1.5) and waiting.wait_forecast is not None
    loop._observe_wait(gone, 3 * S)  # left unscheduled at 3 s: waited at least that
    assert loop.service.wait_factor(q=1.0) == pytest.approx(3.0) and gone.wait_forecast is None
