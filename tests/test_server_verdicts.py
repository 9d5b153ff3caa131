"""End to end, per server: a few hundred requests in the server's own span shapes, at a rate and mix drawn from a
seed nobody picked (a hash of the case name), one cause injected into a drawn share of them, exported as each
process's SDK batches them (every request split over several exports). Ingested and reported through the CLI,
the tier must be BROKEN under a budget the cause breaks and KEPT under one it keeps, the attribution must name the
injected cause, and every request must be counted once."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from conftest import rows
from server_traces import (
    Mix,
    as_exported,
    draw,
    jsonl,
    native,
    quantile,
    sglang,
    sglang_pd,
    tgi,
    tgi_trace_filter,
    triton,
    triton_trtllm,
    triton_vllm,
    vllm_classic,
    vllm_journey,
    vllm_request_id,
)

N = 240


@dataclass(frozen=True)
class Case:
    """A server format, the cause injected, and whether client spans surround the server's."""

    name: str
    write: Callable
    cause: str
    client: bool = False
    client_first_token: bool = True  # an HTTP client span (no first-token time) gives no client TTFT
    has_ttft: bool = True  # a non-streaming Triton model's one response carries every token: no first token
    seen_as: str | None = None  # the stage the cause must show as where the format cannot see the cause itself

    @property
    def dominant(self) -> str:
        """The stage the attribution must name first."""
        return self.seen_as or self.cause

    @property
    def metric(self) -> str:
        """The attribution the cause shows in: decode only in E2E; network in TTFT where the client saw it; E2E
        for a format without a first token."""
        if self.cause == "decode" or not self.has_ttft or (self.cause == "network" and not self.client_first_token):
            return "e2e"
        return "ttft"


CASES = [
    Case("native-queue", native, "queue"),
    Case("native-decode", native, "decode"),
    Case("native-network", native, "network", client=True),
    Case("vllm-classic-prefill", vllm_classic, "prefill"),
    Case("vllm-classic-network-httpx", vllm_classic, "network", client=True, client_first_token=False),
    Case("vllm-journey-queue", vllm_journey, "queue"),
    Case("vllm-journey-decode", vllm_journey, "decode", client=True),
    Case("sglang-prefill", sglang, "prefill"),
    Case("sglang-decode", sglang, "decode"),
    Case("sglang-pd-queue", sglang_pd, "queue", client=True),
    Case("sglang-pd-network", sglang_pd, "network", client=True),
    Case("sglang-pd-two-traces-decode", sglang_pd, "decode"),
    # each instance its own trace: the prefill instance's queue is not seen, the decode row's TTFT is unaccounted
    Case("sglang-pd-two-traces-queue", sglang_pd, "queue", seen_as="unaccounted"),
    Case("tgi-queue", tgi, "queue"),
    Case("tgi-decode", tgi, "decode", client=True),
    Case("tgi-trace-filter-prefill", tgi_trace_filter, "prefill"),
    Case("tgi-trace-filter-network", tgi_trace_filter, "network", client=True),
    Case("triton-otel-queue", triton, "queue", has_ttft=False),
    # streaming: the responses give TTFT, decode and postprocess; the backend's engine (its queue and prefill) is
    # unseen, so a prefill cause shows as unaccounted, never as postprocessing
    Case("triton-vllm-stream-queue", triton_vllm, "queue"),
    Case("triton-vllm-stream-decode", triton_vllm, "decode", client=True),
    Case("triton-vllm-stream-prefill", triton_vllm, "prefill", seen_as="unaccounted"),
    Case("triton-trtllm-stream-queue", triton_trtllm, "queue", client=True),
    Case("triton-trtllm-stream-network", triton_trtllm, "network", client=True),
]


def _truth(mix: Mix, case: Case) -> tuple[list[float], list[float]]:
    """The metric the report gates on (client-side where client spans carry it), for clean and injected requests."""
    client = case.client and (case.metric == "e2e" or case.client_first_token)
    fig = (lambda r: r.ttft_ms(client)) if case.metric == "ttft" else (lambda r: r.e2e_ms(client))
    ok = [r for r in mix.requests if not r.failed]
    return [fig(r) for r in ok if not r.injected], [fig(r) for r in ok]


