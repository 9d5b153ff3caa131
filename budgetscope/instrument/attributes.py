"""The names of the span contract (docs/design.md, "The span contract"): span names, attribute keys, values.

Code and tests import these constants; a name is spelled out once, here. Keys follow the OpenTelemetry
GenAI semantic conventions where one exists, `budgetscope.*` otherwise.
"""

SCOPE_NAME = "budgetscope"
"""Instrumentation scope of every span budgetscope emits."""

# Span names (low cardinality: never a request id in a span name). The request spans are named as the GenAI
# semantic conventions ask, `{gen_ai.operation.name} {gen_ai.request.model}` (open-telemetry/semantic-conventions,
# docs/gen-ai/gen-ai-spans.md at a064dcca28053f4406d5dc65895e89c523171ca4, "Inference"), e.g. `chat llama-3-8b`;
# the names before that, `llm.request` and `llm.client.request`, are still read everywhere.
SPAN_REQUEST = "llm.request"
"""The server root's name before the GenAI convention, and its name when the request has no operation."""
SPAN_CLIENT_REQUEST = "llm.client.request"
"""The client span's name before the GenAI convention."""
SPAN_STAGE_PREFIX = "stage."
SPAN_ENGINE_STEP = "engine.step"

# Root span `llm.request` (kind SERVER).
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
"""The GenAI system that served the request (semantic conventions 1.37+, successor of `gen_ai.system`)."""
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
"""String array, one reason a choice (`stop`, `length`, …)."""
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
ERROR_TYPE = "error.type"
TIER = "budgetscope.tier"
TENANT = "budgetscope.tenant"
OUTCOME = "budgetscope.outcome"
FIRST_TOKEN_UNIX_NANO = "budgetscope.first_token_unix_nano"
"""Unix-epoch ns of the first output token (a budgetscope addition: exact even after a decode-time preemption)."""
HTTP_READ_UNIX_NANO = "budgetscope.http.read_unix_nano"
"""Unix-epoch ns at which the server process read the request from its socket, before the span began (the reference
engine; its root span starts when the route handler runs)."""

# Stage spans `stage.<stage>` (kind INTERNAL).
STAGE = "budgetscope.stage"
DECODE_ITL_MS = "budgetscope.decode.itl_ms"
"""Double array: gap in ms before each token emitted inside this decode span (see docs/instrumentation.md)."""
DECODE_STEPS = "budgetscope.decode.steps"
"""Int: decode steps inside this decode span (tokens emitted in it, less the one that opened it)."""

# Engine step spans `engine.step` (kind INTERNAL, one trace per step).
STEP_BATCH_SIZE = "budgetscope.step.batch_size"
STEP_PREFILL_TOKENS = "budgetscope.step.prefill_tokens"
STEP_DECODE_SEQS = "budgetscope.step.decode_seqs"
STEP_KV_BLOCKS_USED = "budgetscope.step.kv_blocks_used"
STEP_KV_BLOCKS_TOTAL = "budgetscope.step.kv_blocks_total"
STEP_QUEUE_DEPTH = "budgetscope.step.queue_depth"
STEP_PREEMPTED = "budgetscope.step.preempted"
STEP_MAX_SEQS = "budgetscope.step.max_seqs"
STEP_TOKEN_BUDGET = "budgetscope.step.token_budget"

# Values.
DEFAULT_TIER = "default"
DEFAULT_OPERATION = "text_completion"
DEFAULT_PROVIDER = "budgetscope"
"""`gen_ai.provider.name` of server spans unless `Instrumentation(provider_name=...)` says otherwise (set it to your
serving system's name: `vllm`, `sglang`, …; there is no well-known value for a self-hosted server)."""
CLIENT_PROVIDER = "openai"
"""`gen_ai.provider.name` of client spans: the API the client speaks. The conventions ask for the instrumentation's
best knowledge, which for an OpenAI-compatible client is `openai` whatever server answers."""
MARKABLE_STAGES = ("frontend", "queue", "prefill", "decode", "postprocess")
"""Stages a service marks itself, in life order (`network` is derived from client spans, `unaccounted` is a remainder)."""
OUTCOMES = ("ok", "rejected", "cancelled", "error", "timeout")
"""Values of `budgetscope.outcome`."""

REQUEST_OWNED_KEYS = {
    GEN_AI_PROVIDER_NAME: "Instrumentation(provider_name=...)",
    GEN_AI_OPERATION_NAME: "start_request(operation=...)",
    GEN_AI_REQUEST_MODEL: "start_request(model=...)",
    GEN_AI_RESPONSE_ID: "start_request(request_id=...) or req.request_id",
    GEN_AI_USAGE_INPUT_TOKENS: "finish(input_tokens=...)",
    GEN_AI_USAGE_OUTPUT_TOKENS: "finish(output_tokens=...)",
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: "finish(cached_tokens=...)",
    TIER: "start_request(tier=...)",
    TENANT: "start_request(tenant=...)",
    OUTCOME: "finish(outcome=...)",
    FIRST_TOKEN_UNIX_NANO: "req.token()",
}
"""Root attributes the API sets itself, with where to set them; `RequestTrace.set` refuses these keys."""


def stage_span_name(stage: str) -> str:
    """The span name of a stage: `stage.<stage>`."""
    return SPAN_STAGE_PREFIX + stage


def request_span_name(operation: str | None, model: str | None, fallback: str = SPAN_REQUEST) -> str:
    """The GenAI span name `{gen_ai.operation.name} {gen_ai.request.model}` of a request span; the operation alone
    without a model, and `fallback` (the old name) without an operation."""
    if not operation:
        return fallback
    return f"{operation} {model}" if model else operation
