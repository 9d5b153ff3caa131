"""GuideLLM benchmark report (`benchmarks.json`) → one `llm.client.request` span per request it kept.

Wire format: the `GenerativeBenchmarksReport` GuideLLM saves with `model_dump(mode="json")`
(src/guidellm/benchmark/schemas/report.py): `{"metadata": {"version", "guidellm_version", …}, "config": …,
"benchmarks": [GenerativeBenchmark, …]}`. Each benchmark (src/guidellm/benchmark/schemas/benchmark.py) has
`config` (`id_`, `run_id`, `strategy.type_`, `backend.model`, …) and `requests` = `{"successful": [...],
"incomplete": [...], "errored": [...]}` of `GenerativeRequestStats` (src/guidellm/schemas/request_stats.py):
`request_id`, `response_id`, `info` (`RequestInfo`, src/guidellm/schemas/info.py: `status`, `error`, `timings`),
`input_metrics` / `output_metrics` (`UsageMetrics`), and the computed fields `prompt_tokens`, `output_tokens`,
`cached_tokens`, `time_to_first_token_ms`, `inter_token_latency_ms`, … . `info.timings` (`RequestTimings`) are
wall-clock seconds (`time.time()` in the client): `targeted_start`, `request_start`, `first_token_iteration`,
`last_token_iteration`, `request_end`, `resolve_start` / `resolve_end` (the worker's bounds, used when the HTTP
ones are missing). vllm-project/guidellm at ee7a77457ba668b4b5ccb40f110518829893b36a (v0.7.3+); the per-request
layout is the same since GuideLLM 0.4 (report schema version absent, 1 or 2).

Mapping: sent = `request_start`, end = `request_end`, first token = `first_token_iteration` (the first chunk with
non-empty text, GuideLLM's TTFT; its first event of any kind, `first_request_iteration`, is kept as
`budgetscope.client.first_event_unix_nano`), last token = `last_token_iteration` (`requests.client_last_token_ns`), scheduled =
`targeted_start` (so `schedule_lag_ms` is GuideLLM's own start delay); `successful` → ok, `errored` → error
(`info.error`), `incomplete` (cancelled in flight at the end of a benchmark) → cancelled. GuideLLM keeps no
per-token gaps: `client_itl_ms` is NULL, its mean `inter_token_latency_ms` stays on the span as
`guidellm.inter_token_latency_ms`. `response_id` (the server's response id) joins the record to the server's
row of the same request (sources/joins.py); without one, server stages and network are unknown.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from budgetscope.derive.client import ID_ATTR, LAST_TOKEN
from budgetscope.sources.importers import (
    FIRST_EVENT,
    FIRST_TOKEN_DEFINITION,
    NONEMPTY_CHUNK,
    ImportFormatError,
    client_span,
    document,
    load_json,
    number,
    seconds_to_ns,
)

REPORT_VERSIONS = (1, 2)
"""`metadata.version` values read (absent in GuideLLM 0.4, 1 in 0.5–0.6, 2 from 0.7)."""
STATUSES = {"successful": None, "incomplete": "cancelled", "errored": "error"}
"""Status group of `requests` → the span's `error.type` (None: ok)."""


def guidellm(path: Path, data: bytes) -> bytes:
    """A GuideLLM `benchmarks.json` → an OTLP/JSON document of client spans (raises ImportFormatError)."""
    if path.suffix.lower() in (".yaml", ".yml"):
        raise ImportFormatError(
            f"{path}: a GuideLLM YAML report is not read; write its JSON with "
            f"`guidellm export {path.name} --output json`"
        )
    obj = load_json(path, data)
    if not isinstance(obj, dict) or not isinstance(obj.get("benchmarks"), list):
        raise ImportFormatError(f"{path}: not a GuideLLM report (want a JSON object with a `benchmarks` list)")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    version = meta.get("version")
    if version is not None and version not in REPORT_VERSIONS:
        raise ImportFormatError(
            f"{path}: GuideLLM report schema version {version} (guidellm "
            f"{meta.get('guidellm_version', '?')}) is not read; this reads versions 1–2 and "
            "unversioned 0.4 reports"
        )
    seed = hashlib.blake2b(data, digest_size=16).digest()
    spans: list[dict] = []
    for b, bench in enumerate(obj["benchmarks"]):
        where = f"{path}: benchmarks[{b}]"
        groups = bench.get("requests") if isinstance(bench, dict) else None
        if not isinstance(groups, dict):
            raise ImportFormatError(f"{where}: no `requests` object (successful, incomplete, errored)")
        context = _benchmark_attributes(bench, b)
        for status, error_type in STATUSES.items():
            records = groups.get(status) or []
            if not isinstance(records, list):
                raise ImportFormatError(f"{where}.requests.{status}: expected a list")
            for i, rec in enumerate(records):
                spans.append(
                    _request_span(seed, len(spans), rec, f"{where}.requests.{status}[{i}]", status, error_type, context)
                )
    if not spans:
        raise ImportFormatError(f"{path}: the report holds no requests")
    return document("guidellm", spans)


