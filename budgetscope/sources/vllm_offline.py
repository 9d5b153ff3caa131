"""vLLM offline `RequestOutput.metrics`, dumped one request a line → vLLM `llm_request` spans (derive/vllm.py).

`LLM(..., disable_log_stats=False).generate(...)` fills `RequestOutput.metrics` (None otherwise). The kit's
snippet (instrumentation/vllm/README.md) writes one JSON object a line: `request_id`, `model`, `prompt_tokens`,
`output_tokens`, `cached_tokens` (`num_cached_tokens`), `finish_reason`, and `metrics` =
`dataclasses.asdict(output.metrics)`, which is one of:

  V1 `RequestStateStats` (vllm/v1/metrics/stats.py, vllm-project/vllm at 28ed1fb87ed5686e1d4d0cf4134b8e05d8a25a8a;
     set as `metrics=self.stats` in vllm/v1/engine/output_processor.py at d07822605346f767b672503c9aae85aa23ef2d82):
     `arrival_time` (frontend wall clock, s), `queued_ts`, `scheduled_ts`, `first_token_ts`, `last_token_ts`
     (engine-core monotonic clock, s; 0.0 = never happened), `first_token_latency` (s from arrival),
     `num_generation_tokens`, `is_corrupted`.
  V0 `RequestMetrics` (vllm/sequence.py at 3e061107fac6ea02f8bab0253ee0541174423a9b): `arrival_time`,
     `last_token_time`, `first_scheduled_time`, `first_token_time`, `time_in_queue`, `finished_time` (wall clock, s),
     `scheduler_time`, `model_forward_time`, `model_execute_time`.

Each line becomes the `llm_request` span vLLM's own tracing would have sent, with the `gen_ai.latency.*`
attributes computed as `OutputProcessor.do_tracing` computes them (V1): time_in_queue = scheduled_ts − queued_ts,
time_in_model_prefill = first_token_ts − scheduled_ts, time_in_model_decode = last_token_ts − first_token_ts,
time_to_first_token = first_token_latency. V1 keeps no finish time, so `gen_ai.latency.e2e` is left out (E2E
and postprocess are unknown) and the span ends at the last token (arrival + TTFT + decode). V0: time_in_queue,
TTFT = first_token_time − arrival, prefill = first_token_time − first_scheduled_time, decode = last_token_time −
first_token_time, E2E = finished_time − arrival. A figure whose timestamps are missing (0.0 / null) is left out.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from budgetscope.derive.classify import VLLM_ROOT
from budgetscope.sources.importers import (
    KIND_SERVER,
    ImportFormatError,
    document,
    json_lines,
    number,
    seconds_to_ns,
    span,
    span_ids,
)

V1_FIELDS = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts", "first_token_latency")
V0_FIELDS = ("first_scheduled_time", "first_token_time", "time_in_queue", "finished_time", "last_token_time")
SERVICE_NAME = "vllm-offline"
L = "gen_ai.latency."


def vllm_metrics(path: Path, data: bytes) -> bytes:
    """JSON lines of `RequestOutput.metrics` → an OTLP/JSON document of `llm_request` spans.

    Raises ImportFormatError naming the line and the first problem."""
    seed = hashlib.blake2b(data, digest_size=16).digest()
    spans = []
    for n, where, rec in json_lines(path, data):
        if not isinstance(rec, dict) or "metrics" not in rec:
            raise ImportFormatError(f"{where}: not a vLLM request record (want an object with `metrics`)")
        spans.append(_request_span(seed, n, rec, where))
    if not spans:
        raise ImportFormatError(f"{path}: no vLLM request records")
    return document(SERVICE_NAME, spans, scope="vllm.request_metrics")


def _request_span(seed: bytes, n: int, rec: dict, where: str) -> dict:
    m = rec["metrics"]
    if m is None:
        raise ImportFormatError(f"{where}: `metrics` is null: build the LLM with disable_log_stats=False")
    if not isinstance(m, dict):
        raise ImportFormatError(f"{where}: `metrics` is not an object")
    if m.get("arrival_time") is None:
        raise ImportFormatError(f"{where}: metrics has no arrival_time")
    arrival = number(m["arrival_time"], f"{where} metrics.arrival_time")

    def t(name: str) -> float | None:
        """A timestamp or duration field; 0.0 and null mean it never happened."""
        v = m.get(name)
        return None if v is None or (v == 0 and name != "time_in_queue") else number(v, f"{where} metrics.{name}")

    if any(k in m for k in V1_FIELDS):
        latency, end = _v1(t), None
        generated = m.get("num_generation_tokens")
    elif any(k in m for k in V0_FIELDS):
        latency, end, generated = _v0(t, arrival), t("finished_time"), None
    else:
        raise ImportFormatError(
            f"{where}: metrics has neither vLLM V1 (`queued_ts`, `scheduled_ts`, …) nor V0 "
            "(`first_scheduled_time`, `finished_time`, …) fields"
        )
    if end is None:  # V1, or V0 unfinished: the last token is the last thing known
        end = arrival + (latency.get("time_to_first_token") or 0.0) + (latency.get("time_in_model_decode") or 0.0)
    output_tokens = rec.get("output_tokens", generated)
    finish = rec.get("finish_reason")
    attrs = {
        "gen_ai.request.id": None if rec.get("request_id") is None else str(rec["request_id"]),
        "gen_ai.response.model": rec.get("model") if isinstance(rec.get("model"), str) else None,
        "gen_ai.usage.prompt_tokens": _count(rec.get("prompt_tokens"), f"{where} prompt_tokens"),
        "gen_ai.usage.completion_tokens": _count(output_tokens, f"{where} output_tokens"),
        "gen_ai.usage.cache_read.input_tokens": _count(rec.get("cached_tokens"), f"{where} cached_tokens"),
        **{L + k: v for k, v in latency.items()},
        "vllm.finish_reason": None if finish is None else str(finish),
        **{f"vllm.metrics.{k}": v for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
    }
    trace_id, span_id = span_ids(seed, n)
    return span(
        trace_id,
        span_id,
        VLLM_ROOT,
        KIND_SERVER,
        seconds_to_ns(arrival),
        seconds_to_ns(end),
        attrs,
        error="abort" if finish == "abort" else None,
    )


def _v1(t) -> dict[str, float]:
    """`gen_ai.latency.*` (s) from V1 `RequestStateStats`, as vLLM's do_tracing computes them (no e2e: not kept)."""
    queued, scheduled, first, last = t("queued_ts"), t("scheduled_ts"), t("first_token_ts"), t("last_token_ts")
    out = {
        "time_to_first_token": t("first_token_latency") if first is not None else None,
        "time_in_queue": _diff(scheduled, queued),
        "time_in_model_prefill": _diff(first, scheduled),
        "time_in_model_decode": _diff(last, first),
    }
    return {k: v for k, v in out.items() if v is not None}


def _v0(t, arrival: float) -> dict[str, float]:
    """`gen_ai.latency.*` (s) from V0 `RequestMetrics` (every field a wall-clock time.time())."""
    scheduled, first, last, finished = (
        t("first_scheduled_time"),
        t("first_token_time"),
        t("last_token_time"),
        t("finished_time"),
    )
    queue = t("time_in_queue")
    out = {
        "time_to_first_token": _diff(first, arrival),
        "time_in_queue": queue if queue is not None else _diff(scheduled, arrival),
        "time_in_model_prefill": _diff(first, scheduled),
        "time_in_model_decode": _diff(last, first),
        "e2e": _diff(finished, arrival),
    }
    return {k: v for k, v in out.items() if v is not None}


def _diff(b: float | None, a: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _count(x: Any, where: str) -> int | None:
    return None if x is None else int(number(x, where))