def _file(case: Case, budget_ms: dict[str, float]) -> str:
    """A budgets file for tier `default` (third-party servers set no tier) with the formats' figures only."""
    metrics = ("ttft_ms", "e2e_ms") if case.has_ttft else ("e2e_ms",)
    return "[tiers.default]\n" + "".join(f"{m} = {budget_ms[m]:.3f}\n" for m in metrics)


def _roomy_ms(mix: Mix) -> float:
    """A budget no request comes near: half as much again as the slowest client-side E2E."""
    return max(r.e2e_ms(True) for r in mix.requests) * 1.5


def _keeps(case: Case, mix: Mix) -> str:
    """Budgets every request keeps."""
    return _file(case, {"ttft_ms": _roomy_ms(mix), "e2e_ms": _roomy_ms(mix)})


def _breaks(case: Case, mix: Mix) -> str:
    """The same, but the metric the cause shows in gets a budget between the clean requests' worst and the whole
    tier's p99: the injected requests break it, the clean ones would not."""
    clean, full = _truth(mix, case)
    assert quantile(full, 0.99) > max(clean) * 1.2, "the draw hid its own cause"
    tight = {f"{case.metric}_ms": (max(clean) + quantile(full, 0.99)) / 2}
    return _file(case, {"ttft_ms": _roomy_ms(mix), "e2e_ms": _roomy_ms(mix)} | tight)


