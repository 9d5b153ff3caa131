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

from otlp_wire import attrs

T0 = 1_800_000_000_000_000_000
US = 1_000
CAUSES = ("queue", "prefill", "decode", "network")


@dataclass
class Timeline:
    """One request's truth, in µs after T0 (server receive = `arrival`); `itls_us` are the gaps between tokens.
    `injected`: the case's cause was added to it; `failed`: each writer makes it fail the way its server says so;
    `preempted`: part of one gap was a re-queue, which only vLLM journey tracing tells apart."""

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
    preempted: tuple[int, int] | None = None  # (token gap, µs of it spent back in the queue): a decode preemption

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
    """The drawn requests of a case: their arrival rate (req/s) and the share of them `cause` was injected into."""

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
        r = Timeline(
            k,
            t,
            rng.randint(300, 4_000),
            rng.randint(0, 30_000),
            5_000 + prompt * 30,
            [rng.randint(8_000, 16_000) for _ in range(rng.randint(3, 63))],
            rng.randint(200, 3_000),
            prompt,
            rng.randint(500, 3_000),
            rng.randint(500, 3_000),
            k in injected,
            k in failed,
        )
        if rng.random() < 0.1:
            r.preempted = (rng.randrange(len(r.itls_us)), rng.randint(5_000, 40_000))
            r.itls_us[r.preempted[0]] += r.preempted[1]
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
        if r.preempted:
            r.itls_us[r.preempted[0]] -= int(r.preempted[1] * (slow - 1))  # the steps slow down, not the re-queue


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


def _span(
    tid: str,
    sid: str,
    name: str,
    kind: int,
    a_us: int,
    b_us: int,
    attributes: dict | None = None,
    parent: str | None = None,
    events: list[tuple[str, int, dict]] | None = None,
    error: str | None = None,
) -> dict:
    s = {
        "traceId": tid,
        "spanId": sid,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(_ns(a_us)),
        "endTimeUnixNano": str(_ns(b_us)),
        "attributes": attrs(attributes or {}),
    }
    if parent:
        s["parentSpanId"] = parent
    if events:
        s["events"] = [{"timeUnixNano": str(_ns(t)), "name": n, "attributes": attrs(a)} for n, t, a in events]
    if error:
        s["status"] = {"code": 2, "message": error}
    return s


def _doc(resource: dict, scope: str, spans: list[dict]) -> dict:
    return {
        "resourceSpans": [
            {"resource": {"attributes": attrs(resource)}, "scopeSpans": [{"scope": {"name": scope}, "spans": spans}]}
        ]
    }


class _Ids:
    """Trace and span ids of request k: distinct per request and per server, stable per run."""

    def __init__(self, server: int, k: int):
        self.tid = f"{server:08x}{k:08x}{0xABCDEF:016x}"
        self.base, self.n = (server << 24) | k, 0

    def sid(self) -> str:
        self.n += 1
        return f"{self.base:08x}{self.n:08x}"


def _loadgen_client(ids: _Ids, r: Timeline, sid: str, first_out: int = 0) -> dict:
    """budgetscope's own client span (`llm.client.request`), around the server's handling of `r`; `first_out`: µs
    from the engine's first token to the server sending it (the client sees it a downlink later)."""
    return _doc(
        {"service.name": "budgetscope-loadgen"},
        "budgetscope",
        [
            _span(
                ids.tid,
                sid,
                "llm.client.request",
                3,
                r.arrival - r.uplink,
                r.end + r.downlink,
                {
                    "budgetscope.client.scheduled_unix_nano": _ns(r.arrival - r.uplink),
                    "budgetscope.client.first_token_unix_nano": _ns(r.first + first_out + r.downlink),
                    "http.response.status_code": 500 if r.failed else 200,
                    "gen_ai.usage.output_tokens": r.output_tokens,
                },
            )
        ],
    )


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
    for stage, us in (
        ("frontend", r.frontend),
        ("queue", r.queue),
        ("prefill", r.prefill),
        ("decode", sum(r.itls_us)),
        ("postprocess", r.post),
    ):
        a = {"budgetscope.stage": stage}
        if stage == "decode":
            a["budgetscope.decode.itl_ms"] = [x / 1e3 for x in r.itls_us]
        spans.append(_span(ids.tid, ids.sid(), f"stage.{stage}", 1, t, t + us, a, root))
        t += us
    spans.insert(
        0,
        _span(
            ids.tid,
            root,
            "llm.request",
            2,
            r.arrival,
            r.end,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "m",
                "gen_ai.usage.input_tokens": r.prompt_tokens,
                "gen_ai.usage.output_tokens": r.output_tokens,
                "budgetscope.outcome": "error" if r.failed else "ok",
            },
            cid,
        ),
    )
    docs = [_doc({"service.name": "engine"}, "budgetscope", spans)]
    return docs + ([_loadgen_client(ids, r, cid)] if client else [])


