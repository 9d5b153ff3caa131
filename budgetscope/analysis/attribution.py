"""Tail attribution, exactly as docs/design.md defines it.

For a tier and a metric M whose stage components d_s add up to M per request:
  tail T = requests with M ≥ quantile_q(M) (the 10 slowest when that is fewer than 10),
  body B = requests with M ≤ quantile_0.5(M),
  share_s = (mean_T d_s − mean_B d_s) / Σ_s (mean_T d_s − mean_B d_s)   — the shares add up to 1.
The dominant stage has the largest share; the tail is "dominated" when it is ≥ 0.5, else "mixed".
Summing each stage's own p99 is NOT attribution and is never shown as such.

Unknown stays unknown: a component no request of the tail or body knows (NULL on every row: Triton's prefill, the
network of a client that timed no first event) has a share of None, never 0. A server stage NULL on a row has its
time in that row's `unaccounted`, so the server parts still add up; where the parts do not add up to the metric
(the network or the content gap of a client TTFT unknown on some rows), each share is of the metric's own excess
(mean_T M − mean_B M) and what they leave is `unknown`, said, never spread over the known stages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DOMINATED = 0.5

TTFT_COMPONENTS = {  # stage → requests column, for TTFT (server figure; network added with client spans)
    "frontend": "ttft_frontend_ms",
    "queue": "ttft_queue_ms",
    "prefill": "ttft_prefill_ms",
    "unaccounted": "ttft_unaccounted_ms",
}
E2E_COMPONENTS = {
    "frontend": "frontend_ms",
    "queue": "queue_ms",
    "prefill": "prefill_ms",
    "decode": "decode_ms",
    "postprocess": "postprocess_ms",
    "unaccounted": "unaccounted_ms",
}
NETWORK = {"ttft": "ttft_network_ms", "e2e": "network_ms"}
CONTENT_GAP = {"content_gap": "ttft_content_gap_ms"}
"""The last part of a client TTFT whose first token is its first non-empty chunk (AIPerf, GuideLLM): its first
stream event → that chunk (docs/metrics.md)."""
FIGURES = {"ttft": ("client_ttft_ms", "ttft_ms"), "e2e": ("client_e2e_ms", "e2e_ms")}


def components(kind: str, with_network: bool, content_gap: bool = False) -> dict[str, str]:
    """Stage → column of the components of `kind` ("ttft" or "e2e"), in stage order; with `content_gap` (a client
    TTFT to the first non-empty chunk) also the wait for content, last."""
    base = TTFT_COMPONENTS if kind == "ttft" else E2E_COMPONENTS
    gap = CONTENT_GAP if content_gap and with_network and kind == "ttft" else {}
    return ({"network": NETWORK[kind]} if with_network else {}) | base | gap


@dataclass(frozen=True, slots=True)
class Shares:
    shares: dict[str, float | None] | None  # None when the tail is no slower than the body; a stage's None: unknown
    dominant: str | None
    verdict: str | None  # "dominated" | "mixed"
    top: list[str]
    unknown: float | None = None  # the share of the excess no known part explains (0.0 when the parts add up)


def shares(
    tail_mean: dict[str, float],
    body_mean: dict[str, float],
    unknown: set[str] | frozenset[str] = frozenset(),
    whole_excess: float | None = None,
) -> Shares:
    """The share of the tail's excess over the body owed to each stage (same keys, stage order kept). `unknown`:
    the stages no row of the tail or body knows (their share is None); `whole_excess`: the metric's own tail mean −
    body mean, of which the shares are taken when the known parts do not add up to it."""
    excess = {s: tail_mean[s] - body_mean[s] for s in tail_mean if s not in unknown}
    total = sum(excess.values())
    whole = whole_excess is not None and not math.isclose(total, whole_excess, rel_tol=1e-9, abs_tol=1e-9)
    denominator = whole_excess if whole else total
    if not denominator > 0:
        return Shares(None, None, None, [])
    sh = {s: excess[s] / denominator if s in excess else None for s in tail_mean}
    known = {s: v for s, v in sh.items() if v is not None}
    ranked = sorted(known, key=lambda s: known[s], reverse=True)
    dominant = ranked[0] if ranked else None
    verdict = None if dominant is None else "dominated" if sh[dominant] >= DOMINATED else "mixed"
    return Shares(sh, dominant, verdict, ranked[:2], 1 - sum(known.values()) if whole else 0.0)


def tail_label(attribution: dict | None) -> str:
    """A report's attribution entry in a few words: the dominant stage (`queue`), `mixed (queue 50%, prefill 48%)`
    when no stage holds half the tail's excess, or why there is none (`no tail`: the tail is no slower)."""
    if not attribution or attribution.get("shares") is None:
        return "no tail (no slower than the body)"
    unknown = attribution.get("unknown_share") or 0.0
    rest = f", {100 * unknown:.0f}% unknown" if unknown >= 0.005 else ""
    if attribution["verdict"] == "dominated":
        return attribution["dominant"] + (f" ({rest[2:]})" if rest else "")
    top = ", ".join(f"{s} {100 * attribution['shares'][s]:.0f}%" for s in attribution["top"])
    return f"mixed ({top}{rest})"
