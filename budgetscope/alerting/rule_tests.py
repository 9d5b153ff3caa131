"""promtool unit tests for the rules of rules.py (`budgetscope rules --output FILE --unit-tests`): for every tier, every
alert of every budgeted figure, under the burns the SRE Workbook's thresholds are about.

Each scenario feeds the counters a steady traffic, clean for the longest window of the severity, then a steady
burn at error ratio r from t0, and checks that the alert is silent at the last evaluation before the Workbook's
detection time (threshold / r × long window, slo.BurnCondition.detection_s) and fires at the first one after it,
with its annotations read from attribution gauges fed beside (queue 81 %, prefill 19 %, contrast
instance=replica-3):

- page, fast (when 14.4 × the error budget is under 100 %): a total outage; for a p99 tier it fires 8.64 min in
  (14.4 % of the hour), checked at 8m (silent) and 9m (firing) with Prometheus's default 1 min evaluations;
- page, slow (when 6 × the budget is under 100 %): r = 10 × the budget (under 14.4: the fast one stays silent),
  or a total outage when the fast one cannot fire: 6 / 10 of 6 h = 3.6 h in, with 1 min evaluations;
- ticket: r = 5 × the budget (the page stays silent and is checked so): 14.4 h in, with 5 min evaluations.

The value and annotations each alert must carry are computed here the way Prometheus 2 computes them (its rate()
over a closed range, with its extrapolation; its template functions' formats), from the same samples, so that a
rule that reads the wrong series, window or gauge fails its test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

from budgetscope.alerting.rules import ALERTS, TierRules, duration
from budgetscope.analysis import slo

PER_STEP = 1000
"""Requests judged every input step: the within counts are whole numbers, so every sample is exact."""
SHARES = {"queue": 0.81, "prefill": 0.19}
CONTRAST = ("instance", "replica-3")
WINDOW_S = 600.0


@dataclass(frozen=True, slots=True)
class Scenario:
    severity: str
    step_ms: int  # input series interval and evaluation interval
    error_ratio: float  # the burn after t0
    history_ms: int  # clean traffic before t0


def scenarios(t: TierRules) -> list[Scenario]:
    """The scenarios that apply to a tier (a condition whose threshold is over 100 % cannot fire)."""
    b = t.budget
    fast, slow = slo.PAGE
    out = []
    page_history = max(slo.WINDOWS[c.long] for c in slo.PAGE) * t.scale
    if fast.factor * b < 1:
        out.append(Scenario("page", _step(60, t.scale), 1.0, _whole(page_history)))
    if slow.factor * b < 1:
        r = 10 * b if fast.factor * b < 1 else 1.0
        out.append(Scenario("page", _step(60, t.scale), r, _whole(page_history)))
    ticket_history = max(slo.WINDOWS[c.long] for c in slo.TICKET) * t.scale
    r = 5 * b if 5 * b < 1 else (1 + b) / 2
    if any(c.factor * b < r for c in slo.TICKET):
        out.append(Scenario("ticket", _step(300, t.scale), r, _whole(ticket_history)))
    return out


def _step(seconds: int, scale: float) -> int:
    """The input and evaluation step (ms): `seconds` scaled as the windows are. Prometheus's default evaluation
    interval is 1 m; the ticket's windows (2 h and longer) are sampled every 5 m, which keeps promtool's work
    (every rule over every window at every step) to seconds."""
    return max(1, round(seconds * 1000 * scale))


def _whole(seconds: float) -> int:
    """Seconds as whole ms, rounded up."""
    return math.ceil(seconds * 1000)


class Series:
    """The counters of one figure under a scenario: samples every step from 0 (times in ms)."""

    def __init__(self, sc: Scenario, steps: int):
        self.step_ms = sc.step_ms
        k0 = sc.history_ms // sc.step_ms
        within_per_step = round(PER_STEP * (1 - sc.error_ratio))
        self.error_ratio = 1 - within_per_step / PER_STEP  # as the whole numbers make it
        self.judged = [float(PER_STEP * k) for k in range(steps + 1)]
        self.within = [float(PER_STEP * min(k, k0) + within_per_step * max(0, k - k0)) for k in range(steps + 1)]
        self.t0_ms = k0 * sc.step_ms


def prom_rate(values: list[float], step_ms: int, t_ms: int, range_ms: int) -> float | None:
    """Prometheus 2's rate() of a counter sampled every `step_ms` from 0, at `t_ms` over `range_ms` (a closed
    range, extrapolated as promql/functions.go `extrapolatedRate` does); None with fewer than two samples."""
    lo = t_ms - range_ms
    idx = [k for k in range(len(values)) if lo <= k * step_ms <= t_ms]
    if len(idx) < 2:
        return None
    first, last = idx[0], idx[-1]
    result = values[last] - values[first]
    to_start = (first * step_ms - lo) / 1000
    to_end = (t_ms - last * step_ms) / 1000
    sampled = (last - first) * step_ms / 1000
    average = sampled / (len(idx) - 1)
    if result > 0 and values[first] >= 0:
        to_zero = sampled * (values[first] / result)
        to_start = min(to_start, to_zero)
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    factor = interval / sampled
    factor /= range_ms / 1000
    return result * factor


def error_ratio(s: Series, t_ms: int, window: str, scale: float) -> float | None:
    """The recording rule's value: (rate(judged) − rate(within)) / rate(judged)."""
    range_ms = round(slo.WINDOWS[window] * scale * 1000)
    j, w = prom_rate(s.judged, s.step_ms, t_ms, range_ms), prom_rate(s.within, s.step_ms, t_ms, range_ms)
    if j is None or w is None or j == 0:
        return None
    return (j - w) / j