# --- vLLM -------------------------------------------------------------------------------------------------------

_VLLM = {"service.name": "vllm", "telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry"}


def vllm_request_id(r: Timeline) -> str:
    """The OpenAI-style id vLLM gives request `r`."""
    return f"chatcmpl-{r.k:016x}"


def _httpx_client(ids: _Ids, r: Timeline, sid: str, sent_us: int) -> dict:
    """A plain OpenTelemetry httpx CLIENT span (old HTTP semconv names), non-streamed: it ends once the response,
    sent at `sent_us`, is read."""
    return _doc(
        {"service.name": "chat-frontend"},
        "opentelemetry.instrumentation.httpx",
        [
            _span(
                ids.tid,
                sid,
                "POST",
                3,
                r.arrival - r.uplink,
                sent_us + r.downlink,
                {
                    "http.method": "POST",
                    "http.url": "http://vllm-0.serving:8000/v1/chat/completions",
                    "http.status_code": 200,
                },
            )
        ],
    )


def vllm_classic(r: Timeline, client: bool) -> list[dict]:
    """`--otlp-traces-endpoint`: one `llm_request` SERVER span made by `do_tracing` (start = arrival, ended a
    little after `e2e`, before the response goes out), `gen_ai.latency.*` in seconds; optionally the child of an
    httpx client span."""
    ids = _Ids(2, r.k)
    sid, cid = ids.sid(), ids.sid() if client else None
    s = lambda us: us / 1e6  # noqa: E731 - a one-line helper where it is used
    decode = sum(r.itls_us)
    traced = r.end + 1_200
    span = _span(
        ids.tid,
        sid,
        "llm_request",
        2,
        r.arrival,
        traced,
        {
            "gen_ai.latency.time_to_first_token": s(r.first - r.arrival),
            "gen_ai.latency.e2e": s(r.end - r.arrival),
            "gen_ai.latency.time_in_queue": s(r.queue),
            "gen_ai.usage.prompt_tokens": r.prompt_tokens,
            "gen_ai.usage.completion_tokens": r.output_tokens,
            "gen_ai.latency.time_in_model_prefill": s(r.prefill),
            "gen_ai.latency.time_in_model_decode": s(decode),
            "gen_ai.latency.time_in_model_inference": s(r.prefill + decode),
            "gen_ai.request.id": vllm_request_id(r),
            "gen_ai.request.max_tokens": 256,
        },
        cid,
    )
    docs = [_doc(_VLLM, "vllm.llm_engine", [span])]
    return docs + ([_httpx_client(ids, r, cid, traced)] if client else [])


def _journey(name: str, t: int, step: int, phase: str, r: Timeline, extra: dict | None = None) -> tuple:
    a = {
        "event.type": name,
        "ts.monotonic": 8e4 + t / 1e6,
        "scheduler.step": step,
        "phase": phase,
        "prefill.done_tokens": 0 if phase == "waiting" else r.prompt_tokens,
        "prefill.total_tokens": r.prompt_tokens,
        "decode.done_tokens": 0,
        "decode.max_tokens": 256,
        "num_preemptions": 0,
    }
    return f"journey.{name}", t, a | (extra or {})


