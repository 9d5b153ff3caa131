"""Tail attribution, exactly as docs/design.md defines it.

For a tier and a metric M whose stage components d_s add up to M per request:
  tail T = requests with M ≥ quantile_q(M) (the 10 slowest when that is fewer than 10),
  body B = requests with M ≤ quantile_0.5(M),
  share_s = (mean_T d_s − mean_B d_s) / Σ_s (mean_T d_s − mean_B d_s)   — the shares add up to 1.
The dominant stage has the largest share; the tail is "dominated" when it is ≥ 0.5, else "mixed".
Summing each stage's own p99 is NOT attribution and is never shown as such.
"""

from __future__ import annotations

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
WHERE_SEEN = {"gateway": "gateway_ms", "kv_handoff": "kv_handoff_ms"}
"""Stages only some formats have (llm-d: the gateway's time, the P/D KV hand-off), wholly before the first token:
the same column in TTFT and E2E. A tier's attribution names them where some of its requests have them."""
ORDER = ("network", "gateway", "frontend", "queue", "prefill", "kv_handoff", "decode", "postprocess", "unaccounted")
"""The stages in the order a request lives through them."""
NETWORK = {"ttft": "ttft_network_ms", "e2e": "network_ms"}
FIGURES = {"ttft": ("client_ttft_ms", "ttft_ms"), "e2e": ("client_e2e_ms", "e2e_ms")}


def components(kind: str, with_network: bool, seen: tuple[str, ...] = ()) -> dict[str, str]:
    """Stage → column of the components of `kind` ("ttft" or "e2e"), in stage order; `seen`: the stages of
    WHERE_SEEN to take too (those some of the tier's requests have)."""
    base = TTFT_COMPONENTS if kind == "ttft" else E2E_COMPONENTS
    got = ({"network": NETWORK[kind]} if with_network else {}) | base | {s: WHERE_SEEN[s] for s in seen}
    return {s: got[s] for s in ORDER if s in got}


@dataclass(frozen=True, slots=True)
class Shares:
    shares: dict[str, float] | None  # None when the tail is no slower than the body
    dominant: str | None
    verdict: str | None  # "dominated" | "mixed"
    top: list[str]


def shares(tail_mean: dict[str, float], body_mean: dict[str, float]) -> Shares:
    """The share of the tail's excess over the body owed to each stage (same keys, stage order kept)."""
    excess = {s: tail_mean[s] - body_mean[s] for s in tail_mean}
    total = sum(excess.values())
    if not total > 0:
        return Shares(None, None, None, [])
    sh = {s: e / total for s, e in excess.items()}
    ranked = sorted(sh, key=lambda s: sh[s], reverse=True)
    dominant = ranked[0]
    verdict = "dominated" if sh[dominant] >= DOMINATED else "mixed"
    return Shares(sh, dominant, verdict, ranked[:2])


def tail_label(attribution: dict | None) -> str:
    """A report's attribution entry in a few words: the dominant stage (`queue`), `mixed (queue 50%, prefill 48%)`
    when no stage holds half the tail's excess, or why there is none (`no tail`: the tail is no slower)."""
    if not attribution or attribution.get("shares") is None:
        return "no tail (no slower than the body)"
    if attribution["verdict"] == "dominated":
        return attribution["dominant"]
    top = ", ".join(f"{s} {100 * attribution['shares'][s]:.0f}%" for s in attribution["top"])
    return f"mixed ({top})"
