"""What a server reports about a request in its response, kept on the client span under the server's own names.

Some servers export no spans but tell each client how long parts of its request took:
- TGI: `x-total-time`, `x-validation-time`, `x-queue-time`, `x-inference-time`, `x-time-per-token` (integer ms),
  `x-prompt-tokens`, `x-generated-tokens`, on non-streaming responses (router/src/server.rs);
- llama-cpp-python: `openai-processing-ms` (its route handler's time, integer ms);
- llama.cpp's server: a `timings` object in the JSON body or in the last stream event
  (`prompt_n`, `prompt_ms`, `predicted_n`, `predicted_ms`, `cache_n`, ...; tools/server/server-common.cpp).

Headers become `http.response.header.<name>` (OpenTelemetry HTTP semantic conventions: a string array);
`timings` fields become `llama_cpp.timings.<field>`. `budgetscope.client.stream` says whether the response
was streamed. The source adapters (budgetscope/sources/) read these attributes; nothing here interprets them.
They travel as `ClientRequest.extra_attributes`, which the client span builder adds to the span.
"""

from __future__ import annotations

from typing import Any

CAPTURED_HEADERS = (
    b"x-total-time",
    b"x-validation-time",
    b"x-queue-time",
    b"x-inference-time",
    b"x-time-per-token",
    b"x-prompt-tokens",
    b"x-generated-tokens",
    b"x-compute-time",
    b"x-compute-type",
    b"openai-processing-ms",
)
"""Response headers kept on the client span (lower case, as `HttpConnection` gives them)."""
HEADER_PREFIX = "http.response.header."
TIMINGS_PREFIX = "llama_cpp.timings."
CLIENT_STREAM = "budgetscope.client.stream"
"""Bool: the request asked for a streamed (SSE) response."""


def header_attributes(headers: dict[bytes, bytes]) -> dict[str, list[str]]:
    """The captured response headers as `http.response.header.<name>` → [value] attributes."""
    out = {}
    for name in CAPTURED_HEADERS:
        value = headers.get(name)
        if value is not None:
            out[HEADER_PREFIX + name.decode()] = [value.decode("latin-1")]
    return out


def timings_attributes(timings: Any) -> dict[str, float]:
    """llama.cpp's `timings` object as `llama_cpp.timings.<field>` attributes (numbers only; others dropped)."""
    if not isinstance(timings, dict):
        return {}
    return {
        TIMINGS_PREFIX + k: v for k, v in timings.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
