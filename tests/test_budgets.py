"""The budgets file: the format of docs/design.md and docs/budgets.md, and errors that name the file and the key."""

from __future__ import annotations

import pytest

from budgetscope.analysis.budgets import BudgetError, load_budgets, parse_budgets

GOOD = """
[tiers.interactive]
match = { model = "llama-3-8b" }
percentile = 99
ttft_ms = 800
tpot_ms = 50
e2e_ms = 12000

[tiers.interactive.stages]
network = 50
frontend = 30
queue = 250
prefill = 470
"""


def test_design_example_parses():
    b = parse_budgets(GOOD, "b.toml")
    (t,) = b.tiers
    assert (t.name, t.percentile, t.ttft_ms, t.tpot_ms, t.e2e_ms) == ("interactive", 99.0, 800.0, 50.0, 12000.0)
    assert t.stages == {"network": 50.0, "frontend": 30.0, "queue": 250.0, "prefill": 470.0}
    assert t.filters == {"tier": "interactive", "model": "llama-3-8b"}


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "[tiers.a]\nttft = 5\n",
            "b.toml: tiers.a.ttft: unknown key (expected one of: match, percentile, ttft_ms, tpot_ms, e2e_ms, max_error_rate, stages)",
        ),
        (
            "[tiers.a.stages]\nprefil = 5\n",
            "b.toml: tiers.a.stages.prefil: unknown stage (expected one of: network, frontend, queue, prefill, decode, postprocess)",
        ),
        (
            "[tiers.a.stages]\nunaccounted = 5\n",
            "b.toml: tiers.a.stages.unaccounted: unknown stage (expected one of: network, frontend, queue, prefill, decode, "
            "postprocess) (unaccounted time has no budget: it is what no stage explains)",
        ),
        (
            "[tiers.a]\nttft_ms = 100\n[tiers.a.stages]\nqueue = 80\nprefill = 30\n",
            "b.toml: tiers.a.stages: network + frontend + queue + prefill = 110 ms overflows ttft_ms = 100",
        ),
        (
            "[tiers.a]\ne2e_ms = 100\n[tiers.a.stages]\ndecode = 101\n",
            "b.toml: tiers.a.stages: the stage budgets add up to 101 ms, overflowing e2e_ms = 100",
        ),
        ("[tiers.a]\nttft_ms = -1\n", "b.toml: tiers.a.ttft_ms: must be a positive number of ms, got -1"),
        ('[tiers.a]\nttft_ms = "800"\n', "b.toml: tiers.a.ttft_ms: must be a positive number of ms, got '800'"),
        (
            "[tiers.a]\npercentile = 100\n",
            "b.toml: tiers.a.percentile: must be a number between 0 and 100 (exclusive), got 100",
        ),
        (
            '[tiers.a]\nmatch = { region = "eu" }\n',
            "b.toml: tiers.a.match.region: unknown filter (expected one of: tier, model, tenant, service_name, source)",
        ),
        ("[tier.a]\nttft_ms = 5\n", "b.toml: tier: unknown key (a budgets file has one table, [tiers.<name>])"),
        ("", "b.toml: no tiers (add a [tiers.<name>] table)"),
    ],
)
def test_bad_budgets_name_file_and_key(text, message):
    with pytest.raises(BudgetError) as e:
        parse_budgets(text, "b.toml")
    assert str(e.value) == message


def test_invalid_toml():
    with pytest.raises(BudgetError, match=r"^b.toml: invalid TOML \(.*line 1"):
        parse_budgets("[tiers.a\n", "b.toml")


def test_load_errors(tmp_path):
    with pytest.raises(BudgetError, match="no such budgets file$"):
        load_budgets(tmp_path / "missing.toml")
    with pytest.raises(BudgetError, match="is a directory, not a budgets file$"):
        load_budgets(tmp_path)


def test_max_error_rate_is_a_fraction_with_a_default_from_the_percentile():
    b = parse_budgets("[tiers.a]\nmax_error_rate = 0.05\n[tiers.b]\npercentile = 95\n[tiers.c]\nmax_error_rate = 0\n")
    assert [(t.max_error_rate, t.error_budget()) for t in b.tiers] == [(0.05, 0.05), (None, 0.05), (0.0, 0.0)]
    assert parse_budgets("[tiers.a]\n").tiers[0].error_budget() == 0.01


def test_what_if_keeps_a_declared_max_error_rate():
    from budgetscope.analysis.whatif import edit_tier, to_toml

    b = parse_budgets("[tiers.a]\nttft_ms = 100\nmax_error_rate = 0.02\n")
    assert parse_budgets(to_toml(b)).tiers == b.tiers
    edited = edit_tier(b, "a", 95.0, {"ttft_ms": 200.0}, {})
    assert (edited.tiers[0].max_error_rate, edited.tiers[0].ttft_ms) == (0.02, 200.0)


def test_the_number_of_tiers_is_bounded_in_one_line_naming_the_file(tmp_path):
    """Issue 37: ≥ 6,500 tiers raised SIGFPE inside DuckDB in `report`; 10,000 with `match` took 2.1 GB."""
    from click.testing import CliRunner

    from budgetscope.analysis.budgets import MAX_TIERS
    from budgetscope.cli import main

    text = "".join(f'[tiers.t{i}]\nmatch = {{ model = "m{i}" }}\nttft_ms = 800\n' for i in range(MAX_TIERS + 1))
    with pytest.raises(BudgetError) as e:
        parse_budgets(text, "b.toml")
    assert str(e.value) == f"b.toml: {MAX_TIERS + 1:,} tiers; a budgets file may declare at most {MAX_TIERS} " + (
        "(docs/budgets.md)"
    )
    assert len(parse_budgets(text[: text.index(f"[tiers.t{MAX_TIERS}]")]).tiers) == MAX_TIERS
    (tmp_path / "many.toml").write_text(text)
    r = CliRunner().invoke(main, ["report", "-a", str(tmp_path / "none"), "--budgets", str(tmp_path / "many.toml")])
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"budgetscope: {tmp_path / 'many.toml'}: {MAX_TIERS + 1:,} tiers;")


@pytest.mark.parametrize(
    "text",
    [
        "[tiers.a]\nttft_ms = " + "[" * 500 + "]" * 500 + "\n",
        "[tiers.a]\nmatch = " + "{ a = " * 500 + "1" + " }" * 500 + "\n",
    ],
)
def test_deep_nesting_is_one_line(tmp_path, text):
    """Issue 37: `[` nested 500 deep was a RecursionError's traceback."""
    from click.testing import CliRunner

    from budgetscope.cli import main

    with pytest.raises(BudgetError, match=r"^b.toml: invalid TOML \(arrays or tables nested too deep\)$"):
        parse_budgets(text, "b.toml")
    (tmp_path / "deep.toml").write_text(text)
    r = CliRunner().invoke(main, ["report", "-a", str(tmp_path / "none"), "--budgets", str(tmp_path / "deep.toml")])
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "nested too deep" in r.stderr


def test_a_byte_order_mark_is_read_as_nothing(tmp_path):
    """Issue 37: a budgets file saved with a UTF-8 BOM (Windows editors) was "Invalid statement"."""
    text = "[tiers.interactive]\nttft_ms = 800\n"
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_budgets(tmp_path / "bom.toml").tiers == parse_budgets(text).tiers
    assert parse_budgets("\ufeff" + text).tiers == parse_budgets(text).tiers
    with pytest.raises(BudgetError, match="invalid TOML"):  # only at the start: anywhere else it is a character
        parse_budgets(text + "\ufeff[tiers.b]\n")