def holds(t: TierRules, c: slo.BurnCondition, s: Series, t_ms: int) -> float | None:
    """The condition's value (the long window's burn rate) when it holds at `t_ms`, else None."""
    long, short = error_ratio(s, t_ms, c.long, t.scale), error_ratio(s, t_ms, c.short, t.scale)
    if long is None or short is None:
        return None
    burn_long, burn_short = long / t.budget, short / t.budget
    return burn_long if burn_long > c.factor and burn_short > c.factor else None


def firing(t: TierRules, severity: str, s: Series, t_ms: int) -> tuple[float, str] | None:
    """(value, long window name) of the severity's alert at `t_ms` (the first condition that holds), or None."""
    for c in slo.SEVERITIES[severity]:
        v = holds(t, c, s, t_ms)
        if v is not None:
            return v, c.long
    return None


def rfc3339(seconds: float) -> str:
    """Go's `(toTime v).Format "2006-01-02T15:04:05Z07:00"` (UTC, whole seconds)."""
    ms = int(seconds * 1e9) // 1_000_000
    return datetime.fromtimestamp(ms // 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def humanize_duration(seconds: float) -> str:
    """Go template `humanizeDuration` for a duration of at least a second."""
    d = int(seconds)
    days, hours, minutes, secs = d // 86400, d // 3600 % 24, d // 60 % 60, d % 60
    if days:
        return f"{days}d {hours}h {minutes}m {secs}s"
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{seconds:.4g}s"


def expected_alert(t: TierRules, severity: str, figure: str, value: float, window: str, t_ms: int) -> dict:
    """The alert as promtool reports it: labels and expanded annotations."""
    stage, share = max(SHARES.items(), key=lambda kv: kv[1])
    share_text = "%.4g%%" % (share * 100)  # noqa: UP031 - Go's "%.4g%%", the humanizePercentage format
    now = t_ms / 1000
    return {
        "exp_labels": {"severity": severity, "tier": t.tb.name, "figure": figure},
        "exp_annotations": t.annotations(
            severity,
            figure,
            burn=f"{value:.1f}",
            window=t.window(window),
            stage=stage,
            share=share_text,
            contrast=f"{CONTRAST[0]}={CONTRAST[1]}",
            since=rfc3339(now - slo.WINDOWS[window] * t.scale),
            until=rfc3339(now),
            attribution_window=humanize_duration(WINDOW_S),
        ),
    }


def _series_text(values: list[float]) -> str:
    return " ".join(repr(v) for v in values)


def _constant(value: float, steps: int) -> str:
    return f"{value!r}+0x{steps}"


def test_group(t: TierRules, sc: Scenario) -> dict:
    """One promtool test group: the scenario's input series for every figure of the tier, and the alerts expected
    at the last evaluation before detection and at the first after it."""
    b = t.budget
    conds = [c for c in slo.SEVERITIES[sc.severity] if c.factor * b < sc.error_ratio]
    detect = min(c.detection_s(sc.error_ratio, b) for c in conds)
    steps = (sc.history_ms + math.ceil(detect * 1000) + 3 * sc.step_ms) // sc.step_ms + 2
    s = Series(sc, steps)
    detect_ms = s.t0_ms + min(c.detection_s(s.error_ratio, b) for c in conds) * 1000
    before = [k * sc.step_ms for k in range(steps) if k * sc.step_ms < detect_ms - 1]
    after = [k * sc.step_ms for k in range(steps) if k * sc.step_ms > detect_ms + 1]
    quiet, loud = before[-1], after[0]
    series = []
    for f in t.figures:
        for name, values in ((slo.JUDGED, s.judged), (slo.WITHIN, s.within)):
            labels = f'{{tier="{t.tb.name}",figure="{f}",instance="collector"}}'
            series.append({"series": name + labels, "values": _series_text(values)})
    for kind in ("ttft", "e2e"):
        for stage, share in SHARES.items():
            labels = f'{{tier="{t.tb.name}",figure="{kind}",stage="{stage}",instance="collector"}}'
            series.append({"series": slo.ATTRIBUTION_SHARE + labels, "values": _constant(share, steps)})
        info = (
            f'{{tier="{t.tb.name}",figure="{kind}",dominant="queue",verdict="dominated",'
            f'contrast_dimension="{CONTRAST[0]}",contrast_value="{CONTRAST[1]}",instance="collector"}}'
        )
        series.append({"series": slo.ATTRIBUTION_INFO + info, "values": _constant(1.0, steps)})
    series.append({"series": slo.ATTRIBUTION_WINDOW + '{instance="collector"}', "values": _constant(WINDOW_S, steps)})
    tests = []
    for at in (quiet, loud):
        alerts = []
        for f in t.figures:
            got = firing(t, sc.severity, s, at)
            if got is not None:
                alerts.append(expected_alert(t, sc.severity, f, got[0], got[1], at))
        tests.append({"eval_time": duration_ms(at), "alertname": ALERTS[sc.severity], "exp_alerts": alerts})
        if sc.severity == "ticket":  # a burn the page is not about: it stays silent
            tests.append({"eval_time": duration_ms(at), "alertname": ALERTS["page"], "exp_alerts": []})
    assert not tests[0]["exp_alerts"] and len(tests[-1 if sc.severity == "page" else -2]["exp_alerts"]) == len(
        t.figures
    ), "the scenario must cross the threshold between the two evaluations"
    return {
        "name": (
            f"tier {t.tb.name}: {sc.severity} at error ratio {s.error_ratio:g} from {duration_ms(s.t0_ms)} on, after "
            f"a clean {duration_ms(sc.history_ms)}; the Workbook's detection {(detect_ms - s.t0_ms) / 60_000:g} min in"
        ),
        "interval": duration_ms(sc.step_ms),
        "input_series": series,
        "alert_rule_test": tests,
    }


def duration_ms(ms: int) -> str:
    return duration(ms / 1000)


def test_files(tiers: list[TierRules], rules_name: str) -> dict[str, dict]:
    """Suffix (`page-15s`) → a promtool test file over the rule file `rules_name` (beside it): one file per
    evaluation interval, the test groups of every tier that use it."""
    out: dict[str, dict] = {}
    for t in tiers:
        for sc in scenarios(t):
            key = f"{sc.severity}-{duration_ms(sc.step_ms)}"
            doc = out.setdefault(
                key, {"rule_files": [rules_name], "evaluation_interval": duration_ms(sc.step_ms), "tests": []}
            )
            doc["tests"].append(test_group(t, sc))
    return out


__all__ = ["test_files", "scenarios", "prom_rate", "Scenario"]