def _ingest(tmp_path, docs: list[dict]):
    """`budgetscope ingest` twice, each run half the exports: requests whose spans straddle the two runs included."""
    a = tmp_path / "archive"
    for i, part in enumerate((docs[: len(docs) // 2], docs[len(docs) // 2 :])):
        src = tmp_path / f"traces-{i}.jsonl"
        src.write_text(jsonl(part))
        r = CliRunner().invoke(main, ["ingest", str(src), "-a", str(a)])
        assert r.exit_code == 0, r.output
    return a


def _report(tmp_path, archive, budgets: str, name: str) -> tuple[int, dict]:
    """`budgetscope report --format json` under `budgets`: its exit status and its one tier."""
    b = tmp_path / f"{name}.toml"
    b.write_text(budgets)
    r = CliRunner().invoke(main, ["report", "-a", str(archive), "-b", str(b), "--format", "json"])
    assert r.exit_code in (0, 1, 3), r.output
    (tier,) = json.loads(r.stdout)["tiers"]
    return r.exit_code, tier


def _docs(case: Case, mix: Mix) -> list[dict]:
    """The mix's spans as each process's exporter batches them (up to 64 spans: small batches split requests the
    most)."""
    return as_exported([d for r in mix.requests for d in case.write(r, case.client)], batch=64)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_injected_cause_gets_the_right_verdict(case, tmp_path):
    """BROKEN (exit 1) under the budget the cause breaks, p99 as drawn, the cause dominant; KEPT (exit 0) under a
    roomy one; N requests either way."""
    mix = draw(case.name, case.cause, N)
    archive = _ingest(tmp_path, _docs(case, mix))
    code, tier = _report(tmp_path, archive, _breaks(case, mix), "breaks")
    assert (code, tier["status"], tier["requests"]) == (1, "BROKEN", N), tier["verdict"]
    # within 5 ms of the truth: the formats' own offsets (vLLM's span ends after `e2e`, its API sees the first
    # token after the engine) are a few ms
    assert tier["metrics"][f"{case.metric}_ms"]["p99"] == pytest.approx(quantile(_truth(mix, case)[1], 0.99), abs=5)
    assert tier["attribution"][case.metric]["dominant"] == case.dominant, (mix.rate_per_s, mix.injected_share, tier)
    code, tier = _report(tmp_path, archive, _keeps(case, mix), "keeps")
    assert (code, tier["status"], tier["requests"], tier["attainment"]) == (0, "KEPT", N, 1.0), tier["verdict"]
    assert tier["attribution"][case.metric]["dominant"] == case.dominant


FAILING = [c for c in CASES if c.name in ("native-queue", "sglang-prefill", "tgi-queue", "tgi-trace-filter-prefill")]


@pytest.mark.parametrize("failed_share", [1.0, 0.5], ids=["all-error", "half-error"])
@pytest.mark.parametrize("case", FAILING, ids=lambda c: c.name)
def test_failed_requests_break_the_budget_the_others_keep(case, failed_share, tmp_path):
    """The same mix with all or half of its requests failed (in the server's own way of saying so): BROKEN under
    the budget the ok requests keep, every request counted once, the failures as the error rate."""
    mix = draw(case.name, case.cause, N, failed_share)
    archive = _ingest(tmp_path, _docs(case, mix))
    code, tier = _report(tmp_path, archive, _keeps(case, mix), "keeps")
    assert (code, tier["status"], tier["requests"]) == (1, "BROKEN", N), tier["verdict"]
    failed = sum(r.failed for r in mix.requests) / N
    assert (tier["error_rate"], tier["attainment"]) == pytest.approx((failed, 1 - failed))
    assert [b["kind"] for b in tier["breaches"]] == ["error_rate"]


@pytest.mark.parametrize("cancelled_share", [1.0, 0.5], ids=["all-cancelled", "half-cancelled"])
def test_requests_their_clients_left_are_neither_kept_nor_failed(cancelled_share, tmp_path):
    """vLLM journey tracing says a client disconnect (`api.ABORTED`, reason `client_disconnect`): those requests
    are cancelled, judged neither way; the tier is judged on the rest, and UNKNOWN when none is left."""
    case = next(c for c in CASES if c.name == "vllm-journey-queue")
    mix = draw(case.name, case.cause, N, cancelled_share)
    archive = _ingest(tmp_path, _docs(case, mix))
    code, tier = _report(tmp_path, archive, _keeps(case, mix), "keeps")
    judged = round(N * (1 - cancelled_share))
    want = (3, "UNKNOWN") if judged == 0 else (0, "KEPT")
    assert (code, tier["status"], tier["requests"], tier["judged_requests"]) == (*want, N, judged)
    assert tier["error_rate"] in (0.0, None)


def test_a_budget_on_a_figure_the_format_cannot_see_is_unknown(tmp_path):
    """Triton's OpenTelemetry mode has no first token: a TTFT budget is UNKNOWN, with the reason, and `report`
    exits 3, never 0, though the E2E budget is kept."""
    case = next(c for c in CASES if c.write is triton)
    mix = draw(case.name, case.cause, N)
    archive = _ingest(tmp_path, _docs(case, mix))
    code, tier = _report(tmp_path, archive, _keeps(case, mix) + "ttft_ms = 10000\n", "ttft")
    assert (code, tier["status"], tier["requests"]) == (3, "UNKNOWN", N)
    assert "no ok request has a known TTFT" in tier["unknown_reason"]
    assert tier["attribution"]["e2e"]["dominant"] == "queue"


def test_vllm_journey_rows_keep_their_requeues_in_a_mix(tmp_path):
    """Some requests of the mix are preempted in decode: each row's queue holds its re-queue and its decode does
    not, to the microsecond, and the others are untouched (the QUEUED event comes 20 µs after `llm_core` opens)."""
    case = next(c for c in CASES if c.name == "vllm-journey-decode")
    mix = draw(case.name, case.cause, N)
    archive = _ingest(tmp_path, _docs(case, mix))
    got = {r[0]: r[1:] for r in rows(archive, "SELECT request_id, queue_ms, decode_ms, queue_entries FROM requests")}
    assert 0 < sum(1 for r in mix.requests if r.preempted) < N
    for r in mix.requests:
        wait = r.preempted[1] if r.preempted else 0
        want = ((r.queue - 20 + wait) / 1e3, (sum(r.itls_us) - wait) / 1e3, 2 if r.preempted else 1)
        assert got[vllm_request_id(r)] == pytest.approx(want, abs=1e-3), r
