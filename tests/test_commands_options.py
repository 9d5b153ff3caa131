"""The layer every command shares (budgetscope/commands/options.py): periods, times and the one-line error."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from budgetscope.commands.options import UsageError, period_s, time_ns


@pytest.mark.parametrize(
    "text, seconds", [("500ms", 0.5), ("1.5s", 1.5), ("1m", 60.0), ("2", 2.0), (" 100ms ", 0.1), ("1h", 3600.0)]
)
def test_a_period_is_read_in_seconds(text, seconds):
    assert period_s(text, "every") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["0ms", "-1s", "2x", "ms", "", "1d"])
def test_a_bad_period_names_its_option(text):
    with pytest.raises(UsageError, match=r"^--every: .* is not a period like 500ms, 1s or 1m$"):
        period_s(text, "every")


def test_a_time_is_ns_or_iso_with_a_zone():
    assert time_ns("2026-01-01T00:00:00Z", "since") == 1_767_225_600_000_000_000
    assert time_ns("5", "since") == 5 and time_ns(None, "since") is None
    with pytest.raises(UsageError, match="--since: '2026-01-01T00:00:00' has no time zone"):
        time_ns("2026-01-01T00:00:00", "since")


@pytest.mark.parametrize(
    "args",
    [
        ["gpu", "sample", "--every", "0ms", "--out", "jsonl:{d}/gpu.jsonl"],
        ["scrape", "http://127.0.0.1:1/metrics", "-a", "{d}/a", "--every", "2x"],
    ],
)
def test_a_bad_period_is_one_line_exit_2_and_writes_nothing(tmp_path, args):
    r = CliRunner().invoke(main, [a.format(d=tmp_path) for a in args])
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.count("\n") == 1 and r.stderr.startswith("budgetscope: --every: ")
    assert not any(tmp_path.iterdir())
