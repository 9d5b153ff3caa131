"""Which adapter claims a span, decided by what the span is (its name), never by a flag the user passes.

Third-party span names that are too generic to claim alone (TGI's `generate`, `queued`, `infer`; Triton's
`compute`) are claimed only under the service or scope those servers export with.
"""

from __future__ import annotations

NATIVE_ROOT = "llm.request"
NATIVE_STEP = "engine.step"
STAGE_PREFIX = "stage."
CLIENT_ROOT = "llm.client.request"
HTTP_METHOD_KEYS = ("http.request.method", "http.method")
"""The request method of an OpenTelemetry HTTP client span: the stable HTTP semantic conventions' key, and the
one instrumentations still write by default (opentelemetry-python-contrib `_semconv.py`, `_set_http_method`)."""
HTTP_CLIENT_SQL = (
    "(kind = 'CLIENT' AND (" + " OR ".join(f"json_exists(attributes, '$.\"{k}\"')" for k in HTTP_METHOD_KEYS) + "))"
)
"""SQL over a stored span (`kind` normalised): an OpenTelemetry HTTP client span (httpx, requests, aiohttp, …).
It is a request's client span only when it is the parent of a server root (derive/requests.py)."""
VLLM_ROOT = "llm_request"
VLLM_CORE = "llm_core"
"""vLLM journey tracing's engine-core span, child of `llm_request`: its span events hold the request's timings."""
NATIVE_SCOPE = "budgetscope"

# budgetscope's request spans are named `{gen_ai.operation.name} {gen_ai.request.model}` (the GenAI conventions),
# a name no constant can match: they are known by budgetscope's instrumentation scope and an attribute only that
# span carries. The names before, `llm.request` and `llm.client.request`, are still read.
NATIVE_ROOT_SQL = (
    f"""(name = '{NATIVE_ROOT}' OR (scope_name = '{NATIVE_SCOPE}' """
    """AND json_exists(attributes, '$."budgetscope.outcome"')))"""
)
"""SQL: a span (columns name, scope_name, attributes) is the server root of budgetscope's span contract."""
CLIENT_ROOT_SQL = (
    f"""(name = '{CLIENT_ROOT}' OR (scope_name = '{NATIVE_SCOPE}' """
    """AND json_exists(attributes, '$."budgetscope.client.scheduled_unix_nano"')))"""
)
"""SQL: a span is a client request span (budgetscope's client, or an imported tool's record)."""

TGI_SERVICE_PREFIX = "text-generation-inference"
"""TGI's default `--otlp-service-name` is `text-generation-inference.router` (launcher/src/main.rs)."""
TGI_ROOTS = ("generate", "generate_stream", "completions", "chat_completions")
TGI_STREAM_WRAPPER = "async_stream"
"""The span router/src/server.rs puts between a streamed handler and `Infer::generate_stream` (same name)."""
TGI_SPANS = (
    *TGI_ROOTS,
    TGI_STREAM_WRAPPER,
    "validate",
    "validate_input",
    "tokenize",
    "schedule",
    "append",
    "queued",
    "infer",
    "waiting",
    "send_generation",
    "send_error",
    "batch",
    "prefill",
    "decode",
    "filter_batch",
    "filter_send_generations",
    "next_batch",
    "clear_cache",
)
"""The spans TGI's router (text-generation-inference db931fc) creates for a request and its batches."""
SGLANG_ROOT_SQL = "regexp_matches(name, '^(| |prefill |decode |router )Req ') AND json_exists(attributes, '$.rid')"
"""SQL over a span: an SGLang request root, named `f"{role} Req {rid[:8]}"` with attribute `rid`
(python/sglang/srt/observability/trace.py): role `""` on a single server (the name begins with a space),
`prefill` / `decode` under PD disaggregation; the first tracing version wrote `Req <rid>`."""
SGLANG_SLICES = (
    "tokenize",
    "dispatch",
    "api_server_dispatch",
    "dc_dispatch",
    "dpc_dispatch",
    "request_process",
    "prefill_waiting",
    "prefill_forward",
    "chunked_prefill",
    "decode_waiting",
    "decode_loop",
    "decode_forward",
    "prefill_prepare",
    "prefill_bootstrap",
    "prefill_transfer_kv_cache",
    "decode_prepare",
    "decode_bootstrap",
    "decode_transferred",
    "fake_output",
    "quick_finish",
)
"""SGLang's `RequestStage` slice names, old and new (python/sglang/srt/observability/req_time_stats.py)."""
SGLANG_SCOPED = "(starts_with(coalesce(service_name, ''), 'sglang') OR starts_with(coalesce(scope_name, ''), 'sglang'))"
"""SQL: the span was exported under SGLang's service (`sglang`) or tracer (`sglang server`)."""
TRITON_SCOPES = ("triton-server", "triton-trace-file")
"""Triton's tracer (`kTritonTracer`, triton-inference-server/server src/tracer.h) and the scope of the spans
`budgetscope import --from triton` writes."""
TRITON_SQL = (
    f"(scope_name IN {TRITON_SCOPES!r} OR name = 'InferRequest' OR json_exists(attributes, '$.\"triton.model_name\"'))"
)
"""SQL over a span: Triton's, by its tracer, its root span's name or a model span's attribute, never by the service
name (`--trace-config opentelemetry,resource=service.name=…` sets any)."""

SOURCE_SQL = f"""CASE
  WHEN name = '{NATIVE_STEP}' OR starts_with(name, '{STAGE_PREFIX}') OR {NATIVE_ROOT_SQL} THEN 'native'
  WHEN {CLIENT_ROOT_SQL} THEN 'client'
  WHEN {HTTP_CLIENT_SQL.replace("kind = ", "bs_kind(kind) = ")} THEN 'client'
  WHEN name IN ('{VLLM_ROOT}', '{VLLM_CORE}') THEN 'vllm'
  WHEN starts_with(coalesce(service_name, ''), '{TGI_SERVICE_PREFIX}')
    AND (name IN {TGI_SPANS!r} OR json_exists(attributes, '$."http.route"')) THEN 'tgi'
  WHEN ({SGLANG_ROOT_SQL})
    OR ((name IN {SGLANG_SLICES!r} OR json_exists(attributes, '$.thread_label')) AND {SGLANG_SCOPED})
    THEN 'sglang'
  WHEN {TRITON_SQL} THEN 'triton'
  ELSE 'other' END"""
"""SQL expression over the `name`, `kind` (raw or normalised: `bs_kind` of ingest/staging.py reads both),
`service_name`, `scope_name` and `attributes` columns of a span: native, client, vllm, tgi, sglang, triton or
other. An OpenTelemetry HTTP client span is `client` whether or not a server span joins it."""
