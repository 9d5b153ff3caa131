"""End to end, per server: a few hundred requests in the server's own span shapes, at a rate and mix drawn from a
seed nobody picked (a hash of the case name), one cause injected into a drawn share of them. Ingested and reported
through the CLI, the tier must be BROKEN under a budget the cause breaks and KEPT under one it keeps, the
attribution must name the injected cause, and every request must be counted once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

import pytest
from click.testing import CliRunner
from server_traces import Mix, draw, jsonl, native, quantile

from budgetscope.cli import main

N = 240


@dataclass(frozen=True)
class Case:
    """A server format, the cause injected, and whether client spans surround the server's."""

    name: str
    write: Callable
    cause: str
    client: bool = False
    client_first_token: bool = True  # an HTTP client span (no first-token time) gives no client TTFT

    @property
    def metric(self) -> str:
        """The attribution the cause shows in: decode only in E2E; network in TTFT where the client saw it."""
        if self.cause == "decode" or (self.cause == "network" and not self.client_first_token):
            return "e2e"
        return "ttft"


CASES = [
    Case("native-queue", native, "queue"),
    Case("native-decode", native, "decode"),
    Case("native-network", native, "network", client=True),
]


def _truth(mix: Mix, case: Case) -> tuple[list[float], list[float]]:
    """The metric the report gates on (client-side where client spans carry it), for clean and injected requests."""
    client = case.client and (case.metric == "e2e" or case.client_first_token)
    fig = (lambda r: r.ttft_ms(client)) if case.metric == "ttft" else (lambda r: r.e2e_ms(client))
    ok = [r for r in mix.requests if not r.failed]
    return [fig(r) for r in ok if not r.injected], [fig(r) for r in ok]


def _budgets(case: Case, mix: Mix) -> tuple[str, str]:
    """A budget the cause breaks (between the clean requests' worst and the whole tier's p99) and one it keeps
    (half as much again as the slowest request), on the metric the cause shows in."""
    clean, full = _truth(mix, case)
    assert quantile(full, 0.99) > max(clean) * 1.2, "the draw hid its own cause"
    broken = (max(clean) + quantile(full, 0.99)) / 2
    roomy = max(r.e2e_ms(True) for r in mix.requests) * 1.5
    other = "e2e_ms" if case.metric == "ttft" else "ttft_ms"
    return (f"[tiers.default]\n{case.metric}_ms = {broken:.3f}\n{other} = {roomy:.3f}\n",
            f"[tiers.default]\nttft_ms = {roomy:.3f}\ne2e_ms = {roomy:.3f}\n")


def _ingest(tmp_path, docs: list[dict]):
    src, a = tmp_path / "traces.jsonl", tmp_path / "archive"
    src.write_text(jsonl(docs))
    r = CliRunner().invoke(main, ["ingest", str(src), "-a", str(a)])
    assert r.exit_code == 0, r.output
    return a


def _report(tmp_path, archive, budgets: str, name: str) -> tuple[int, dict]:
    b = tmp_path / f"{name}.toml"
    b.write_text(budgets)
    r = CliRunner().invoke(main, ["report", "-a", str(archive), "-b", str(b), "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    (tier,) = json.loads(r.stdout)["tiers"]
    return r.exit_code, tier


def _docs(case: Case, mix: Mix) -> list[dict]:
    return [d for r in mix.requests for d in case.write(r, case.client)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_injected_cause_gets_the_right_verdict(case, tmp_path):
    mix = draw(case.name, case.cause, N)
    archive = _ingest(tmp_path, _docs(case, mix))
    breaking, keeping = _budgets(case, mix)
    code, tier = _report(tmp_path, archive, breaking, "breaks")
    assert (code, tier["status"], tier["requests"]) == (1, "BROKEN", N), tier["verdict"]
    assert tier["attribution"][case.metric]["dominant"] == case.cause, (mix.rate_per_s, mix.injected_share, tier)
    code, tier = _report(tmp_path, archive, keeping, "keeps")
    assert (code, tier["status"], tier["requests"]) == (0, "KEPT", N), tier["verdict"]
    assert tier["attribution"][case.metric]["dominant"] == case.cause
