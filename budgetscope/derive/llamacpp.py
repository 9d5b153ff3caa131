"""llama.cpp server adapter: its `timings` object, captured by the load generator on the client span.

llama.cpp's server (tools/server) exports no spans. It returns `timings` in a non-streaming response and in
the last event of a stream (`result_timings::to_json`, tools/server/server-task.cpp at ggml-org/llama.cpp 17f5f8a;
`server_slot_stats::to_json` in server-common.cpp before); `budgetscope load` keeps each numeric field as
`llama_cpp.timings.<field>` on the `llm.client.request` span:
  prefill = prompt_ms (prompt processing, up to the first token)
  decode  = predicted_ms (first token → last token: generation of predicted_n tokens)
  input_tokens = prompt_n + cache_n, cached_tokens = cache_n, output_tokens = predicted_n.
The server gives no timestamps and no queue, frontend or postprocess time: those are NULL, and so is network
(client time cannot be split from unreported server time). requests.py puts client TTFT − prefill (and client
E2E − prefill − decode) in `unaccounted`: network, the HTTP layer, waiting for a free slot, detokenizing.
"""

from __future__ import annotations

from budgetscope.derive import client
from budgetscope.derive.classify import has_key
from budgetscope.derive.server_row import select_list

PREFIX = "llama_cpp.timings."
ATTRS = client.ATTRS[:-1] + (
    f',"{PREFIX}prompt_n":"BIGINT","{PREFIX}prompt_ms":"DOUBLE","{PREFIX}predicted_n":"BIGINT",'
    f'"{PREFIX}predicted_ms":"DOUBLE","{PREFIX}cache_n":"BIGINT"}}'
)
CLAIMS = has_key(f"{PREFIX}prompt_ms")
"""SQL over a client span: llama.cpp reported timings on it."""


def server_rows(spans: str) -> str:
    """SELECT producing one row per client span of `spans` that carries llama.cpp `timings`."""
    t = f'a."{PREFIX}'
    rows = select_list(
        **(
            client.common("llamacpp")
            | dict(
                input_tokens=f'{t}prompt_n" + coalesce({t}cache_n", 0)',
                cached_tokens=f'{t}cache_n"',
                output_tokens=f'coalesce({t}predicted_n", a."gen_ai.usage.output_tokens")',
                prefill_ms=f'{t}prompt_ms"',
                ttft_prefill_ms=f'{t}prompt_ms"',
                decode_ms=f'{t}predicted_ms"',
            )
        )
    )
    return f"""SELECT {rows} FROM ({client.client_spans(f"(SELECT * FROM {spans} WHERE {CLAIMS})", ATTRS)})"""