def vllm_journey(r: Timeline, client: bool) -> list[dict]:
    """`--enable-journey-tracing`: `llm_request` (scope vllm.api, `api.*` events, no latency attributes) with the
    child `llm_core` (scope vllm.scheduler, `journey.*` events). A `failed` request is a client disconnect during
    prefill (a cancellation): `api.ABORTED`, status ERROR, the engine's FINISHED (aborted) after the API span
    ended."""
    ids = _Ids(3, r.k)
    api, core, cid = ids.sid(), ids.sid(), ids.sid() if client else None
    handoff, queued, sched = r.arrival + r.frontend // 2, r.arrival + r.frontend, r.arrival + r.frontend + r.queue
    rid = vllm_request_id(r)
    core_a = {"gen_ai.request.id": f"{rid}-{r.k:08x}"}  # the engine's id: the API's with a random suffix
    api_a = {
        "gen_ai.request.id": rid,
        "gen_ai.response.model": "m",
        "gen_ai.usage.prompt_tokens": r.prompt_tokens,
        "gen_ai.request.max_tokens": 256,
    }
    ev = [
        _journey("QUEUED", queued + 20, 1, "waiting", r),
        _journey("SCHEDULED", sched, 2, "prefill", r, {"schedule.kind": "FIRST"}),
    ]
    if r.failed:
        gone = sched + r.prefill // 2
        api_ev = [
            ("api.ARRIVED", r.arrival, {}),
            ("api.HANDOFF_TO_CORE", handoff, {}),
            ("api.ABORTED", gone, {"error": "Client disconnected", "reason": "client_disconnect"}),
        ]
        ev.append(_journey("FINISHED", gone + 2_000, 3, "prefill", r, {"finish.status": "aborted"}))
        spans = [
            _span(
                ids.tid, api, "llm_request", 2, r.arrival, gone + 50, api_a, cid, api_ev, error="Client disconnected"
            ),
            _span(ids.tid, core, "llm_core", 1, queued, gone + 2_010, core_a, api, ev),
        ]
    else:
        api_a["gen_ai.usage.completion_tokens"] = r.output_tokens
        api_ev = [
            ("api.ARRIVED", r.arrival, {}),
            ("api.HANDOFF_TO_CORE", handoff, {}),
            ("api.FIRST_RESPONSE_FROM_CORE", r.first + 2_000, {}),
            ("api.DEPARTED", r.end - 100, {}),
        ]
        ev.append(_journey("FIRST_TOKEN", r.first, 3, "decode", r))
        if r.preempted:
            j, wait = r.preempted
            out = r.first + sum(r.itls_us[:j])
            ev += [
                _journey("PREEMPTED", out, 10, "decode", r, {"num_preemptions": 1}),
                _journey("SCHEDULED", out + wait, 12, "decode", r, {"num_preemptions": 1, "schedule.kind": "RESUME"}),
            ]
        ev.append(_journey("FINISHED", r.last, 40, "decode", r, {"finish.status": "length"}))
        spans = [
            _span(ids.tid, api, "llm_request", 2, r.arrival, r.end, api_a, cid, api_ev),
            _span(ids.tid, core, "llm_core", 1, queued, r.last + 50, core_a, api, ev),
        ]
    docs = [_doc(_VLLM, "vllm.api", spans[:1]), _doc(_VLLM, "vllm.scheduler", spans[1:])]
    return docs + ([_loadgen_client(ids, r, cid, first_out=2_000)] if client else [])


# --- SGLang -----------------------------------------------------------------------------------------------------

_SGLANG = {"service.name": "sglang", "telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry"}


class _Sg:
    """One SGLang trace being written: INTERNAL spans of scope `sglang server`."""

    def __init__(self, ids: _Ids):
        self.ids, self.spans = ids, []

    def add(
        self,
        name: str,
        a: int,
        b: int,
        parent: str,
        attributes: dict | None = None,
        sid: str | None = None,
        error: str | None = None,
    ) -> str:
        sid = sid or self.ids.sid()
        self.spans.append(_span(self.ids.tid, sid, name, 1, a, b, attributes, parent, error=error))
        return sid


def _sg_root_attrs(r: Timeline, rid: str, ttft_us: int, prefill_us: int, room: str | None = None) -> dict:
    a = {
        "rid": rid,
        "module": "sglang::request",
        "bootstrap_room": room,
        "gen_ai.usage.prompt_tokens": r.prompt_tokens,
        "gen_ai.request.id": rid,
        "gen_ai.response.model": "m",
        "gen_ai.usage.completion_tokens": r.output_tokens,
        "gen_ai.response.finish_reasons": '["length"]',
        "gen_ai.latency.time_to_first_token": ttft_us / 1e6,
        "gen_ai.latency.time_in_model_prefill": prefill_us / 1e6,
    }
    return {k: v for k, v in a.items() if v is not None}