def _benchmark_attributes(bench: dict, index: int) -> dict[str, Any]:
    config = bench.get("config") if isinstance(bench.get("config"), dict) else {}
    backend = config.get("backend") if isinstance(config.get("backend"), dict) else {}
    strategy = config.get("strategy") if isinstance(config.get("strategy"), dict) else {}
    model = backend.get("model")
    return {
        "gen_ai.request.model": model if isinstance(model, str) and model else None,
        "guidellm.benchmark_index": index,
        "guidellm.benchmark_id": _text(config.get("id_")),
        "guidellm.run_id": _text(config.get("run_id")),
        "guidellm.strategy": _text(strategy.get("type_")),
    }


def _text(x: Any) -> str | None:
    return x if isinstance(x, str) else None


def _request_span(
    seed: bytes, k: int, rec: Any, where: str, status: str, error_type: str | None, context: dict[str, Any]
) -> dict:
    info = rec.get("info") if isinstance(rec, dict) else None
    timings = info.get("timings") if isinstance(info, dict) else None
    if not isinstance(timings, dict):
        kind = rec.get("type_") if isinstance(rec, dict) else None
        if isinstance(kind, str) and kind.startswith("generative_text_"):
            raise ImportFormatError(
                f"{where}: a GuideLLM 0.2/0.3 report (`{kind}` records) is not read; "
                "re-run the benchmark with GuideLLM 0.4 or later"
            )
        raise ImportFormatError(f"{where}: not a GuideLLM request record (want `info.timings`)")

    def at(*names: str) -> int | None:
        for name in names:
            if timings.get(name) is not None:
                return seconds_to_ns(number(timings[name], f"{where} info.timings.{name}"))
        return None

    sent, end = at("request_start", "resolve_start"), at("request_end", "resolve_end")
    for value, bound in ((sent, "start"), (end, "end")):
        if value is None:
            raise ImportFormatError(f"{where}: info.timings has neither request_{bound} nor resolve_{bound}")
    error = None
    if error_type is not None:
        error = str(info.get("error") or ("cancelled" if error_type == "cancelled" else "error"))
    itl = rec.get("inter_token_latency_ms")
    return client_span(
        seed,
        k,
        sent_ns=sent,
        end_ns=end,
        first_token_ns=at("first_token_iteration"),
        itl_ms=None,
        input_tokens=_tokens(rec, "prompt_tokens", "input_metrics", where),
        output_tokens=_tokens(rec, "output_tokens", "output_metrics", where),
        cached_tokens=_count(rec.get("cached_tokens"), f"{where} cached_tokens"),
        model=context["gen_ai.request.model"],
        error=error,
        error_type=error_type or "error",
        scheduled_ns=at("targeted_start"),
        extra={name: v for name, v in context.items() if name != "gen_ai.request.model"}
        | {
            "guidellm.request_id": _text(rec.get("request_id")),
            "guidellm.response_id": _text(rec.get("response_id")),
            ID_ATTR: _text(rec.get("response_id")),
            FIRST_TOKEN_DEFINITION: NONEMPTY_CHUNK,
            FIRST_EVENT: at("first_request_iteration"),
            "guidellm.status": status,
            "guidellm.error": error,
            "guidellm.inter_token_latency_ms": None if itl is None else number(itl, f"{where} inter_token_latency_ms"),
            LAST_TOKEN: at("last_token_iteration"),
        },
    )


def _tokens(rec: dict, computed: str, usage: str, where: str) -> int | None:
    """A token count: the computed field, else the usage object's `total_tokens` / `text_tokens`."""
    if rec.get(computed) is not None:
        return _count(rec[computed], f"{where} {computed}")
    metrics = rec.get(usage) if isinstance(rec.get(usage), dict) else {}
    for key in ("total_tokens", "text_tokens"):
        if metrics.get(key) is not None:
            return _count(metrics[key], f"{where} {usage}.{key}")
    return None


def _count(x: Any, where: str) -> int | None:
    return None if x is None else int(number(x, where))
