"""Short coverage-guided fuzz runs of every target of fuzz/targets.py (docs/fuzzing.md), a fixed number of inputs
each (72 s in all on the 2 shared cores at load 12-14, 2026-11-28; the same inputs take longer on a busier machine,
never fewer): the C decoders under ASan + UBSan, alone
and against the other decoding paths, the OTLP metrics decoder, the budgets loader, the Prometheus parser and the
SQL sandbox of `query`. A run fails on any finding (its input is saved under build/fuzz/crashes/TARGET/), when it
stopped before its inputs were all run, and when it saw no coverage (a broken harness). `make fuzz` runs the same
targets for longer.

A count of inputs, not seconds: with a time budget the number of inputs a run got through was the machine's load
as much as the harness (two busy cores ran `otlpjson_diff` at 27 inputs in 6 s, under its floor of 30, and
`otlpproto_diff` at 37, under 500), so the floors failed healthy runs. With a fixed seed and a fixed count every
run walks the same inputs, however long that takes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fuzz"))

# inputs a run executes, its seeds included (fuzz/corpus/TARGET): a query opens the archive (~25 a second idle), a
# valid JSON batch meets DuckDB under ASan (~10 a second); the pure decoders run thousands a second
RUNS = {
    "otlpjson": 4_000,
    "otlpproto": 4_000,
    "otlpjson_diff": 40,
    "otlpproto_diff": 40,
    "otlp_metrics": 50_000,
    "budgets": 30_000,
    "prometheus": 20_000,
    "query": 70,
}
HANG_S = 600
"""A run still going after this long has hung (an input that never ends is a finding too)."""

pytestmark = pytest.mark.slow


def test_every_target_has_its_short_run():
    import targets

    assert set(RUNS) == set(targets.TARGETS)


@pytest.fixture(scope="module")
def atheris_installed():
    try:
        import atheris  # noqa: F401 - imported to see whether it is installed
    except ImportError:
        pytest.skip("atheris is not installed (the dev extra installs it: `make setup`)")


@pytest.fixture(scope="module")
def sanitizer_build():
    import build

    if reason := build.unavailable():
        pytest.skip(reason)


SEED = 20261125


@pytest.mark.parametrize("target", list(RUNS))
def test_short_fuzz_run(target, tmp_path, atheris_installed, request):
    import targets

    if target in targets.SANITIZED:
        request.getfixturevalue("sanitizer_build")
    # a fixed seed and count: `make test` walks the same mutations each time, on any machine at any load, so that
    # CI fails on a regression, not on the day's luck; `make fuzz` draws new seeds and finds the new bugs
    scratch = tmp_path / "tmp"  # the run's TMPDIR: its scratch files must be gone when it ends
    scratch.mkdir()
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fuzz/run.py"),
            target,
            "--runs",
            str(RUNS[target]),
            "--corpus",
            str(tmp_path / "corpus"),
            f"-seed={SEED}",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{target}: a finding (the input is under build/fuzz/crashes/{target}/):\n{out[-6000:]}"
    runs = int(re.search(r"stat::number_of_executed_units: (\d+)", out).group(1))
    cov = [int(c) for c in re.findall(r"\bcov: (\d+)", out)]
    assert runs == RUNS[target], f"{target}: stopped after {runs} of {RUNS[target]} inputs\n{out[-3000:]}"
    assert cov and max(cov) > 50, f"{target}: no coverage reached libFuzzer\n{out[-3000:]}"
    assert not list(scratch.iterdir()), f"{target} left scratch files: {list(scratch.iterdir())}"
