"""Files that are not OTLP → OTLP/JSON documents of spans, which then land through the ordinary ingest path.

Each importer reads one file and returns one OTLP/JSON `ExportTraceServiceRequest` (one batch: the file lands
whole or not at all, and the same file lands once). Span and trace ids are derived from the file's bytes and
the record's position, so importing a file twice gives the same spans. Bad input raises `ImportFormatError`
naming the file and the line (or record) and the first problem.

  vllm-bench  `vllm bench serve --save-result --save-detailed` JSON (vllm/benchmarks/serve.py): client data,
              one `llm.client.request` span per request.
  aiperf      AIPerf `profile_export.jsonl` (one record a line: `metadata`, `metrics`, `error`): client data.
  triton      Triton trace file (`--trace-config mode=triton,file=...`): one span `InferRequest` per traced
              request with Triton's timestamps as `triton.timestamp.<NAME>` attributes (derive/triton.py).
  guidellm    GuideLLM `benchmarks.json`: client data (sources/guidellm.py).
  vllm-metrics  vLLM offline `RequestOutput.metrics` as JSON lines: vLLM `llm_request` spans
              (sources/vllm_offline.py).
The helpers here (`span`, `document`, `client_span`, `span_ids`, `number`, …) serve those modules too.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from budgetscope.derive.classify import CLIENT_ROOT, TRITON_FILE_SCOPE
from budgetscope.derive.client import (
    FIRST_EVENT,
    FIRST_TOKEN_DEFINITION,
    ID_ATTR,
    LAST_TOKEN,
    NONEMPTY_CHUNK,
    TOKEN_EVENT,
)
from budgetscope.derive.triton import TRITON_RESPONSE, TRITON_ROOT, TRITON_TS_PREFIX

FORMATS = ("vllm-bench", "aiperf", "guidellm", "vllm-metrics", "triton")
KIND_SERVER, KIND_CLIENT = 2, 3


class ImportFormatError(ValueError):
    """Bad input, in one line naming the file and where."""


def _value(v: Any) -> dict:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": str(v)}


def span_ids(seed: bytes, index: int) -> tuple[str, str]:
    """(trace id, span id) of record `index` of the file whose bytes hash to `seed`: the same file, the same ids."""
    h = hashlib.blake2b(seed + index.to_bytes(8, "big"), digest_size=24).hexdigest()
    return h[:32], h[32:48]


def span(
    trace_id: str,
    span_id: str,
    name: str,
    kind: int,
    start_ns: int,
    end_ns: int,
    attributes: dict[str, Any],
    parent_span_id: str | None = None,
    error: str | None = None,
) -> dict:
    """One OTLP/JSON span (attributes with a None value are left out)."""
    s = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": str(max(end_ns, start_ns)),
        "attributes": [{"key": k, "value": _value(v)} for k, v in attributes.items() if v is not None],
    }
    if parent_span_id:
        s["parentSpanId"] = parent_span_id
    if error:
        s["status"] = {"code": 2, "message": error}
    return s


def document(service_name: str, spans: list[dict], scope: str = "budgetscope.import") -> bytes:
    """An OTLP/JSON ExportTraceServiceRequest holding `spans` under one resource."""
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service_name}}]},
                "scopeSpans": [{"scope": {"name": scope}, "spans": spans}],
            }
        ]
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def seconds_to_ns(seconds: float) -> int:
    """Seconds (a float, e.g. from time.time()) → integer ns."""
    return int(round(seconds * 1e9))


def number(x: Any, where: str) -> float:
    """`x` as a finite float, else ImportFormatError naming `where`."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise ImportFormatError(f"{where}: expected a number, got {json.dumps(x)[:40]}")
    return float(x)


def integer(x: Any, where: str) -> int:
    """`x` as an int, exactly (ns since the epoch do not fit a float), else ImportFormatError naming `where`."""
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    return int(number(x, where))


