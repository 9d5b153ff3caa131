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
            out += [{"ts_ns": p.ts_ns, "metric": p.metric, "value": p.value, "gpu_uuid": p.gpu_uuid,
                     "gpu_index": p.gpu_index} for p in nvml.read(g, now_ns=clock)]
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
