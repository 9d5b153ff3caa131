"""Which adapter claims a span, decided by what the span is (its name), never by a flag the user passes.

Third-party span names that are too generic to claim alone (TGI's `generate`, `queued`, `infer`; Triton's
`compute`) are claimed only under the service or scope those servers export with.
"""

from __future__ import annotations


def mentions(key: str) -> str:
    """SQL over a span: its attributes' text holds `key` followed by a quote, as it does wherever the key is present
    (a stored span's attributes are JSON that ingest wrote: orjson, the C decoders, which spell a key of letters,
    digits, dots, dashes and underscores as it is, never escaped). A test that lets through every span holding
    the key, far cheaper than a parse. The key's closing quote, not its opening one: DuckDB's `contains` looks for
    the needle's first byte and compares from there, and a quote starts every string of the JSON (`"budgetscope.
    events"` took 0.28-0.40 CPU-s over 1M vLLM spans without it, `budgetscope.events"` 0.10-0.14)."""
    return f"contains(attributes, '{key}\"')"


def has_key(key: str) -> str:
    """SQL over a span: its attributes (JSON) hold the key `key` at the top. The substring test (`mentions`)
    first, then `json_exists` on the spans it leaves: most spans are told apart at a third of the parse's cost (a
    native derivation tests every stage span for a server root's and a client root's key). Exact."""
    return f"""({mentions(key)} AND json_exists(attributes, '$."{key}"'))"""


NATIVE_ROOT = "llm.request"
NATIVE_STEP = "engine.step"
STAGE_PREFIX = "stage."
CLIENT_ROOT = "llm.client.request"
HTTP_METHOD_KEYS = ("http.request.method", "http.method")
"""The request method of an OpenTelemetry HTTP client span: the stable HTTP semantic conventions' key, and the
one instrumentations still write by default (opentelemetry-python-contrib `_semconv.py`, `_set_http_method`)."""
HTTP_METHOD_SQL = "(" + " OR ".join(has_key(k) for k in HTTP_METHOD_KEYS) + ")"
HTTP_CLIENT_SQL = f"(kind = 'CLIENT' AND {HTTP_METHOD_SQL})"
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
    f"""(name = '{NATIVE_ROOT}' OR (scope_name = '{NATIVE_SCOPE}' AND {has_key("budgetscope.outcome")}))"""
)
"""SQL: a span (columns name, scope_name, attributes) is the server root of budgetscope's span contract."""
CLIENT_ROOT_SQL = (
    f"""(name = '{CLIENT_ROOT}' OR (scope_name = '{NATIVE_SCOPE}' """
    f"""AND {has_key("budgetscope.client.scheduled_unix_nano")}))"""
)
"""SQL: a span is a client request span (budgetscope's client, or an imported tool's record)."""
GENAI_OPERATION_SQL = has_key("gen_ai.operation.name")
GENAI_CLIENT_SQL = (
    f"(kind = 'CLIENT' AND {GENAI_OPERATION_SQL} AND NOT {HTTP_METHOD_SQL} AND NOT coalesce({CLIENT_ROOT_SQL}, false))"
)
"""SQL over a stored span (`kind` normalised): an OpenTelemetry GenAI client span (kind CLIENT with
`gen_ai.operation.name`: openai-v2's `chat {model}`, OpenLLMetry's `openai.chat`), the application's own span of an
SDK call; budgetscope's own client spans and HTTP client spans are not. It is a request's client span only above a
server root (derive/genai.py)."""

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
TRITON_FILE_SCOPE = "triton-trace-file"
"""The scope of the spans `budgetscope import --from triton` writes."""
TRITON_SCOPES = ("triton-server", TRITON_FILE_SCOPE)
"""Triton's tracer (`kTritonTracer`, triton-inference-server/server src/tracer.h) and the scope of the spans
`budgetscope import --from triton` writes."""
TRITON_SQL = (
    f"(scope_name IN {TRITON_SCOPES!r} OR name = 'InferRequest' OR json_exists(attributes, '$.\"triton.model_name\"'))"
)
"""SQL over a span: Triton's, by its tracer, its root span's name or a model span's attribute, never by the service
name (`--trace-config opentelemetry,resource=service.name=…` sets any)."""
LLMD_GATEWAY = "gateway.request"
"""The llm-d EPP's SERVER span of a request (llm-d-router pkg/epp/handlers/server.go): the llm-d adapter's root."""
LLMD_ORCHESTRATION = "gateway.request_orchestration"
LLMD_PREFILL = ("prefill", "llm_d.pd_proxy.prefill")
"""The routing sidecar's prefill-leg span: `prefill` (nixlv2, sglang connectors), `llm_d.pd_proxy.prefill` (the
others)."""
LLMD_DECODE = ("decode", "llm_d.pd_proxy.decode")
LLMD_SIDECAR_SERVER = "llm_d.pd_proxy."
"""The prefix of the routing sidecar's spans; its otelhttp SERVER span is `llm_d.pd_proxy.<METHOD> <path>`."""
LLMD_SCOPE_PREFIX = "llm-d-router/"
"""The llm-d components' tracer scopes (`llm-d-router/pkg/epp/handlers`, `.../sidecar/proxy`, ...)."""
LLMD_SQL = (
    f"(name IN ('{LLMD_GATEWAY}', '{LLMD_ORCHESTRATION}') OR starts_with(name, '{LLMD_SIDECAR_SERVER}') "
    f"OR starts_with(coalesce(scope_name, ''), '{LLMD_SCOPE_PREFIX}'))"
)
"""SQL: an llm-d span (the EPP's, the routing sidecar's); the generic `prefill` / `decode` names only under the
llm-d tracer scopes."""

UNCLAIMED = "other"
"""The `source` of a span no adapter reads."""

SOURCE_SQL = f"""CASE
  WHEN name = '{NATIVE_STEP}' OR starts_with(name, '{STAGE_PREFIX}') OR {NATIVE_ROOT_SQL} THEN 'native'
  WHEN {CLIENT_ROOT_SQL} THEN 'client'
  WHEN bs_kind(kind) = 'CLIENT' AND ({HTTP_METHOD_SQL} OR {GENAI_OPERATION_SQL}) THEN 'client'
  WHEN {LLMD_SQL} THEN 'llmd'
  WHEN name IN ('{VLLM_ROOT}', '{VLLM_CORE}') THEN 'vllm'
  WHEN starts_with(coalesce(service_name, ''), '{TGI_SERVICE_PREFIX}')
    AND (name IN {TGI_SPANS!r} OR json_exists(attributes, '$."http.route"')) THEN 'tgi'
  WHEN ({SGLANG_ROOT_SQL})
    OR ({SGLANG_SCOPED} AND (name IN {SGLANG_SLICES!r} OR json_exists(attributes, '$.thread_label')))
    THEN 'sglang'
  WHEN {TRITON_SQL} THEN 'triton'
  ELSE '{UNCLAIMED}' END"""
"""SQL expression over the `name`, `kind` (raw or normalised: `bs_kind` of ingest/staging.py reads both),
`service_name`, `scope_name` and `attributes` columns of a span: native, client, llmd, vllm, tgi, sglang, triton or
other. An OpenTelemetry HTTP or GenAI client span is `client` whether or not a server span joins it.
In an expression such as this, DuckDB evaluates a conjunction's terms in the order written: a cheap test of a name or a
scope comes before a parse of the attributes (a Triton span reached SGLang's `json_exists` of `thread_label` before
its service was looked at: 0.7 CPU-s per 1M spans, 0.3 after; docs/benchmarks.md, seventeenth session)."""