def load_json(path: Path, data: bytes) -> Any:
    """The JSON document `data` read from `path`, else ImportFormatError naming the line."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as e:
        raise ImportFormatError(f"{path}: line {e.lineno}: not JSON ({e.msg})") from None
    except UnicodeDecodeError:
        raise ImportFormatError(f"{path}: not UTF-8 text") from None


def json_lines(path: Path, data: bytes) -> Iterator[tuple[int, str, Any]]:
    """(line number, "PATH: line N", parsed value) for each non-blank line of a JSON lines file, else
    ImportFormatError naming the line."""
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}: line {n}"
        try:
            yield n, where, json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ImportFormatError(f"{where}: not JSON ({getattr(e, 'msg', e)})") from None


def client_span(
    seed: bytes,
    i: int,
    *,
    sent_ns: int,
    end_ns: int,
    first_token_ns: int | None,
    itl_ms: list[float] | None,
    input_tokens,
    output_tokens,
    model,
    error: str | None,
    extra: dict,
    error_type: str = "error",
    status_code: int | None = None,
    scheduled_ns: int | None = None,
    cached_tokens: int | None = None,
) -> dict:
    """One `llm.client.request` span (record `i` of the file hashed to `seed`); times in ns since the epoch.

    `error` (a message) marks it failed: `error_type` is `error`, `cancelled` or `timeout` (derive/client.py maps
    it to the outcome); `status_code` defaults to 200 without an error."""
    trace_id, span_id = span_ids(seed, i)
    attrs = {
        "budgetscope.client.first_token_unix_nano": first_token_ns,
        "budgetscope.client.scheduled_unix_nano": scheduled_ns,
        "budgetscope.client.itl_ms": [float(x) for x in itl_ms] if itl_ms is not None else None,
        "http.response.status_code": status_code if status_code is not None or error else 200,
        "error.type": error_type if error else None,
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.usage.cache_read.input_tokens": cached_tokens,
        "gen_ai.request.model": model,
        "budgetscope.tier": "default",
        **extra,
    }
    return span(trace_id, span_id, CLIENT_ROOT, KIND_CLIENT, sent_ns, end_ns, attrs, error=error)


# -- vllm bench serve ---------------------------------------------------------------------------------------------
def vllm_bench(path: Path, data: bytes, start_ns: int | None = None) -> bytes:
    """`vllm bench serve --save-detailed` result → client spans.

    Per request i: `start_times[i]` (time.perf_counter() seconds), `ttfts[i]` (s), `itls[i]` (s, list),
    `input_lens[i]`, `output_lens[i]`, `errors[i]` ("" when it succeeded), and `e2els[i]` / `latencies[i]` (s)
    when the version writes them, else E2E = TTFT + Σ ITL (the last gap ends at the last token). perf_counter
    has no epoch: the run is anchored at `start_ns`, else at the file's `date` (`%Y%m%d-%H%M%S`, read as UTC).
    """
    obj = load_json(path, data)
    if not isinstance(obj, dict):
        raise ImportFormatError(f"{path}: not a vllm bench result (want a JSON object)")
    need = ("start_times", "ttfts", "itls", "input_lens", "output_lens")
    missing = [k for k in need if not isinstance(obj.get(k), list)]
    if missing:
        raise ImportFormatError(
            f"{path}: no per-request {', '.join(missing)}: save it with "
            "`vllm bench serve --save-result --save-detailed`"
        )
    n = len(obj["start_times"])
    for k in need:
        if len(obj[k]) != n:
            raise ImportFormatError(f"{path}: {k} has {len(obj[k])} entries, start_times has {n}")
    if start_ns is None:
        try:
            start_ns = int(
                datetime.strptime(str(obj.get("date")), "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc).timestamp() * 1e9
            )
        except ValueError:
            raise ImportFormatError(f"{path}: no usable `date` field; give --start") from None
    latencies = obj.get("e2els") or obj.get("latencies")
    errors = obj.get("errors") or [""] * n
    t0 = min((number(t, f"{path}: start_times[{i}]") for i, t in enumerate(obj["start_times"])), default=0.0)
    seed = hashlib.blake2b(data, digest_size=16).digest()
    spans = []
    for i in range(n):
        where = f"{path}: request {i}"
        sent = start_ns + seconds_to_ns(number(obj["start_times"][i], where + " start_times") - t0)
        error = str(errors[i]) if i < len(errors) and errors[i] else None
        ttft = number(obj["ttfts"][i], where + " ttfts")
        itls = obj["itls"][i] or []
        if not isinstance(itls, list):
            raise ImportFormatError(f"{where} itls: expected a list")
        gaps = [number(x, where + " itls") for x in itls]
        if latencies and i < len(latencies) and latencies[i] is not None:
            e2e = number(latencies[i], where + " latency")
        else:
            e2e = ttft + sum(gaps)
        first = None if error or ttft <= 0 else sent + seconds_to_ns(ttft)
        spans.append(
            client_span(
                seed,
                i,
                sent_ns=sent,
                end_ns=sent + seconds_to_ns(e2e),
                first_token_ns=first,
                itl_ms=[g * 1e3 for g in gaps],
                input_tokens=int(number(obj["input_lens"][i], where + " input_lens")),
                output_tokens=int(number(obj["output_lens"][i], where + " output_lens")),
                model=obj.get("model_id"),
                error=error,
                extra={"vllm_bench.index": i, FIRST_TOKEN_DEFINITION: TOKEN_EVENT},
            )
        )
    return document("vllm-bench", spans)


# -- AIPerf ---------------------------------------------------------------------------------------------------
def _metric(metrics: dict, name: str, where: str) -> float | None:
    m = metrics.get(name)
    if m is None:
        return None
    value = m.get("value") if isinstance(m, dict) else m
    if isinstance(value, list):
        return None
    unit = m.get("unit", "ms") if isinstance(m, dict) else "ms"
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3, "tokens": 1.0}.get(unit, 1.0)
    return number(value, f"{where} {name}") * scale


def aiperf(path: Path, data: bytes) -> bytes:
    """AIPerf `profile_export.jsonl` → client spans (warm-up records are skipped).

    One `MetricRecordInfo` a line (aiperf/common/models/record_models.py, ai-dynamo/aiperf at
    db4f6397d11ee2d4cfbb41f70b2327315163dcf0; read as AIPerf 0.13.0 writes it): `metadata.request_start_ns` /
    `request_end_ns` (wall clock, ns), `x_request_id` (sent as `X-Request-ID`: the join key, sources/joins.py),
    `worker_id`, `benchmark_phase` (`warmup` | `profiling`), `was_cancelled`; `metrics.<tag>` = {value, unit} in
    display units; `error` = {code, type, message} (`ErrorDetails`). A cancelled request is `cancelled`, another
    error `error`. Mapping:
      TTFT            `time_to_first_token`: the first chunk with non-empty text (AIPerf's definition)
      end             `request_end_ns`: the last response of any kind (AIPerf 0.13's `_create_metric_record_metadata`,
                      aiperf/records/record_processor_service.py: `responses[-1].perf_ns`), the `[DONE]` of a stream:
                      the span's end, so `client_e2e_ms` runs to it
      last token      `request_latency` (aiperf/metrics/types/request_latency_metric.py: the last response with
                      content − the start, so before `[DONE]` and a usage-only chunk): kept as the last-token time
                      (`LAST_TOKEN`, `requests.client_last_token_ns`) and as `aiperf.request_latency_ms`
      tokens          `usage_prompt_tokens` / `usage_completion_tokens` (the server's counts), else AIPerf's own
                      tokenizer's `input_sequence_length` (`error_isl` on a failed request) /
                      `output_sequence_length`; cached: `usage_prompt_cache_read_tokens`
      gaps            `inter_chunk_latency` (a list: gaps between non-empty chunks, several tokens each) stays on
                      the span as `aiperf.inter_chunk_latency_ms`, and AIPerf's per-request mean
                      `inter_token_latency` ((E2E − TTFT) / (output − 1)) as `aiperf.inter_token_latency_ms`;
                      neither is a per-token gap, so `client_itl_ms` is NULL
      model           the one model of the run's `profile_export_aiperf.json` beside the file, when there
      first event     the first response in the run's raw export beside the file (`profile_export_raw.jsonl`,
                      `--export-level raw`), matched by `x_request_id`, when there; else unknown
    """
    seed = hashlib.blake2b(data, digest_size=16).digest()
    model = _aiperf_model(path)
    firsts = _aiperf_first_events(path)
    spans = []
    for n, where, rec in json_lines(path, data):
        meta, metrics = (rec.get("metadata"), rec.get("metrics")) if isinstance(rec, dict) else (None, None)
        if isinstance(meta, dict) and "responses" in rec and "start_perf_ns" in rec:
            raise ImportFormatError(
                f"{where}: AIPerf's raw export; import the profile_export.jsonl beside it, which reads it"
            )
        if not isinstance(meta, dict) or not isinstance(metrics, dict):
            raise ImportFormatError(f"{where}: not an AIPerf record (want metadata and metrics objects)")
        if meta.get("benchmark_phase") == "warmup":
            continue
        if "request_start_ns" not in meta:
            raise ImportFormatError(f"{where}: metadata has no request_start_ns")
        sent = integer(meta["request_start_ns"], where + " request_start_ns")
        latency = _metric(metrics, "request_latency", where)
        end = (
            integer(meta["request_end_ns"], where + " request_end_ns")
            if "request_end_ns" in meta
            else sent + int((latency or 0) * 1e6)
        )
        ttft = _metric(metrics, "time_to_first_token", where)
        err = rec.get("error")
        error = (err.get("message") or err.get("type") or "error") if isinstance(err, dict) else err
        code = err.get("code") if isinstance(err, dict) and isinstance(err.get("code"), int) else None
        if meta.get("was_cancelled"):
            error = error or "cancelled"
        spans.append(
            client_span(
                seed,
                n,
                sent_ns=sent,
                end_ns=end,
                first_token_ns=None if ttft is None else sent + int(ttft * 1e6),
                itl_ms=None,
                input_tokens=_count_of(metrics, where, "usage_prompt_tokens", "input_sequence_length", "error_isl"),
                output_tokens=_count_of(metrics, where, "usage_completion_tokens", "output_sequence_length"),
                cached_tokens=_count_of(metrics, where, "usage_prompt_cache_read_tokens"),
                model=model,
                error=str(error) if error else None,
                status_code=code,
                error_type="cancelled" if meta.get("was_cancelled") else "error",
                extra={
                    LAST_TOKEN: None if latency is None else sent + round(latency * 1e6),
                    "aiperf.request_latency_ms": latency,
                    "aiperf.x_request_id": meta.get("x_request_id"),
                    "aiperf.worker_id": meta.get("worker_id"),
                    ID_ATTR: meta.get("x_request_id"),
                    FIRST_TOKEN_DEFINITION: NONEMPTY_CHUNK,
                    FIRST_EVENT: (firsts or {}).get(meta.get("x_request_id")),
                    "aiperf.inter_chunk_latency_ms": _metric_list(metrics, "inter_chunk_latency", where),
                    "aiperf.inter_token_latency_ms": _metric(metrics, "inter_token_latency", where),
                },
            )
        )
    if not spans:
        raise ImportFormatError(f"{path}: no AIPerf profiling records")
    if firsts is not None and not any(a["key"] == FIRST_EVENT for s in spans for a in s["attributes"]):
        raise ImportFormatError(
            f"{path}: none of the {len(firsts):,} records of {raw_export_of(path).name} beside "
            "it matches one of its requests by x_request_id (another run's raw export?)"
        )
    return document("aiperf", spans)


def raw_export_of(path: Path) -> Path:
    """Where AIPerf writes the raw export of the records file `path` (`profile_export.jsonl` →
    `profile_export_raw.jsonl`, beside it)."""
    return path.with_name(path.name.removesuffix(".jsonl") + "_raw.jsonl")


def _aiperf_first_events(path: Path) -> dict[str, int] | None:
    """{x_request_id: the first response's wall-clock time, ns} from the raw export beside the records file
    `path` (None without one), read a line at a time: it holds every chunk of every request.

    One `RawRecordInfo` a line (aiperf/common/models/record_models.py and
    aiperf/post_processors/raw_record_writer_processor.py of aiperf 0.13.0): `metadata` as in the records,
    `start_perf_ns`, `responses[i].perf_ns` (perf_counter_ns). Records without a response are left out."""
    raw = raw_export_of(path)
    if not raw.is_file():
        return None
    firsts = {}
    with raw.open("rb") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                rid, first_ns = _aiperf_first_event(line, f"{path}: {raw.name} beside it, line {n}")
                if first_ns is not None:
                    firsts[rid] = first_ns
    return firsts


def _aiperf_first_event(line: bytes, where: str) -> tuple[Any, int | None]:
    """(x_request_id, the first response's wall-clock time in ns or None) of one raw record. `request_start_ns`
    is the wall clock at `start_perf_ns`; AIPerf converts a perf time the same way (`compute_time_ns` in
    aiperf/common/utils.py: start wall + perf − start perf)."""
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ImportFormatError(f"{where}: not JSON ({getattr(e, 'msg', e)})") from None
    meta = rec.get("metadata") if isinstance(rec, dict) else None
    if not isinstance(meta, dict) or not isinstance(rec.get("responses"), list):
        raise ImportFormatError(f"{where}: not an AIPerf raw record (want metadata and responses)")
    if not rec["responses"] or not isinstance(rec["responses"][0], dict):
        return meta.get("x_request_id"), None
    first_perf = integer(rec["responses"][0].get("perf_ns"), where + " responses[0].perf_ns")
    start_perf = integer(rec.get("start_perf_ns"), where + " start_perf_ns")
    start = integer(meta.get("request_start_ns"), where + " request_start_ns")
    return meta.get("x_request_id"), start + first_perf - start_perf


def _metric_list(metrics: dict, name: str, where: str) -> list[float] | None:
    """A list-valued AIPerf metric in ms (None when absent)."""
    m = metrics.get(name)
    values = m.get("value") if isinstance(m, dict) else None
    if not isinstance(values, list):
        return None
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}.get(m.get("unit", "ms"), 1.0)
    return [number(x, f"{where} {name}") * scale for x in values]


def _count_of(metrics: dict, where: str, *names: str) -> int | None:
    """The first of the token-count metrics `names` the record has."""
    for name in names:
        value = _metric(metrics, name, where)
        if value is not None:
            return int(value)
    return None


def _aiperf_model(path: Path) -> str | None:
    """The run's one model, from `profile_export_aiperf.json` beside the records (None without it, or with
    several models: a record does not say which it used)."""
    try:
        summary = json.loads((path.parent / "profile_export_aiperf.json").read_bytes())
        items = summary["input_config"]["models"]["items"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    names = [m.get("name") for m in items if isinstance(m, dict)] if isinstance(items, list) else []
    return names[0] if len(names) == 1 and isinstance(names[0], str) else None


# -- Triton trace file ----------------------------------------------------------------------------------------


def _triton_records(path: Path, obj: Any) -> dict[Any, dict]:
    """The trace file's objects merged by `id`: model fields and `timestamps` (name → list of ns, file order)."""
    traces: dict[Any, dict] = {}
    for i, rec in enumerate(obj):
        if not isinstance(rec, dict) or "id" not in rec:
            raise ImportFormatError(f"{path}: record {i}: want an object with an `id`")
        t = traces.setdefault(rec["id"], {"timestamps": {}})
        for k in ("model_name", "model_version", "request_id", "parent_id"):
            if k in rec:
                t[k] = rec[k]
        for j, ts in enumerate(rec.get("timestamps") or []):
            if not isinstance(ts, dict) or "name" not in ts or "ns" not in ts:
                raise ImportFormatError(f"{path}: record {i} timestamp {j}: want {{name, ns}}")
            ns = integer(ts["ns"], f"{path}: record {i} timestamp {j}")
            # chunked HTTP replies log HTTP_SEND_* as 0: evhtp does not time chunks (src/http_server.cc FIXME)
            if ns:
                t["timestamps"].setdefault(str(ts["name"]), []).append(ns)
    return traces


def triton(path: Path, data: bytes, clock_offset_ns: int | None = None) -> bytes:
    """Triton trace file (a JSON array of objects keyed by trace `id`) → one `InferRequest` span per trace.

    Objects with the same `id` are merged: `model_name`, `model_version`, `request_id`, `parent_id` and the
    `timestamps` list of `{"name": ..., "ns": ...}`; a name logged more than once keeps its last time, and
    INFER_RESPONSE_COMPLETE (one per response of a decoupled model) also gives `triton.responses` (how many) and
    `triton.first_response_ns`, and GRPC_SEND_END `triton.grpc_sends` (how many writes). A trace with a `parent_id` (a model run inside an ensemble) becomes a child span
    of its parent's, in the parent's trace. Triton's `ns` come from a steady (monotonic) clock: give
    `clock_offset_ns` (Unix ns − steady ns) to place them in time; without it, times that are not already
    Unix-epoch ns are anchored so the last timestamp falls at the file's modification time.
    """
    obj = load_json(path, data)
    if not isinstance(obj, list):
        raise ImportFormatError(f"{path}: not a Triton trace file (want a JSON array)")
    traces = {tid: t for tid, t in _triton_records(path, obj).items() if t["timestamps"]}
    all_ns = [ns for t in traces.values() for times in t["timestamps"].values() for ns in times]
    if not all_ns:
        raise ImportFormatError(f"{path}: no timestamps")
    if clock_offset_ns is None:
        clock_offset_ns = 0 if min(all_ns) > 10**18 else path.stat().st_mtime_ns - max(all_ns)
    seed = hashlib.blake2b(data, digest_size=16).digest()
    ids = {tid: span_ids(seed, k) for k, tid in enumerate(traces)}
    spans = []
    for tid, t in traces.items():
        times = {name: [ns + clock_offset_ns for ns in v] for name, v in t["timestamps"].items()}
        ts = {name: v[-1] for name, v in times.items()}
        start = ts.get("HTTP_RECV_START", ts.get("GRPC_WAITREAD_END", ts.get("REQUEST_START", min(ts.values()))))
        end = ts.get("HTTP_SEND_END", ts.get("GRPC_SEND_END", ts.get("REQUEST_END", max(ts.values()))))
        parent = ids.get(t.get("parent_id"))
        trace_id, span_id = (parent[0], ids[tid][1]) if parent else ids[tid]
        responses = times.get(TRITON_RESPONSE, [])
        attrs = {
            "triton.trace_id": str(tid),
            "triton.model_name": t.get("model_name"),
            "triton.model_version": None if t.get("model_version") is None else str(t["model_version"]),
            "triton.request_id": t.get("request_id"),
            "triton.parent_id": None if t.get("parent_id") is None else str(t["parent_id"]),
            "triton.responses": len(responses),
            "triton.first_response_ns": min(responses, default=None),
            # over a gRPC stream Triton stamps the first response only, and each write (derive/triton.py)
            "triton.grpc_sends": len(times.get("GRPC_SEND_END", [])),
            **{TRITON_TS_PREFIX + name: ns for name, ns in ts.items()},
        }
        spans.append(
            span(
                trace_id,
                span_id,
                TRITON_ROOT,
                KIND_SERVER,
                start,
                end,
                attrs,
                parent_span_id=parent[1] if parent else None,
            )
        )
    return document("triton-inference-server", spans, scope=TRITON_FILE_SCOPE)
