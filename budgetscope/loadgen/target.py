"""`Target`: an OpenAI-compatible endpoint, and the bytes of each request sent to it."""

from __future__ import annotations

import http.client
import ssl
from urllib.parse import urlsplit

import orjson

from budgetscope.loadgen.errors import LoadgenError

TIER_HEADER = "x-budgetscope-tier"
TENANT_HEADER = "x-budgetscope-tenant"
TIER_FIELD = "budgetscope_tier"
TENANT_FIELD = "budgetscope_tenant"
_APIS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


class Target:
    """Where requests go and how their bodies look.

    `url`: a base (`http://127.0.0.1:8000`, `.../v1`) or a full endpoint (`.../v1/completions`,
    `.../v1/chat/completions`). `api`: "completions", "chat", or "auto" (from the URL; completions for a
    base URL). `stream`: ask for an SSE stream (False: one JSON response, whose server timing headers such as
    TGI's `x-queue-time` only non-streaming responses carry). `body_hints`: also send `ignore_eos` and the `budgetscope_tier`/`budgetscope_tenant` body
    fields (the tier and tenant headers are always sent). `extra_body`: merged into every body.
    """

    def __init__(
        self,
        url: str,
        *,
        api: str = "auto",
        model: str | None = None,
        ignore_eos: bool = True,
        include_usage: bool = True,
        body_hints: bool = True,
        extra_body: dict | None = None,
        headers: dict[str, str] | None = None,
        stream: bool = True,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LoadgenError(f"bad target URL {url!r}; expected http://host:port[/v1/completions]")
        self.is_tls = parts.scheme == "https"
        self.host = parts.hostname
        try:
            self.port = parts.port or (443 if self.is_tls else 80)
        except ValueError:
            raise LoadgenError(f"bad port in target URL {url!r}") from None
        path = parts.path.rstrip("/")
        if api == "auto":
            api = "chat" if path.endswith("/chat/completions") else "completions"
        if api not in _APIS:
            raise LoadgenError(f"unknown api {api!r}; valid: completions, chat")
        if not path.endswith("/completions"):
            path = (path[:-3] if path.endswith("/v1") else path) + _APIS[api]
        self.api = api
        self.path = path
        self.url = f"{parts.scheme}://{parts.netloc}{path}"
        self.model = model
        self.ignore_eos = ignore_eos
        self.include_usage = include_usage
        self.body_hints = body_hints
        self.extra_body = dict(extra_body or {})
        self.stream = stream
        host_header = parts.netloc.rsplit("@", 1)[-1]
        self.headers = dict(headers or {})
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._head = (
            f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nUser-Agent: budgetscope-loadgen\r\n{extra}"
        ).encode()

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for https targets, else None."""
        return ssl.create_default_context() if self.is_tls else None

    def body(self, prompt: str | list[int], max_tokens: int, tier: str | None, tenant: str | None) -> bytes:
        """The JSON body of one request (streaming unless `stream=False`)."""
        body: dict = {}
        if self.model:
            body["model"] = self.model
        if self.api == "chat":
            if not isinstance(prompt, str):
                raise LoadgenError("token-id prompts need the completions API; use text prompts with chat")
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        body["max_tokens"] = max_tokens
        body["stream"] = self.stream
        if self.include_usage and self.stream:
            body["stream_options"] = {"include_usage": True}
        if self.body_hints:
            if self.ignore_eos:
                body["ignore_eos"] = True
            if tier is not None:
                body[TIER_FIELD] = tier
            if tenant is not None:
                body[TENANT_FIELD] = tenant
        if self.extra_body:
            body.update(self.extra_body)
        return orjson.dumps(body)

    def request(self, body: bytes, traceparent: str, tier: str | None, tenant: str | None) -> bytes:
        """The whole HTTP/1.1 request: head (with `traceparent`, tier and tenant headers) and body."""
        head = [self._head, b"traceparent: ", traceparent.encode(), b"\r\n"]
        if tier is not None:
            head += [b"x-budgetscope-tier: ", tier.encode(), b"\r\n"]
        if tenant is not None:
            head += [b"x-budgetscope-tenant: ", tenant.encode(), b"\r\n"]
        head += [b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n", body]
        return b"".join(head)

    def probe(self, timeout_s: float = 5.0) -> str | None:
        """Check the endpoint answers HTTP and return the first model of `GET /v1/models`, if any.

        Raises LoadgenError in one line when nothing answers (refused, unknown host, timeout).
        """
        cls = http.client.HTTPSConnection if self.is_tls else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=timeout_s)
        base = self.path[: self.path.rfind("/v1/") + 1] if "/v1/" in self.path else "/"
        try:
            conn.request("GET", base + "v1/models", headers={"Accept": "application/json", **self.headers})
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as err:
            reason = getattr(err, "strerror", None) or str(err) or type(err).__name__
            raise LoadgenError(f"cannot reach {self.url}: {reason}") from None
        finally:
            conn.close()
        if resp.status != 200:
            return None
        try:
            models = orjson.loads(data).get("data") or []
            return models[0].get("id") if models else None
        except (orjson.JSONDecodeError, AttributeError, IndexError, TypeError):
            return None
