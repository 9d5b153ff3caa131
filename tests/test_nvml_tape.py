"""The NVML tape: what a real NVML answered, replayed through the sampler's parsing on a machine without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from budgetscope.instrument import gpu
from budgetscope.instrument.gpu import Nvml
from budgetscope.instrument.nvml_tape import NVMLError, NvmlTape
from test_gpu import fake_pynvml

FIXTURE = Path(__file__).parent / "fixtures" / "nvml_tape_h100.json"


def _replayed_points(tape: NvmlTape, ticks: int) -> list[dict]:
    nvml = Nvml(tape.replay(), tape.about.get("power_every_s", 0.0))
    clock = tape.clock()
    out = []
    for _ in range(ticks):
        for g in nvml.gpus:
            out += [
                {
                    "ts_ns": p.ts_ns,
                    "metric": p.metric,
                    "value": p.value,
                    "gpu_uuid": p.gpu_uuid,
                    "gpu_index": p.gpu_index,
                }
                for p in nvml.read(g, now_ns=clock)
            ]
    nvml.close()
    return out


def test_a_tape_replays_the_points_it_recorded(tmp_path):
    tape = NvmlTape.record(fake_pynvml(count=2), ticks=4, every_s=0.0)
    tape.save(str(tmp_path / "t.json"))
    again = NvmlTape.load(str(tmp_path / "t.json"))
    assert _replayed_points(again, 4) == tape.points
    assert {p["metric"] for p in tape.points} >= {gpu.HBM_USED, gpu.DRAM_BANDWIDTH, gpu.POWER}


def test_replay_raises_where_the_recording_failed_and_past_its_end():
    tape = NvmlTape.record(fake_pynvml(util_error=True), ticks=2, every_s=0.0)
    nv = tape.replay()
    assert any(c["fn"] == "nvmlDeviceGetUtilizationRates" and "error" in c for c in tape.calls)
    nv.nvmlInit()
    with pytest.raises(NVMLError) as e:
        nv.nvmlDeviceGetUtilizationRates(0)
    assert e.value.value == 3
    with pytest.raises(RuntimeError, match="called more often"):
        for _ in range(10):
            nv.nvmlDeviceGetCount()


def test_a_real_h100_reading_replays_through_the_sampler():
    """tests/fixtures/nvml_tape_h100.json: 30 ticks of an H100 (driver 580.159.04) decoding the `1b` engine at
    batch 8, recorded by benchmarks/bench_gpu.py. Its first GPM interval answered NaN: not emitted."""
    tape = NvmlTape.load(str(FIXTURE))
    assert tape.about["gpu"] == "NVIDIA H100 80GB HBM3"
    points = _replayed_points(tape, 30)
    assert points == tape.points
    by: dict[str, list[float]] = {}
    for p in points:
        by.setdefault(p["metric"], []).append(p["value"])
    assert by[gpu.PEAK_BANDWIDTH][0] == pytest.approx(3.352e12, rel=1e-3)  # 2619 MHz x 5120 bit
    assert by[gpu.HBM_LIMIT][0] > 80e9
    assert len(by[gpu.DRAM_BANDWIDTH]) == 29  # 30 readings; the first interval's NaN is unknown, not a figure
    assert all(0 < v < 1 for v in by[gpu.DRAM_BANDWIDTH])
    assert any(
        c["fn"] == "nvmlGpmMetricsGet" and c["result"][0]["value"] != c["result"][0]["value"] for c in tape.calls
    )
