"""The OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics.

Each request: the frontend (parse, tokenize, validate) runs on the event loop, then the sequence goes to the
engine — the engine process through a CoreClient (the default), or the EngineLoop thread in this process
(`--engine-in-process`); its progress comes back through a TokenRelay (token_stream.py), one SSE event per output
token, the events of every token that arrived since the request's last wake-up in one write.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from budgetscope.auth import bearer_ok
from budgetscope.engine import protocol
from budgetscope.engine.detokenizer import Detokenizer
from budgetscope.engine.engine_loop import EngineLoop, freeze_heap
from budgetscope.engine.errors import RequestError
from budgetscope.engine.frontend import Frontend
from budgetscope.engine.http_protocol import READ_NS, uvicorn_config
from budgetscope.engine.protocol import ChunkEncoder, ParsedRequest, sse
from budgetscope.engine.token_stream import TokenEvents, TokenRelay
from budgetscope.gil import short_switch_interval
from budgetscope.instrument import attributes as A

if TYPE_CHECKING:
    from budgetscope.engine.core_client import CoreClient


class StreamState:
    """How a streamed response ended: outcome set when [DONE] was sent; is_closed once the trace finished."""

    __slots__ = ("outcome", "is_closed")

    def __init__(self):
        self.outcome: str | None = None
        self.is_closed = False


class SSEResponse(StreamingResponse):
    """A StreamingResponse that runs `on_close` however the response ends, even when the client leaves
    before the body iterator ever started (then its own `finally` never runs)."""

    def __init__(self, content, on_close, **kw):
        super().__init__(content, media_type="text/event-stream", **kw)
        self.on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


class ApiKeyGate:
    """ASGI: answers 401 to /v1/* requests without `Authorization: Bearer <api_key>`, as `vllm serve --api-key`
    does; /health and /metrics stay open (probes and scrapers)."""

    def __init__(self, app, api_key: str):
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1") and scope["method"] != "OPTIONS":
            header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            if not bearer_ok(header, self.api_key):
                err = RequestError(
                    401, "missing or wrong API key (Authorization: Bearer …)", type="authentication_error"
                )
                response = JSONResponse(err.body(), status_code=401, headers={"www-authenticate": "Bearer"})
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


class Server:
    """Routes bound to one engine: an EngineLoop (in process) or a CoreClient (the engine process); both offer
    `front` (the Frontend), `submit`, `abort`, `render_metrics` and `health`. `app` is the ASGI application
    (Starlette; behind `ApiKeyGate` when an `api_key` is set)."""

    def __init__(self, loop: EngineLoop | CoreClient, api_key: str | None = None):
        self.loop = loop
        self.engine = loop.front
        self.telemetry = loop.front.telemetry
        self._relay: TokenRelay | None = None  # made on the event loop, at the first request
        self.app = Starlette(
            routes=[
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
            ]
        )
        if api_key is not None:
            self.app = ApiKeyGate(self.app, api_key)

    async def health(self, request: Request) -> Response:
        down = self.loop.health()
        if down is not None:
            err = RequestError(503, f"the engine is not running: {down}", type="service_unavailable")
            return JSONResponse(err.body(), status_code=503)
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        card = {
            "id": self.engine.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "budgetscope",
            "max_model_len": self.engine.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def metrics(self, request: Request) -> Response:
        text = self.loop.render_metrics()
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, is_chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, is_chat=True)

    # -- one request ------------------------------------------------------------------------------
    async def _generate(self, request: Request, is_chat: bool) -> Response:
        arrival_ns = time.time_ns()
        headers = request.headers
        request_id = headers.get("x-request-id") or f"{'chatcmpl' if is_chat else 'cmpl'}-{uuid.uuid4().hex}"
        trace = self.telemetry.start_request(
            model=self.engine.model_name,
            tier=headers.get(protocol.TIER_HEADER, "default"),
            tenant=headers.get(protocol.TENANT_HEADER),
            traceparent=headers.get("traceparent"),
            request_id=request_id,
            operation="chat" if is_chat else "text_completion",
        )
        read_ns = request.scope.get(READ_NS)
        if read_ns is not None:  # when uvicorn read it: the loop's lag before this handler ran (http_protocol.py)
            trace.set(A.HTTP_READ_UNIX_NANO, read_ns)
        events = TokenEvents(self._token_relay())
        try:
            req, seq = await self._frontend(request, is_chat, request_id, trace, arrival_ns, events)
            self.loop.submit(seq)
        except RequestError as exc:
            trace.finish(outcome="rejected", error_type=f"http_{exc.status}")
            self.engine.metrics.observe_finish("rejected", arrival_ns, time.time_ns(), 0, 0)
            extra = {"retry-after": str(exc.retry_after_s)} if exc.retry_after_s else None
            return JSONResponse(exc.body(), status_code=exc.status, headers=extra)
        out_headers = {"x-request-id": request_id}
        if trace.traceparent:
            out_headers["traceresponse"] = trace.traceparent
        if req.stream:
            state = StreamState()
            return SSEResponse(
                self._stream(req, seq, events, request_id, state),
                on_close=lambda: self._close(seq, state),
                headers={**out_headers, "cache-control": "no-cache"},
            )
        return await self._complete(request, req, seq, events, request_id, out_headers)

    def _token_relay(self) -> TokenRelay:
        loop = asyncio.get_running_loop()
        if self._relay is None or self._relay.loop is not loop:
            self._relay = TokenRelay(loop)
        return self._relay

    async def _frontend(self, request, is_chat, request_id, trace, arrival_ns, events):
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestError(400, "the request body is not valid JSON") from None
        cfg = self.engine.config
        req = protocol.parse_request(
            body,
            request.headers,
            is_chat,
            self.engine.model_name,
            cfg.default_chat_max_tokens if is_chat else cfg.default_max_tokens,
            self.engine.tokenizer.apply_chat_template,
        )
        _label(trace, req.tier, req.tenant)
        ids = req.prompt_token_ids if req.prompt_token_ids is not None else self.engine.tokenizer.encode(req.prompt)
        seq = self.engine.make_sequence(
            ids,
            req.params,
            request_id=request_id,
            tier=req.tier,
            tenant=req.tenant,
            arrival_ns=arrival_ns,
            timeout_s=req.deadline_s,
            trace=trace,
            on_output=events.on_output,
        )
        return req, seq

    async def _deltas(self, req: ParsedRequest, seq, events: TokenEvents, detok: Detokenizer):
        """Yield, each time new output tokens arrive, a list of (text delta, finish_reason or None), one per token
        (finish_reason set on the last): every token that arrived since the last yield, so a loop that fell
        behind the engine writes them at once.

        Stop strings end the request here: the engine is told to drop it, and the text is cut before the stop.
        """
        sent = seq.num_prompt_tokens
        while True:
            count, done = await events.wait_past(sent)
            new = seq.token_ids[sent:count]
            sent = count
            out = []
            for i, token_id in enumerate(new):
                text = detok.add([token_id])
                last = done and i == len(new) - 1
                if last:
                    text += detok.flush()
                cut = _stop_cut(detok.text, req.params.stop, len(text))
                if cut is not None:
                    self.loop.abort(seq, outcome="ok", reason="stop")
                    seq.trace.mark("postprocess")
                    out.append((text[:cut], "stop"))
                    yield out
                    return
                out.append((text, _finish_reason(seq) if last else None))
            if done and not new:
                out.append((detok.flush(), _finish_reason(seq)))
            yield out
            if done:
                return

    async def _stream(self, req: ParsedRequest, seq, events: TokenEvents, request_id: str, state: StreamState):
        """The SSE body: one write of every token event ready at each wake-up (one event a token, as always)."""
        model = self.engine.model_name
        detok = Detokenizer(self.engine.tokenizer)
        encoder = ChunkEncoder(req, request_id, model)
        try:
            first = True
            async for deltas in self._deltas(req, seq, events, detok):
                created, events_text, failed = int(time.time()), [], False
                for text, reason in deltas:
                    if reason in ("timeout", "error"):
                        events_text.append(
                            sse({"error": {"message": f"request ended: {reason}", "type": reason, "code": None}})
                        )
                        failed = True
                        break
                    events_text.append(encoder.event(text, reason, first, created))
                    first = False
                if events_text:
                    yield "".join(events_text)
                if failed:
                    break
            if req.include_usage:
                yield sse(protocol.usage_chunk(req, request_id, model, seq))
            yield "data: [DONE]\n\n"
            state.outcome = seq.outcome or "ok"
        finally:
            self._close(seq, state)

    def _close(self, seq, state: StreamState) -> None:
        """End a streamed request once: its outcome when the stream completed, else cancelled (and aborted)."""
        if state.is_closed:
            return
        state.is_closed = True
        if state.outcome is None:  # the client went away (or the server is stopping)
            self.loop.abort(seq, outcome="cancelled")
            state.outcome = "cancelled"
        self.engine.finish_trace(seq, state.outcome)

    async def _complete(self, request, req, seq, events, request_id, headers) -> Response:
        detok = Detokenizer(self.engine.tokenizer)
        gone = asyncio.ensure_future(_disconnected(request))
        reason = None
        try:
            deltas = self._deltas(req, seq, events, detok)
            while True:
                step = asyncio.ensure_future(anext(deltas, None))
                await asyncio.wait({step, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    step.cancel()
                    self.loop.abort(seq, outcome="cancelled")
                    self.engine.finish_trace(seq, "cancelled")
                    return Response(status_code=499)
                items = step.result()
                if items is None:
                    break
                for _, item_reason in items:
                    reason = item_reason or reason
        finally:
            gone.cancel()
        outcome = seq.outcome or "ok"
        if reason in ("timeout", "error"):
            self.engine.finish_trace(seq, outcome)
            status = 504 if reason == "timeout" else 500
            err = RequestError(status, f"request ended: {reason}", type=reason)
            return JSONResponse(err.body(), status_code=status, headers=headers)
        body = protocol.response(
            req, request_id, self.engine.model_name, _cut_text(detok.text, req.params.stop), reason or "length", seq
        )
        self.engine.finish_trace(seq, outcome)
        return JSONResponse(body, headers=headers)


def _label(trace, tier: str, tenant: str | None) -> None:
    """Set tier/tenant parsed from the body on a real trace (the null trace has no attributes)."""
    try:
        trace.tier = tier
        trace.tenant = tenant
    except AttributeError:
        pass


def _finish_reason(seq) -> str:
    return {"abort": "abort"}.get(seq.finish_reason, seq.finish_reason or "stop")


def _stop_cut(text: str, stops: list[str], delta_len: int) -> int | None:
    """Where, inside the last delta_len characters of text, the delta must be cut for a stop string."""
    if not stops:
        return None
    start = len(text) - delta_len
    for stop in stops:
        at = text.find(stop, max(0, start - len(stop) + 1))
        if at != -1:
            return max(0, at - start)
    return None


def _cut_text(text: str, stops: list[str]) -> str:
    for stop in stops:
        at = text.find(stop)
        if at != -1:
            text = text[:at]
    return text


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def serve(
    engine,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    api_key: str | None = None,
    make_engine=None,
) -> None:
    """Serve until interrupted, then stop the engine and flush telemetry. `engine`: a Frontend, whose engine then
    runs in its own process (CoreClient), or an LLMEngine, stepped on a thread of this process (EngineLoop).
    `api_key`: /v1/* requests must carry `Authorization: Bearer <api_key>`. `make_engine`: what the engine process
    steps (CoreClient's; benchmarks pass a fake). EngineCoreError when the engine process cannot start, or dies
    while serving (the server then stops: its requests in flight ended `error`)."""
    # imported on use: uvicorn 467 ms, multiprocessing 37 ms, msgpack 26 ms to import
    import uvicorn

    from budgetscope.engine.core_client import CoreClient, EngineCoreError

    if isinstance(engine, Frontend):
        core = CoreClient(engine, log_level, make_engine).start()
    else:
        core = EngineLoop(engine).start()
    server = uvicorn.Server(uvicorn_config(Server(core, api_key).app, host=host, port=port, log_level=log_level))
    died: list[str] = []

    def stop_serving(reason: str) -> None:
        died.append(reason)
        server.should_exit = True

    core.on_dead = stop_serving
    freeze_heap()  # the imported code, the app, the engine's front: never walked again by a full collection
    try:
        # the core reader thread and the event loop share the GIL: a socket write on the loop hands it over, and
        # without this the loop then waits up to 5 ms for the reader's next message to be done (budgetscope.gil)
        with short_switch_interval():
            server.run()
    finally:
        core.stop()
        engine.telemetry.shutdown()
    if died:
        raise EngineCoreError(died[0])
