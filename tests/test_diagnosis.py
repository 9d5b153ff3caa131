"""The report's diagnoses beside the attribution: what the GPU did while the tail decoded (host-bound first, KV
pressure only when it sets the tail apart) and what a queue-dominated tail waited on. Rules on hand-made figures,
then the real H200 recording in sample_traces/h200-1b-served (the `1b` engine served at 12 req/s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from budgetscope.analysis import build_report
from budgetscope.analysis.gpu import NO_DRAM_BANDWIDTH, classify
from budgetscope.analysis.queue_wait import sentence, waited_on
from budgetscope.archive import Archive

SAMPLES = Path(__file__).parent.parent / "sample_traces"


def _fig(**kw):
    base = {
        "samples": 10,
        "dram_bandwidth": None,
        "hbm_used_max": 0.5,
        "engine_steps": 100,
        "preempted": 0,
        "kv_used_max": 0.5,
        "gpu_busy": None,
    }
    return {**base, **kw}


def test_host_bound_comes_before_a_fill_the_body_shares():
    full = {"kv_used_max": 0.97}
    assert classify(_fig(gpu_busy=0.13, **full), _fig(gpu_busy=0.23, **full)) == ("host_bound", None)
    # the same fill without a body to compare: the old rule, KV pressure
    assert classify(_fig(dram_bandwidth=0.04, **full)) == ("kv_pressure", None)
    assert classify(_fig(dram_bandwidth=0.04, **full), _fig(**full)) == ("neither", None)
    assert classify(_fig(**full), _fig(**full)) == ("unknown", NO_DRAM_BANDWIDTH)
    assert classify(_fig(gpu_busy=0.6, dram_bandwidth=0.2), _fig()) == ("neither", None)


def test_kv_pressure_needs_evidence_that_separates_tail_from_body():
    body = _fig(kv_used_max=0.97, preempted=0)
    # preemptions in the tail's decode and not the body's: KV pressure, even on a host-bound engine
    assert classify(_fig(gpu_busy=0.2, kv_used_max=0.97, preempted=5), body) == ("kv_pressure", None)
    # as many preemptions a step in the body: not what sets the tail apart
    assert classify(_fig(gpu_busy=0.2, preempted=5), _fig(preempted=5)) == ("host_bound", None)
    # a full pool the body never saw
    assert classify(_fig(dram_bandwidth=0.3, kv_used_max=0.96), _fig(kv_used_max=0.6)) == ("kv_pressure", None)
    assert classify(_fig(dram_bandwidth=0.8, kv_used_max=0.96), _fig(kv_used_max=0.6)) == ("both", None)
    assert classify(_fig(dram_bandwidth=0.8, kv_used_max=0.96), _fig(kv_used_max=0.96)) == ("bandwidth_bound", None)


def _steps(**kw):
    base = {
        "engine_steps": 50,
        "kv_used_mean": 0.5,
        "kv_used_max": 0.6,
        "preempted": 0,
        "max_seqs": 64,
        "slots_full_share": 0.1,
        "token_budget": 512,
        "budget_full_share": 0.1,
        "prefill_step_ms": 6.0,
        "decode_step_ms": 5.0,
        "prefill_time_share": 0.1,
    }
    return {**base, **kw}


def test_what_the_queue_waited_on():
    assert waited_on(_steps()) == []
    assert waited_on(_steps(kv_used_mean=0.96)) == ["kv_blocks"]
    assert waited_on(_steps(kv_used_mean=0.90, preempted=3)) == ["kv_blocks"]  # preempted: the pool ran out
    assert waited_on(_steps(slots_full_share=0.5)) == ["batch_slots"]
    assert waited_on(_steps(budget_full_share=0.8, slots_full_share=0.9)) == ["batch_slots", "token_budget"]
    assert waited_on(_steps(prefill_step_ms=20.0, prefill_time_share=0.3)) == ["long_prefill_steps"]
    assert waited_on(_steps(prefill_step_ms=20.0, prefill_time_share=0.2)) == []  # long but rare
    assert waited_on(_steps(prefill_step_ms=19.0, prefill_time_share=0.9)) == []  # under 4× a decode step
    assert waited_on(_steps(max_seqs=None, slots_full_share=None, token_budget=None, budget_full_share=None)) == []
    # without engine steps, a server's KV gauge answers for the KV pool alone
    assert waited_on({"metric_samples": 3, "kv_used_mean": 0.99, "kv_used_max": 1.0}) == ["kv_blocks"]
    q = {
        "waited_on": ["batch_slots", "long_prefill_steps"],
        "not_recorded": [],
        "figures": _steps(slots_full_share=0.75, prefill_step_ms=92.2, prefill_time_share=0.64),
    }
    assert sentence(
        {"waited_on": ["kv_blocks"], "not_recorded": [], "figures": _steps(kv_used_mean=0.9, preempted=7)}
    ) == ("The TTFT tail queued behind KV blocks (the pool was 90% full on average, 7 preemptions).")
    assert sentence(q) == (
        "The TTFT tail queued behind batch slots (all 64 taken in 75% of the steps); and steps "
        "that carry a prefill, which ran long: median 92 ms against 5.0 ms for decode-only steps, "
        "64% of the time."
    )


@pytest.fixture(scope="module")
def h200_tier():
    with Archive(SAMPLES / "h200-1b-served", read_only=True) as a:
        (t,) = build_report(a.con)["tiers"]
    return t


def test_the_h200_recording_is_host_bound_and_queued_behind_long_prefill_steps(h200_tier):
    t = h200_tier
    assert t["attribution"]["ttft"]["top"][0] == "queue" and t["attribution"]["e2e"]["top"][0] == "decode"
    g = t["gpu"]
    assert g["classification"] == "host_bound"
    assert g["tail"]["gpu_busy"] == pytest.approx(0.13, abs=0.01) and g["tail"]["preempted"] == 0
    assert g["tail"]["kv_used_max"] >= 0.95 and g["body"]["kv_used_max"] >= 0.95  # full for both: not the cause
    assert "under KV-cache pressure" not in t["verdict"] and "host-bound" in t["verdict"]
    q = t["queue_wait"]
    assert q["source"] == "engine_steps" and q["waited_on"] == ["long_prefill_steps"]
    assert q["figures"]["prefill_step_ms"] > 20 * q["figures"]["decode_step_ms"]
    assert q["not_recorded"] == ["batch slots", "the token budget"]  # recorded before the engine kept its limits
    assert "The TTFT tail queued behind steps that carry a prefill" in t["verdict"]


def test_the_h100_kv_pressure_recording_queued_behind_kv_blocks():
    with Archive(SAMPLES / "h100-kv-pressure", read_only=True) as a:
        (t,) = build_report(a.con)["tiers"]
    q = t["queue_wait"]
    assert q["waited_on"][0] == "kv_blocks" and q["figures"]["preempted"] > 0


@pytest.mark.parametrize(
    "name, classification, phrase",
    [
        ("h200-host-bound", "host_bound", "host-bound"),  # the `small` model at 40 req/s: kernels take microseconds
        ("h200-kv-preemption", "kv_pressure", "under KV-cache pressure"),  # 96 KV blocks for 16 long-output sequences
    ],
)
def test_the_h200_engine_process_recordings_are_named_for_what_held_their_decode(name, classification, phrase):
    with Archive(SAMPLES / name, read_only=True) as a:
        (t,) = build_report(a.con)["tiers"]
    g = t["gpu"]
    assert g["decode_dominated"] and g["classification"] == classification
    assert phrase in t["verdict"]
    if classification == "host_bound":
        assert g["tail"]["gpu_busy"] < 0.5 and g["tail"]["dram_bandwidth"] < 0.05
    else:
        assert g["tail"]["kv_used_max"] == 1.0 > g["body"]["kv_used_max"] and g["tail"]["preempted"] >= 1
