"""`budgetscope rules`: Prometheus recording and alerting rules for the live SLIs of `collect --budgets`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from budgetscope.commands.options import UsageError, fail, load_budgets_or_fail


@click.command()
@click.option(
    "--budgets", "-b", required=True, type=click.Path(), help="The budgets TOML given to `collect --budgets`."
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    help="Write the rules to this file (else stdout).",
)
@click.option(
    "--unit-tests",
    is_flag=True,
    help="Also write promtool unit tests for every alert beside --output (OUTPUT stem + .page-15s.test.yml, ...): "
    "run them with `promtool test rules`.",
)
@click.option(
    "--window-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Multiply every window (5m ... 3d) by this: 0.01 runs the same rules in seconds, for demos and tests.",
)
@click.option(
    "--archive",
    default="ARCHIVE",
    show_default=True,
    help="The archive path the alerts' `budgetscope report` command names (the one `collect` writes).",
)
def rules(budgets: str, output: str | None, unit_tests: bool, window_scale: float, archive: str) -> None:
    """Write Prometheus rules for the budgets: per tier and budgeted figure, the error ratio over 5m, 30m, 1h, 2h,
    6h, 1d and 3d (recording rules), and the SRE Workbook's burn-rate alerts: a page (14.4× the error budget over
    1h and 5m, or 6× over 6h and 30m) and a ticket (3× over 1d and 2h, or 1× over 3d and 6h). The error budget
    of a tier is 1 − percentile/100. Each alert names the dominant stage of the tail and its share, the
    contrast's first value, and the `budgetscope report` command for the window, read from collect's gauges when
    it fires (docs/alerting.md).

    \b
      budgetscope rules --budgets budgets.toml -o budgetscope-rules.yml --archive /data/prod
      promtool check rules budgetscope-rules.yml
      budgetscope rules --budgets budgets.toml -o r.yml --unit-tests && promtool test rules r.*.test.yml
      budgetscope rules --budgets budgets.toml --window-scale 0.01 > demo-rules.yml   # 1h becomes 36s
    """
    from budgetscope.alerting.rule_tests import test_files
    from budgetscope.alerting.rules import RulesError, rule_file, tier_rules
    from budgetscope.alerting.yaml_text import dump

    b = load_budgets_or_fail(budgets)
    if unit_tests and not output:
        raise UsageError("--unit-tests writes its files beside the rules: give --output FILE")
    try:
        tiers = tier_rules(b, window_scale, archive, budgets)
        doc = rule_file(b, window_scale, archive, budgets)
    except RulesError as e:
        raise fail(e) from None
    if not doc["groups"]:
        raise UsageError(f"{budgets}: no tier has a budget (ttft_ms, tpot_ms, e2e_ms or a stage): no SLO to alert on")
    header = (
        f"Prometheus rules for the live SLIs of `budgetscope collect --budgets {budgets}` (docs/alerting.md).\n"
        f"Written by `budgetscope rules`"
        + (f" with every window scaled by {window_scale:g}" if window_scale != 1 else "")
        + ": regenerate rather than edit."
    )
    for t in tiers:
        for line in t.unreachable():
            click.echo(f"budgetscope rules: {line}", err=True)
    text = dump(doc, header)
    if not output:
        click.echo(text, nl=False)
        return
    out = Path(output)
    files = {out: text}
    if unit_tests:
        for suffix, test_doc in test_files(tiers, out.name).items():
            files[out.with_name(f"{out.stem}.{suffix}.test.yml")] = dump(
                test_doc, f"promtool unit tests of {out.name}, written by `budgetscope rules --unit-tests`."
            )
    try:
        for path, body in files.items():
            _write(path, body)
    except OSError as e:
        raise UsageError(f"cannot write {e.filename}: {e.strerror or e}") from None
    click.echo(f"budgetscope rules: wrote {', '.join(str(p) for p in files)}", err=True)


def _write(path: Path, text: str) -> None:
    """Write whole or not at all: a temporary file beside it, renamed over it."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