def _sg_decode(sg: _Sg, r: Timeline, start: int, sch: str, level: int) -> None:
    """`decode_forward` from `start` to the last token, its `decode_loop` slices at level 3."""
    df = sg.add("decode_forward", start, r.last, sch)
    if level >= 3:
        t = r.first
        sg.add("decode_loop", start, t, df, {"decode_ct": 0})
        for i, gap in enumerate(r.itls_us):
            sg.add("decode_loop", t, t + gap, df, {"decode_ct": i + 1})
            t += gap


def sglang(r: Timeline, client: bool, level: int | None = None) -> list[dict]:
    """A single server (role ""): root `" Req <rid[:8]>"`, Tokenizer and Scheduler thread spans, stage slices at a
    trace level 1-3 (drawn per request from its index when not given); `gen_ai.latency.e2e` never set. A failed
    request is aborted in the waiting queue: the scheduler thread span ERROR with the reason, no wait slice."""
    ids = _Ids(4, r.k)
    level = level or 1 + r.k % 3
    sg, rid = _Sg(ids), f"{r.k:08x}" + ids.tid[:24]
    root, tok, sch, cid = ids.sid(), ids.sid(), ids.sid(), ids.sid() if client else None
    tok_end = r.arrival + r.frontend // 3
    recv, enq = tok_end + 100, r.arrival + r.frontend
    sched, prefilled = enq + r.queue, r.first - 400
    host = "(host:3f9a1c2e | pid:7)"
    sg.add("tokenize", r.arrival, tok_end, tok)
    if level >= 2:
        sg.add("api_server_dispatch", tok_end, tok_end + 50, tok)
        sg.add("request_process", recv, enq, sch)
    sg.add(f"Tokenizer{host}", r.arrival, tok_end + 50, root, {"thread_label": "Tokenizer"}, sid=tok)
    if r.failed:
        sg.add(
            f"Scheduler [TP 0] {host}",
            recv,
            sched,
            root,
            {"thread_label": "Scheduler", "tp_rank": 0, "type": "abort", "message": "Abort in waiting queue"},
            sid=sch,
            error="",
        )
        sg.add(
            f" Req {rid[:8]}",
            r.arrival,
            sched + 2_000,
            cid,
            {
                "rid": rid,
                "module": "sglang::request",
                "gen_ai.usage.completion_tokens": 0,
                "gen_ai.usage.prompt_tokens": r.prompt_tokens,
                "gen_ai.response.finish_reasons": '["abort"]',
            },
            sid=root,
        )
        return [_doc(_SGLANG, "sglang server", sg.spans)] + ([_loadgen_client(ids, r, cid)] if client else [])
    sg.add("prefill_waiting", enq, sched, sch)
    pf = sg.add("prefill_forward", sched, prefilled, sch)
    if level >= 3:
        mid = sched + (prefilled - sched) // 2
        sg.add("chunked_prefill", sched, mid, pf)
        sg.add("chunked_prefill", mid, prefilled, pf)
    sg.add("decode_waiting", prefilled, prefilled + 100, sch)
    _sg_decode(sg, r, prefilled + 100, sch, level)
    sg.add(f"Scheduler [TP 0] {host}", recv, r.last, root, {"thread_label": "Scheduler", "tp_rank": 0}, sid=sch)
    sg.add(
        f" Req {rid[:8]}", r.arrival, r.end, cid, _sg_root_attrs(r, rid, r.first - r.arrival, r.first - sched), sid=root
    )
    docs = [_doc(_SGLANG, "sglang server", sg.spans)]
    return docs + ([_loadgen_client(ids, r, cid)] if client else [])


