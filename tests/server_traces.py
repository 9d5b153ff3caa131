"""Many requests in each upstream server's span shapes, on timelines drawn from a seeded RNG, with one cause
injected into a known share of them: the input of tests/test_server_verdicts.py.

Each writer renders the same drawn `Timeline`s the way that server's source emits them; the shapes follow the
conformance fixtures (tests/conformance/<server>/, whose READMEs cite the upstream files and commits). Not a
fake of anything: these are the servers' wire shapes, written out for requests whose truth is known.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass, field

from otlp_wire import any_value, attrs

T0 = 1_800_000_000_000_000_000
US = 1_000
CAUSES = ("queue", "prefill", "decode", "network")


@dataclass
class Timeline:
    """One request's truth, in µs after T0 (server receive = `arrival`); `itls_us` are the gaps between tokens."""

    k: int
    arrival: int
    frontend: int
    queue: int
    prefill: int
    itls_us: list[int]
    post: int
    prompt_tokens: int
    uplink: int
    downlink: int
    injected: bool = False
    failed: bool = False

    @property
    def first(self) -> int:
        return self.arrival + self.frontend + self.queue + self.prefill

    @property
    def last(self) -> int:
        return self.first + sum(self.itls_us)

    @property
    def end(self) -> int:
        return self.last + self.post

    @property
    def output_tokens(self) -> int:
        return len(self.itls_us) + 1

    def ttft_ms(self, client: bool) -> float:
        """Time to first token (ms), client-side (uplink and downlink added) or server-side."""
        return (self.first - self.arrival + (self.uplink + self.downlink if client else 0)) / 1e3

    def e2e_ms(self, client: bool) -> float:
        """End to end (ms), client-side or server-side."""
        return (self.end - self.arrival + (self.uplink + self.downlink if client else 0)) / 1e3


@dataclass
class Mix:
    """N requests at a drawn arrival rate, `cause` injected into a drawn share, `failed_share` of them failed."""

    name: str
    cause: str
    rate_per_s: float
    injected_share: float
    requests: list[Timeline] = field(default_factory=list)


def seed_of(name: str) -> int:
    """The RNG seed of a case: a hash of its name, so nobody picks it by trying."""
    return zlib.crc32(name.encode())


def draw(name: str, cause: str, n: int, failed_share: float = 0.0) -> Mix:
    """`n` requests with Poisson arrivals at a rate drawn in 5-40/s, prompts of 32-2048 tokens, 4-64 output tokens,
    and `cause` (one of CAUSES) made 300-1500 ms slower (decode: 5-10x slower steps) in a drawn 5-25 % of them."""
    assert cause in CAUSES
    rng = random.Random(seed_of(name))
    rate, share = rng.uniform(5, 40), rng.uniform(0.05, 0.25)
    injected = set(rng.sample(range(n), round(share * n)))
    failed = set(rng.sample(range(n), round(failed_share * n)))
    mix, t = Mix(name, cause, rate, len(injected) / n), 0
    for k in range(n):
        t += int(rng.expovariate(rate) * 1e6)
        prompt = rng.randint(32, 2048)
        r = Timeline(k, t, rng.randint(300, 4_000), rng.randint(0, 30_000), 5_000 + prompt * 30,
                     [rng.randint(8_000, 16_000) for _ in range(rng.randint(3, 63))], rng.randint(200, 3_000),
                     prompt, rng.randint(500, 3_000), rng.randint(500, 3_000), k in injected, k in failed)
        if r.injected:
            _inject(rng, r, cause)
        mix.requests.append(r)
    return mix


def _inject(rng: random.Random, r: Timeline, cause: str) -> None:
    extra = rng.randint(300_000, 1_500_000)
    if cause == "queue":
        r.queue += extra
    elif cause == "prefill":
        r.prefill += extra
    elif cause == "network":
        r.uplink += extra
    else:
        slow = rng.uniform(5, 10)
        r.itls_us = [int(x * slow) for x in r.itls_us]


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile (DuckDB's quantile_cont)."""
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


# --- OTLP/JSON pieces --------------------------------------------------------------------------------------------

def _ns(us: int) -> int:
    return T0 + us * US


def _span(tid: str, sid: str, name: str, kind: int, a_us: int, b_us: int, attributes: dict | None = None,
          parent: str | None = None, events: list[tuple[str, int, dict]] | None = None,
          error: str | None = None) -> dict:
    s = {"traceId": tid, "spanId": sid, "name": name, "kind": kind, "startTimeUnixNano": str(_ns(a_us)),
         "endTimeUnixNano": str(_ns(b_us)), "attributes": attrs(attributes or {})}
    if parent:
        s["parentSpanId"] = parent
    if events:
        s["events"] = [{"timeUnixNano": str(_ns(t)), "name": n, "attributes": attrs(a)} for n, t, a in events]
    if error:
        s["status"] = {"code": 2, "message": error}
    return s


def _doc(resource: dict, scope: str, spans: list[dict]) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": attrs(resource)},
                               "scopeSpans": [{"scope": {"name": scope}, "spans": spans}]}]}


class _Ids:
    """Trace and span ids of request k: distinct per request and per server, stable per run."""

    def __init__(self, server: int, k: int):
        self.tid = f"{server:08x}{k:08x}{0xabcdef:016x}"
        self.base, self.n = (server << 24) | k, 0

    def sid(self) -> str:
        self.n += 1
        return f"{self.base:08x}{self.n:08x}"


def _loadgen_client(ids: _Ids, r: Timeline, sid: str) -> dict:
    """budgetscope's own client span (`llm.client.request`), around the server's handling of `r`."""
    return _doc({"service.name": "budgetscope-loadgen"}, "budgetscope", [_span(
        ids.tid, sid, "llm.client.request", 3, r.arrival - r.uplink, r.end + r.downlink, {
            "budgetscope.client.scheduled_unix_nano": _ns(r.arrival - r.uplink),
            "budgetscope.client.first_token_unix_nano": _ns(r.first + r.downlink),
            "http.response.status_code": 500 if r.failed else 200, "gen_ai.usage.output_tokens": r.output_tokens})])


def jsonl(docs: list[dict]) -> str:
    """OTLP/JSON lines, one export a line."""
    return "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs)


# --- budgetscope's native engine (the control) ------------------------------------------------------------------

def native(r: Timeline, client: bool) -> list[dict]:
    """`llm.request` SERVER root with `stage.*` children (the native span contract), optionally under a client
    span; a failed request ends with `budgetscope.outcome` error."""
    ids = _Ids(1, r.k)
    root, cid = ids.sid(), ids.sid() if client else None
    spans, t = [], r.arrival
    for stage, us in (("frontend", r.frontend), ("queue", r.queue), ("prefill", r.prefill),
                      ("decode", sum(r.itls_us)), ("postprocess", r.post)):
        a = {"budgetscope.stage": stage}
        if stage == "decode":
            a["budgetscope.decode.itl_ms"] = [x / 1e3 for x in r.itls_us]
        spans.append(_span(ids.tid, ids.sid(), f"stage.{stage}", 1, t, t + us, a, root))
        t += us
    spans.insert(0, _span(ids.tid, root, "llm.request", 2, r.arrival, r.end, {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": r.prompt_tokens,
        "gen_ai.usage.output_tokens": r.output_tokens, "budgetscope.outcome": "error" if r.failed else "ok"}, cid))
    docs = [_doc({"service.name": "engine"}, "budgetscope", spans)]
    return docs + ([_loadgen_client(ids, r, cid)] if client else [])
