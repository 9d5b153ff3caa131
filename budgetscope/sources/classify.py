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
HTTP_CLIENT_SQL = ("(kind = 'CLIENT' AND (" +
                   " OR ".join(f"json_exists(attributes, '$.\"{k}\"')" for k in HTTP_METHOD_KEYS) + "))")
"""SQL over a stored span (`kind` normalised): an OpenTelemetry HTTP client span (httpx, requests, aiohttp, …).
It is a request's client span only when it is the parent of a server root (sources/requests.py)."""
VLLM_ROOT = "llm_request"

TGI_SERVICE_PREFIX = "text-generation-inference"
"""TGI's default `--otlp-service-name` is `text-generation-inference.router` (launcher/src/main.rs)."""
TGI_ROOTS = ("generate", "generate_stream", "completions", "chat_completions")
TGI_SPANS = (*TGI_ROOTS, "queued", "infer", "waiting", "send_generation", "batch", "prefill", "decode")
SGLANG_ROOT_PREFIX = "Req "
SGLANG_SLICES = (
    "tokenize", "dispatch", "api_server_dispatch", "dc_dispatch", "dpc_dispatch", "request_process",
    "prefill_waiting", "prefill_forward", "chunked_prefill", "decode_loop", "decode_forward",
)
TRITON_SERVICE_PREFIX = "triton"

SOURCE_SQL = f"""CASE
  WHEN name IN ('{NATIVE_ROOT}', '{NATIVE_STEP}') OR starts_with(name, '{STAGE_PREFIX}') THEN 'native'
  WHEN name = '{CLIENT_ROOT}' THEN 'client'
  WHEN {HTTP_CLIENT_SQL.replace("kind = ", "bs_kind(kind) = ")} THEN 'client'
  WHEN name = '{VLLM_ROOT}' THEN 'vllm'
  WHEN name IN {TGI_SPANS!r} AND starts_with(coalesce(service_name, ''), '{TGI_SERVICE_PREFIX}') THEN 'tgi'
  WHEN (starts_with(name, '{SGLANG_ROOT_PREFIX}') AND json_exists(attributes, '$.rid'))
    OR (name IN {SGLANG_SLICES!r} AND (starts_with(coalesce(service_name, ''), 'sglang') OR starts_with(coalesce(scope_name, ''), 'sglang')))
    THEN 'sglang'
  WHEN starts_with(lower(coalesce(service_name, '')), '{TRITON_SERVICE_PREFIX}') THEN 'triton'
  ELSE 'other' END"""
"""SQL expression over the `name`, `kind` (raw or normalised: `bs_kind` of ingest/staging.py reads both),
`service_name`, `scope_name` and `attributes` columns of a span: native, client, vllm, tgi, sglang, triton or
other. An OpenTelemetry HTTP client span is `client` whether or not a server span joins it."""