def sglang_pd(r: Timeline, client: bool) -> list[dict]:
    """A PD pair (roles `prefill` and `decode`, one `bootstrap_room`), level 3. Under a client span both roots
    are its children, in its trace (a router that forwards `traceparent`); without one each instance writes a
    trace of its own (`mini_lb` forwards no trace header). The queue is the prefill instance's wait."""
    ids = _Ids(5, r.k)
    d_ids = ids if client else _Ids(8, r.k)
    sg, dg, room = _Sg(ids), _Sg(d_ids), f"0x{r.k:016x}"
    cid = ids.sid() if client else None
    p_root, p_tok, p_sch = ids.sid(), ids.sid(), ids.sid()
    d_root, d_tok, d_sch = d_ids.sid(), d_ids.sid(), d_ids.sid()
    host = "(host:3f9a1c2e | pid:{})"
    boot_end = r.arrival + r.frontend + 1_000
    waited, forward_end = boot_end + r.queue, r.first - 2_000
    # prefill instance: tokenize, bootstrap (a fixed 1 ms), wait, forward, KV transfer
    sg.add("tokenize", r.arrival, r.arrival + 200, p_tok)
    sg.add(
        f"PrefillTokenizer{host.format(5101)}",
        r.arrival,
        r.arrival + 250,
        p_root,
        {"thread_label": "PrefillTokenizer"},
        sid=p_tok,
    )
    sg.add("prefill_prepare", r.arrival + 300, r.arrival + r.frontend, p_sch)
    sg.add("prefill_bootstrap", r.arrival + r.frontend, boot_end, p_sch)
    sg.add("prefill_waiting", boot_end, waited, p_sch)
    sg.add("prefill_forward", waited, forward_end, p_sch)
    sg.add("prefill_transfer_kv_cache", forward_end + 100, forward_end + 1_000, p_sch)
    sg.add(
        f"Prefill Scheduler [TP 0] {host.format(5150)}",
        r.arrival + 250,
        forward_end + 1_100,
        p_root,
        {"thread_label": "Prefill Scheduler", "tp_rank": 0},
        sid=p_sch,
    )
    sg.add(
        f"prefill Req {ids.tid[:8]}",
        r.arrival,
        forward_end + 1_500,
        cid,
        _sg_root_attrs(r, "p" + ids.tid[:31], forward_end - r.arrival, forward_end - waited, room),
        sid=p_root,
    )
    # decode instance: bootstrap, wait for the transferred KV, a short decode wait, forward (fake output first)
    d0 = r.arrival + 150
    dg.add("tokenize", d0, d0 + 200, d_tok)
    dg.add(f"DecodeTokenizer{host.format(6101)}", d0, d0 + 250, d_root, {"thread_label": "DecodeTokenizer"}, sid=d_tok)
    dg.add("decode_prepare", d0 + 300, d0 + 600, d_sch)
    dg.add("decode_bootstrap", d0 + 600, boot_end, d_sch)
    dg.add("decode_transferred", boot_end, forward_end + 1_000, d_sch)
    dg.add("decode_waiting", forward_end + 1_000, forward_end + 1_200, d_sch)
    df = dg.add("decode_forward", forward_end + 1_200, r.last, d_sch)
    dg.add("fake_output", forward_end + 1_200, r.first, df)
    t = r.first
    for i, gap in enumerate(r.itls_us):
        dg.add("decode_loop", t, t + gap, df, {"decode_ct": i})
        t += gap
    dg.add(
        f"Decode Scheduler [TP 0] {host.format(6150)}",
        d0 + 250,
        r.last,
        d_root,
        {"thread_label": "Decode Scheduler", "tp_rank": 0},
        sid=d_sch,
    )
    dg.add(
        f"decode Req {ids.tid[8:16]}",
        d0,
        r.end,
        cid,
        _sg_root_attrs(r, "d" + ids.tid[:31], r.first - d0, r.first - forward_end - 1_200, room),
        sid=d_root,
    )
    docs = [_doc(_SGLANG, "sglang server", sg.spans), _doc(_SGLANG, "sglang server", dg.spans)]
    return docs + ([_loadgen_client(ids, r, cid)] if client else [])


# --- TGI --------------------------------------------------------------------------------------------------------

_TGI = {"service.name": "text-generation-inference.router"}


def rust_duration(ns: int) -> str:
    """`format!("{:?}", Duration::from_nanos(ns))`: the largest unit that keeps the value ≥ 1, trailing zeros cut."""
    for unit, size in (("s", 10**9), ("ms", 10**6), ("µs", 10**3)):
        if ns >= size:
            whole, frac = divmod(ns, size)
            digits = f"{frac:0{len(str(size)) - 1}d}".rstrip("0")
            return f"{whole}.{digits}{unit}" if digits else f"{whole}{unit}"
    return f"{ns}ns"


