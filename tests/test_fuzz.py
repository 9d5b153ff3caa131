"""Short coverage-guided fuzz runs of every target of fuzz/targets.py (docs/fuzzing.md), 45 s of fuzzing in all
(about 60 s with the processes' start-up): the C decoders under ASan + UBSan, alone and against the other
decoding paths, the OTLP metrics decoder, the budgets loader, the Prometheus parser, the SQL sandbox of
`query`, bounded inflation and the OTLP/HTTP receiver's framing. A run fails on any finding (its input is
saved under build/fuzz/crashes/TARGET/) and when it ran too few inputs or saw no coverage (a broken harness).
`make fuzz` runs the same targets for longer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fuzz"))

# seconds of fuzzing a target; each process adds about a second of start-up
SECONDS = {
    "otlpjson": 8,
    "otlpproto": 7,
    "otlpjson_diff": 6,
    "otlpproto_diff": 5,
    "otlp_metrics": 4,
    "budgets": 3,
    "prometheus": 4,
    "query": 5,
    "inflate": 1,
    "http": 2,
}
# a query opens the archive (25 a second); a valid JSON batch meets DuckDB under ASan (10 a second: the seeds)
# an `http` input is a loopback connection to a live receiver (~1,000 a second)
MIN_RUNS = {"query": 20, "otlpjson_diff": 30, "http": 100}

pytestmark = pytest.mark.slow


def test_the_short_runs_fit_the_budget():
    import targets

    assert set(SECONDS) == set(targets.TARGETS)
    assert sum(SECONDS.values()) <= 45


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


@pytest.mark.parametrize("target", list(SECONDS))
def test_short_fuzz_run(target, tmp_path, atheris_installed, request):
    import targets

    if target in targets.SANITIZED:
        request.getfixturevalue("sanitizer_build")
    # a fixed seed: `make test` walks the same mutations each time (a run on a slower machine, fewer of them), so
    # that CI fails on a regression, not on the day's luck; `make fuzz` draws new seeds and finds the new bugs
    scratch = tmp_path / "tmp"  # the run's TMPDIR: its scratch files must be gone when it ends
    scratch.mkdir()
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fuzz/run.py"),
            target,
            "--seconds",
            str(SECONDS[target]),
            "--corpus",
            str(tmp_path / "corpus"),
            f"-seed={SEED}",
        ],
        capture_output=True,
        text=True,
        timeout=SECONDS[target] + 60,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{target}: a finding (the input is under build/fuzz/crashes/{target}/):\n{out[-6000:]}"
    runs = int(re.search(r"stat::number_of_executed_units: (\d+)", out).group(1))
    cov = [int(c) for c in re.findall(r"\bcov: (\d+)", out)]
    assert runs >= MIN_RUNS.get(target, 500), out[-3000:]
    assert cov and max(cov) > 50, f"{target}: no coverage reached libFuzzer\n{out[-3000:]}"
    assert not list(scratch.iterdir()), f"{target} left scratch files: {list(scratch.iterdir())}"
