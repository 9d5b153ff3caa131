"""The OpenAI-compatible wire format: parse a request body, build response and stream-chunk bodies."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _json_str

from budgetscope.engine.errors import RequestError
from budgetscope.engine.sampling_params import SamplingParams

TIER_HEADER = "x-budgetscope-tier"
TENANT_HEADER = "x-budgetscope-tenant"
DEADLINE_HEADER = "x-budgetscope-deadline-ms"
TIER_FIELD = "budgetscope_tier"
TENANT_FIELD = "budgetscope_tenant"
DEADLINE_FIELD = "budgetscope_deadline_ms"


@dataclass(slots=True)
class ParsedRequest:
    """One /v1/completions or /v1/chat/completions body, checked."""

    is_chat: bool
    prompt: str | None  # text to encode (chat: the rendered conversation)
    prompt_token_ids: list[int] | None  # a prompt given as token ids
    params: SamplingParams
    stream: bool
    include_usage: bool
    tier: str
    tenant: str | None
    deadline_s: float | None


def parse_request(body, headers, is_chat: bool, model_name: str, default_max_tokens: int, render_chat) -> ParsedRequest:
    """Check body against the OpenAI API subset the engine serves; RequestError(400/404) names the field."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model not in (None, "", model_name):
        raise RequestError(
            404, f"model {model!r} does not exist; this server serves {model_name!r}", type="model_not_found"
        )
    if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        raise RequestError(400, "only n=1 is supported")
    prompt, prompt_ids = _prompt(body, is_chat, render_chat)
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise RequestError(400, "stop must be a string or a list of non-empty strings")
    max_tokens = (
        body.get("max_completion_tokens") if is_chat and body.get("max_tokens") is None else body.get("max_tokens")
    )
    try:
        params = SamplingParams(
            max_tokens=default_max_tokens if max_tokens is None else _int(max_tokens, "max_tokens"),
            temperature=float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0),
            top_p=float(body.get("top_p") if body.get("top_p") is not None else 1.0),
            top_k=_int(body.get("top_k") or 0, "top_k"),
            seed=None if body.get("seed") is None else _int(body["seed"], "seed"),
            ignore_eos=bool(body.get("ignore_eos", False)),
            stop=stop,
        )
    except (TypeError, ValueError) as exc:
        raise RequestError(400, str(exc)) from None
    options = body.get("stream_options") or {}
    deadline = body.get(DEADLINE_FIELD, headers.get(DEADLINE_HEADER))
    try:
        deadline_s = float(deadline) / 1000 if deadline is not None else None
    except ValueError:
        raise RequestError(400, f"{DEADLINE_FIELD} must be a number of milliseconds") from None
    return ParsedRequest(
        is_chat=is_chat,
        prompt=prompt,
        prompt_token_ids=prompt_ids,
        params=params,
        stream=bool(body.get("stream", False)),
        include_usage=bool(options.get("include_usage", False)),
        tier=str(body.get(TIER_FIELD) or headers.get(TIER_HEADER) or "default"),
        tenant=body.get(TENANT_FIELD) or headers.get(TENANT_HEADER),
        deadline_s=deadline_s,
    )


def _prompt(body, is_chat: bool, render_chat):
    if is_chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError(400, "messages must be a non-empty list of {role, content} objects")
        return render_chat([_text_message(m) for m in messages]), None
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return None, prompt
    raise RequestError(400, "prompt must be a string or a list of token ids (one prompt per request)")


def _text_message(m: dict) -> dict:
    content = m.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return {"role": m.get("role", "user"), "content": content or ""}


def _int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer")
    return value


def usage(seq) -> dict:
    return {
        "prompt_tokens": seq.num_prompt_tokens,
        "completion_tokens": seq.num_output_tokens,
        "total_tokens": seq.num_tokens,
        "prompt_tokens_details": {"cached_tokens": seq.num_cached_tokens},
    }


def chunk(
    req: ParsedRequest, request_id: str, model: str, text: str, finish_reason: str | None, first: bool = False
) -> dict:
    """One streamed event body (`text_completion` or `chat.completion.chunk`)."""
    if req.is_chat:
        delta = {"role": "assistant", "content": text} if first else {"content": text}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        kind = "text_completion"
    return {"id": request_id, "object": kind, "created": int(time.time()), "model": model, "choices": [choice]}


class ChunkEncoder:
    """One stream's token events as SSE text: exactly `sse(chunk(req, request_id, model, text, finish_reason, first))`,
    built from the parts that do not change within the stream (the id, the object kind, the model) and the one JSON
    string that does (json's own C string encoder), instead of a dict and a `json.dumps` per token."""

    __slots__ = ("_head", "_to_text", "_to_text_first", "_after_text")

    def __init__(self, req: ParsedRequest, request_id: str, model: str):
        kind = "chat.completion.chunk" if req.is_chat else "text_completion"
        self._head = f'data: {{"id":{_json_str(request_id)},"object":"{kind}","created":'
        to_choice = f',"model":{_json_str(model)},"choices":[{{"index":0,'
        if req.is_chat:
            self._to_text = to_choice + '"delta":{"content":'
            self._to_text_first = to_choice + '"delta":{"role":"assistant","content":'
            self._after_text = '},"logprobs":null,"finish_reason":'
        else:
            self._to_text = self._to_text_first = to_choice + '"text":'
            self._after_text = ',"logprobs":null,"finish_reason":'

    def event(self, text: str, finish_reason: str | None, first: bool, created: int) -> str:
        """One `data: {...}\\n\\n` event; `created`: Unix seconds (`int(time.time())`)."""
        reason = "null" if finish_reason is None else _json_str(finish_reason)
        to_text = self._to_text_first if first else self._to_text
        return f"{self._head}{created}{to_text}{_json_str(text)}{self._after_text}{reason}}}]}}\n\n"


def sse(payload: dict) -> str:
    """One server-sent event carrying `payload` as compact JSON."""
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def usage_chunk(req: ParsedRequest, request_id: str, model: str, seq) -> dict:
    kind = "chat.completion.chunk" if req.is_chat else "text_completion"
    return {
        "id": request_id,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": usage(seq),
    }


def response(req: ParsedRequest, request_id: str, model: str, text: str, finish_reason: str, seq) -> dict:
    """The whole (non-streaming) response body."""
    if req.is_chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        kind = "text_completion"
    return {
        "id": request_id,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(seq),
    }