def tgi(r: Timeline, client: bool) -> list[dict]:
    """A streamed request at the default log filter (every span INTERNAL): handler `generate_stream` →
    `async_stream` → `Infer::generate_stream` (same name) → `schedule` → `queued`, one `infer` per forward pass
    with its `send_generation`. A failed request is refused by validation: no timing field, the inner
    `generate_stream` ERROR with its event, nothing reaches the queue."""
    ids = _Ids(6, r.k)
    h, w, inner, sch, cid = ids.sid(), ids.sid(), ids.sid(), ids.sid(), ids.sid() if client else None
    a0 = r.arrival
    if r.failed:
        spans = [
            _span(ids.tid, h, "generate_stream", 1, a0, a0 + r.frontend + 300, {"seed": "None"}, cid),
            _span(ids.tid, w, "async_stream", 1, a0 + 10, a0 + r.frontend + 100, {}, h),
            _span(
                ids.tid,
                inner,
                "generate_stream",
                1,
                a0 + 15,
                a0 + r.frontend + 90,
                {},
                w,
                [
                    (
                        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096",
                        a0 + r.frontend + 80,
                        {"level": "ERROR", "target": "text_generation_router::infer"},
                    )
                ],
                error="validation",
            ),
            _span(ids.tid, ids.sid(), "validate", 1, a0 + 20, a0 + r.frontend + 60, {}, inner),
        ]
        return [_doc(_TGI, "opentelemetry-otlp", spans)] + ([_loadgen_client(ids, r, cid)] if client else [])
    queued, batch = a0 + r.frontend, a0 + r.frontend + r.queue
    fields = {
        "validation_time": rust_duration(r.frontend * US),
        "queue_time": rust_duration(r.queue * US),
        "inference_time": rust_duration((r.last - batch) * US),
        "total_time": rust_duration((r.end - a0) * US),
        "time_per_token": rust_duration(sum(r.itls_us) * US // max(len(r.itls_us), 1)),
        "seed": "None",
    }
    gens = [r.first] + [r.first + sum(r.itls_us[: j + 1]) for j in range(len(r.itls_us))]
    spans = [
        _span(ids.tid, h, "generate_stream", 1, a0, r.end, fields, cid),
        _span(ids.tid, w, "async_stream", 1, a0 + 10, r.last + 50, {}, h),
        _span(ids.tid, inner, "generate_stream", 1, a0 + 15, r.last + 45, {}, w),
        _span(ids.tid, ids.sid(), "validate", 1, a0 + 20, queued - 50, {}, inner),
        _span(ids.tid, sch, "schedule", 1, queued - 3, r.last + 40, {}, inner),
        _span(ids.tid, ids.sid(), "queued", 1, queued, batch, {}, sch),
    ]
    start = batch
    for g in gens:
        inf = ids.sid()
        spans.append(_span(ids.tid, inf, "infer", 1, start, g + 100, {}, sch))
        spans.append(
            _span(ids.tid, ids.sid(), "send_generation", 1, g, g + 30, {"generation": "Generation { .. }"}, inf)
        )
        start = g + 200
    return [_doc(_TGI, "opentelemetry-otlp", spans)] + ([_loadgen_client(ids, r, cid)] if client else [])


def tgi_trace_filter(r: Timeline, client: bool) -> list[dict]:
    """The same at `LOG_LEVEL=trace`: OtelAxumLayer's SERVER span `POST /generate_stream` (the only SERVER span)
    opens 120 µs before the handler (the body read) and closes 1 µs after it. Without a client it is the handler's
    parent; with one, both are children of the client span (the handler's `set_parent`)."""
    docs = tgi(r, client)
    spans = docs[0]["resourceSpans"][0]["scopeSpans"][0]["spans"]
    handler, sid = spans[0], _Ids(9, r.k).sid()
    end_us = (int(handler["endTimeUnixNano"]) - T0) // US
    spans.insert(
        0,
        _span(
            handler["traceId"],
            sid,
            "POST /generate_stream",
            2,
            r.arrival - 120,
            end_us + 1,
            {
                "http.request.method": "POST",
                "http.route": "/generate_stream",
                "network.protocol.version": "1.1",
                "otel.name": "POST /generate_stream",
                "otel.kind": "Server",
                "http.response.status_code": 422 if r.failed else 200,
            },
            handler.get("parentSpanId"),
        ),
    )
    if not client:
        handler["parentSpanId"] = sid
    return docs


# --- Triton -----------------------------------------------------------------------------------------------------


BOOT_US = -260_000_000_000
"""Where OpenTelemetry mode puts a stamp Triton left at 0 (a chunked reply's sends): its steady-clock offset + 0, the
node's boot (here three days before T0)."""


def _triton(
    r: Timeline,
    client: bool,
    server: int,
    model_name: str,
    responses: list[int],
    request_end: int,
    compute_end: int,
    service: str = "triton-inference-server",
) -> list[dict]:
    """`--trace-config mode=opentelemetry` (tests/conformance/triton/): `InferRequest` → a span named after the model
    → `compute`, all SERVER kind under tracer `triton-server`, the timestamps their events. Triton sees the model's
    compute, not its engine's batches: prefill is inside COMPUTE_START → the first response."""
    ids = _Ids(server, r.k)
    root, model, comp, cid = ids.sid(), ids.sid(), ids.sid(), ids.sid() if client else None
    m0, c0 = r.arrival + r.frontend, r.arrival + r.frontend + r.queue
    chunked = len(responses) > 1
    sends = [("HTTP_SEND_START", BOOT_US, {}), ("HTTP_SEND_END", BOOT_US, {})] if chunked else []
    spans = [
        _span(
            ids.tid,
            root,
            "InferRequest",
            2,
            r.arrival + 40,
            r.end,
            {},
            cid,
            [("HTTP_RECV_START", r.arrival, {}), ("HTTP_RECV_END", r.arrival + 30, {})]
            + [e for t in responses for e in [("INFER_RESPONSE_COMPLETE", t, {}), *sends]]
            + ([] if chunked else [("HTTP_SEND_START", r.end - 40, {}), ("HTTP_SEND_END", r.end, {})]),
        ),
        _span(
            ids.tid,
            model,
            model_name,
            2,
            m0 - 6,
            request_end,
            {
                "triton.model_name": model_name,
                "triton.model_version": 1,
                "triton.trace_id": r.k + 1,
                "triton.trace_parent_id": 0,
                "triton.request_id": f"req-{r.k}",
            },
            root,
            [("REQUEST_START", m0 - 6, {}), ("QUEUE_START", m0, {}), ("REQUEST_END", request_end, {})],
        ),
        _span(
            ids.tid,
            comp,
            "compute",
            2,
            c0,
            compute_end,
            {},
            model,
            [("COMPUTE_START", c0, {}), ("COMPUTE_END", compute_end, {})],
        ),
    ]
    docs = [_doc({"service.name": service}, "triton-server", spans)]
    return docs + ([_loadgen_client(ids, r, cid)] if client else [])


def triton(r: Timeline, client: bool) -> list[dict]:
    """A non-decoupled model: one response, at the last token, after its compute; its request released after."""
    return _triton(r, client, 7, "llama3", [r.last], r.last + 100, r.last)


def _token_times(r: Timeline) -> list[int]:
    out = [r.first]
    for gap in r.itls_us:
        out.append(out[-1] + gap)
    return out


def triton_vllm(r: Timeline, client: bool) -> list[dict]:
    """vLLM's backend (python, decoupled) streaming over HTTP `generate_stream`: `execute()` returns 300 µs after
    COMPUTE_START and the python backend releases the request (REQUEST_END) then, before the first token; one
    response a token; every chunk's send stamped 0."""
    c0 = r.arrival + r.frontend + r.queue
    return _triton(r, client, 8, "vllm_model", _token_times(r), c0 + 400, c0 + 300)


def triton_trtllm(r: Timeline, client: bool) -> list[dict]:
    """TensorRT-LLM's inflight batcher streaming (decoupled), exported under another service name: COMPUTE_END and
    REQUEST_END after the final response."""
    return _triton(r, client, 9, "tensorrt_llm", _token_times(r), r.last + 50, r.last + 30, service="llm-prod")


def as_exported(docs: list[dict], batch: int = 512) -> list[dict]:
    """The spans of `docs` as an SDK's BatchSpanProcessor sends them: each process (resource and scope) exports its
    spans in the order they ended, up to `batch` a request, so a request's spans are split over exports and mixed
    with those of the requests that overlapped it; the exports in the order they were sent."""
    groups: dict[str, tuple[dict, dict, list[dict]]] = {}
    for d in docs:
        for rs in d["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                key = json.dumps([rs["resource"], ss["scope"]], sort_keys=True)
                groups.setdefault(key, (rs["resource"], ss["scope"], []))[2].extend(ss["spans"])
    out = []
    for resource, scope, spans in groups.values():
        spans.sort(key=lambda s: int(s["endTimeUnixNano"]))
        for i in range(0, len(spans), batch):
            part = spans[i : i + batch]
            out.append(
                (
                    int(part[-1]["endTimeUnixNano"]),
                    {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": scope, "spans": part}]}]},
                )
            )
    return [d for _, d in sorted(out, key=lambda x: x[0])]
