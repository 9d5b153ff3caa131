"""Synthetic OTLP traces in the native span contract, for benchmarks, tests and the offline demo.

Every span carries the resource attribute `budgetscope.synthetic=true` and the service names
`synthetic-engine` / `synthetic-loadgen`, so synthetic data is never mistaken for a measurement.
A fraction of requests (`tail_fraction`) gets extra time in one stage (`cause`), so the attribution
has a known right answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

CAUSES = ("queue", "prefill", "decode", "network", "frontend")

# Budgets for the tiers `interactive` and `batch` (SyntheticSpec(tiers=("interactive", "batch"))) that the
# synthetic data's body keeps and its tail breaks: the benchmarks' and the Spark tests' budgets.
BUDGETS = """
[tiers.interactive]
percentile = 99
ttft_ms = 800
tpot_ms = 50
e2e_ms = 12000
[tiers.interactive.stages]
network = 50
queue = 250
prefill = 470
[tiers.batch]
percentile = 95
ttft_ms = 5000
"""


@dataclass(slots=True)
class SyntheticSpec:
    num_requests: int = 2000
    cause: str = "queue"
    tail_fraction: float = 0.03
    tail_extra_ms: float = 900.0
    client_spans: bool = True
    tiers: tuple[str, ...] = ("interactive",)
    model: str = "synthetic-1b"
    rate_per_s: float = 50.0
    spans_per_line: int = 512
    seed: int = 7
    start_ns: int = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z

    def __post_init__(self) -> None:
        if self.cause not in CAUSES:
            raise ValueError(f"unknown cause {self.cause!r}; choose one of {', '.join(CAUSES)}")
        if self.cause == "network" and not self.client_spans:
            raise ValueError("cause 'network' needs client spans")


def _kv(key: str, value) -> str:
    if isinstance(value, bool):
        return f'{{"key":"{key}","value":{{"boolValue":{"true" if value else "false"}}}}}'
    if isinstance(value, int):
        return f'{{"key":"{key}","value":{{"intValue":"{value}"}}}}'
    if isinstance(value, float):
        return f'{{"key":"{key}","value":{{"doubleValue":{value}}}}}'
    if isinstance(value, list):
        vals = ",".join(f'{{"doubleValue":{v}}}' for v in value)
        return f'{{"key":"{key}","value":{{"arrayValue":{{"values":[{vals}]}}}}}}'
    return f'{{"key":"{key}","value":{{"stringValue":"{value}"}}}}'


def _span(tid: str, sid: str, parent: str, name: str, kind: int, start: int, end: int, attrs: dict) -> str:
    a = ",".join(_kv(k, v) for k, v in attrs.items())
    p = f',"parentSpanId":"{parent}"' if parent else ""
    return (
        f'{{"traceId":"{tid}","spanId":"{sid}"{p},"name":"{name}","kind":{kind},'
        f'"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":[{a}]}}'
    )


def _line(service: str, scope: str, spans: list[str]) -> str:
    res = ",".join((_kv("service.name", service), _kv("budgetscope.synthetic", True)))
    return (
        f'{{"resourceSpans":[{{"resource":{{"attributes":[{res}]}},'
        f'"scopeSpans":[{{"scope":{{"name":"{scope}"}},"spans":[{",".join(spans)}]}}]}}]}}'
    )


def _request_spans(rng: random.Random, spec: SyntheticSpec, i: int, arrival: int):
    """(server spans, client spans) of request i, as OTLP JSON strings."""
    ms = 1_000_000
    tid = f"{rng.getrandbits(128):032x}"
    ids = [f"{rng.getrandbits(64) | 1 << 63:016x}" for _ in range(7)]
    root, client = ids[0], ids[6]
    in_tail = rng.random() < spec.tail_fraction
    out_tokens = rng.randint(16, 256)
    tpot = rng.lognormvariate(3.0, 0.15)  # ~20 ms
    dur = {
        "frontend": rng.lognormvariate(1.0, 0.3),
        "queue": rng.lognormvariate(2.5, 0.6),
        "prefill": rng.lognormvariate(4.0, 0.3),
        "decode": tpot * (out_tokens - 1),
        "postprocess": rng.lognormvariate(0.5, 0.3),
    }
    up, down = rng.lognormvariate(1.5, 0.3), rng.lognormvariate(1.0, 0.3)
    if in_tail:
        if spec.cause == "network":
            up += spec.tail_extra_ms
        else:
            dur[spec.cause] += spec.tail_extra_ms
    tier = spec.tiers[i % len(spec.tiers)]
    t = arrival
    spans = []
    first_token = None
    for k, stage in enumerate(("frontend", "queue", "prefill", "decode", "postprocess"), start=1):
        end = t + int(dur[stage] * ms)
        attrs = {"budgetscope.stage": stage}
        if stage == "decode":
            attrs["budgetscope.decode.steps"] = out_tokens - 1
        if stage == "prefill":
            first_token = end
        spans.append(_span(tid, ids[k], root, f"stage.{stage}", 1, t, end, attrs))
        t = end
    end = t
    root_attrs = {
        "gen_ai.operation.name": "text_completion",
        "gen_ai.request.model": spec.model,
        "gen_ai.response.id": f"cmpl-{i}",
        "gen_ai.usage.input_tokens": rng.randint(32, 2048),
        "gen_ai.usage.output_tokens": out_tokens,
        "gen_ai.usage.cache_read.input_tokens": 0,
        "budgetscope.tier": tier,
        "budgetscope.tenant": f"tenant-{i % 3}",
        "budgetscope.outcome": "ok",
    }
    spans.insert(0, _span(tid, root, client if spec.client_spans else "", "llm.request", 2, arrival, end, root_attrs))
    if not spec.client_spans:
        return spans, []
    sent = arrival - int(up * ms)
    c_attrs = {
        "budgetscope.client.scheduled_unix_nano": sent - int(rng.random() * 200_000),
        "budgetscope.client.first_token_unix_nano": first_token + int(down * ms),
        "http.response.status_code": 200,
        "gen_ai.usage.output_tokens": out_tokens,
        "budgetscope.tier": tier,
    }
    return spans, [_span(tid, client, "", "llm.client.request", 3, sent, end + int(down * ms), c_attrs)]


def write_jsonl(path: str | Path, spec: SyntheticSpec) -> int:
    """Write `spec` as OTLP JSON lines (Collector file-exporter layout) to `path`; return the span count."""
    rng = random.Random(spec.seed)
    server: list[str] = []
    client: list[str] = []
    count = 0
    t = spec.start_ns
    with open(path, "w", encoding="utf-8") as f:
        for i in range(spec.num_requests):
            t += int(rng.expovariate(spec.rate_per_s) * 1e9)
            s, c = _request_spans(rng, spec, i, t)
            server += s
            client += c
            count += len(s) + len(c)
            if len(server) >= spec.spans_per_line:
                f.write(_line("synthetic-engine", "budgetscope", server) + "\n")
                server = []
            if len(client) >= spec.spans_per_line:
                f.write(_line("synthetic-loadgen", "budgetscope", client) + "\n")
                client = []
        for svc, rest in (("synthetic-engine", server), ("synthetic-loadgen", client)):
            if rest:
                f.write(_line(svc, "budgetscope", rest) + "\n")
    return count
