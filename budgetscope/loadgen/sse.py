"""Server-sent events: split a byte stream into event payloads, and read OpenAI-style stream chunks.

The parser takes bytes as they come off the socket, in any split (mid-line, mid-`\\r\\n`), and returns the
`data` of each completed event (several `data:` lines joined by `\\n`, as the SSE spec says).
"""

from __future__ import annotations

import orjson

DONE = b"[DONE]"


class SSEParser:
    """Incremental SSE parser: `feed(bytes)` returns the data payloads of the events it completed."""

    __slots__ = ("_buf", "_skip_lf")

    def __init__(self) -> None:
        self._buf = b""
        self._skip_lf = False  # the last piece ended in \r: a \n starting the next one is its CRLF's second half

    def feed(self, data: bytes) -> list[bytes]:
        """Payloads (bytes, `data:` prefix and one leading space removed) of events ended in `data`."""
        if not data:
            return []
        if self._skip_lf and data.startswith(b"\n"):
            data = data[1:]
        self._skip_lf = False
        if b"\r" in data:
            self._skip_lf = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + data if self._buf else data
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        out = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:  # the common one-line event
                out.append(block[6:])
                continue
            lines = [line[5:] for line in block.split(b"\n") if line.startswith(b"data:")]
            if lines:
                out.append(b"\n".join(line[1:] if line.startswith(b" ") else line for line in lines))
        return out

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet ended by a blank line."""
        return self._buf


class StreamChunk:
    """What one OpenAI stream payload says: a token event, usage, an error, or the end."""

    __slots__ = ("is_done", "is_token", "completion_tokens", "prompt_tokens", "error", "timings")

    def __init__(self) -> None:
        self.is_done = False
        self.is_token = False
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.error: str | None = None
        self.timings: dict | None = None
        """llama.cpp's `timings` object, when the event carries one (its last event does)."""


def read_chunk(payload: bytes) -> StreamChunk:
    """Interpret one payload of a `/v1/completions` or `/v1/chat/completions` stream.

    A token event carries output: non-empty `text` (completions), `delta.content`,
    `delta.reasoning_content` or `delta.tool_calls` (chat) - or an empty text/content before the end (no
    `finish_reason`, no `role`): a token whose bytes do not decode to text yet, as the reference engine and
    vLLM send. A chat role announcement or a closing event with empty text is not a token. `usage` gives
    the token counts. `{"error": ...}` is an error.
    """
    chunk = StreamChunk()
    if payload == DONE:
        chunk.is_done = True
        return chunk
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        chunk.error = f"bad_event: not JSON: {payload[:80]!r}"
        return chunk
    if not isinstance(obj, dict):
        chunk.error = f"bad_event: not an object: {payload[:80]!r}"
        return chunk
    error = obj.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        chunk.error = f"stream_error: {message}"
        return chunk
    choices = obj.get("choices")
    if choices:
        choice = choices[0]
        pending = choice.get("finish_reason") is None
        if "text" in choice:
            text = choice["text"]
            chunk.is_token = bool(text) or (text == "" and pending)
        else:
            delta = choice.get("delta") or {}
            chunk.is_token = bool(
                delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")
            ) or (delta.get("content") == "" and pending and "role" not in delta)
    timings = obj.get("timings")
    if isinstance(timings, dict):
        chunk.timings = timings
    usage = obj.get("usage")
    if usage:
        chunk.completion_tokens = usage.get("completion_tokens")
        chunk.prompt_tokens = usage.get("prompt_tokens")
    return chunk
