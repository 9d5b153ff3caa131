"""benchmarks/gpu/session.py's `splitkv` phase runs on a CPU (`--smoke`): the `tiny` engine's batch-1 decode profiled
with split-KV off, then on, each in its own process, the Triton kernels in Triton's interpreter — and the `on` run's
engine really split its batch-1 attention (what the engine process reports it ran with)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_splitkv_phase_smoke(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BUDGETSCOPE_ATTN_KV_SPLITS", None)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/gpu/session.py"),
            "--smoke",
            "--phases",
            "splitkv",
            "--out",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    got = json.loads((tmp_path / "figures.json").read_text())["splitkv"]
    assert got["off"]["env"] == {"BUDGETSCOPE_ATTN_KV_SPLITS": ""}
    assert got["on"]["env"] == {"BUDGETSCOPE_ATTN_KV_SPLITS": "2"}
    for name, batch1 in (("off", 1), ("on", 2)):
        eager = next(r for r in got[name]["profile"] if r["pass"] == "eager")
        assert eager["attention"] == "triton" and eager["tokens"] == 1
        assert eager["kv_splits"]["batch1"] == batch1
        assert got[name]["decode"] == {"why_none": "bench_gpu.py needs CUDA"}
