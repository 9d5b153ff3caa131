"""`TraceRouter`: OTLP/HTTP in front of N `budgetscope collect --shard` processes, every span of a trace to one.

Each `ExportTraceServiceRequest` (protobuf or JSON, as the collector's own OTLP/HTTP receiver takes it: the
same `OtlpHttpReceiver`, its bounds and statuses) is split by `shard_of(trace_id, n)` = crc32 of the trace id's
16 bytes mod n, resource and scope kept with each part, and each part is POSTed to its shard's
`/v1/traces` over keep-alive connections, in the encoding it came in (uncompressed). Protobuf parts that wait
for the same shard go as one export (see `_Lane`): a split does not shrink the exports a shard receives, which
would cost it more CPU a span (docs/scale.md, "Shards across processes").

The exporter's answer is the union of the shards' (OTLP/HTTP semantics):

- every part landed: 200;
- a shard answered 429 / 503, timed out or could not be reached: the whole request is retryable (429 if every
  such shard was busy, else 503), with Retry-After. Nothing is acknowledged that did not land; the parts that
  did land are landed again when the exporter retries, which the collector stores once (ingest is idempotent on
  a batch's bytes, and the split is deterministic);
- some parts rejected (400: a bad span), the rest landed: 200 with an OTLP partial success naming the rejected
  spans; every part rejected: 400 with the first shard's message.

Protobuf is split with the same `opentelemetry-proto` message classes the collector decodes with; JSON with
the collector's `otlp_json.parse`. A request whose spans all go to one shard is forwarded as its bytes.
"""

from __future__ import annotations

import http.client
import logging
import threading
import zlib
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import orjson

from budgetscope.collector.http_receiver import (
    CONTENT_TYPE,
    TRACES_PATH,
    OtlpHttpReceiver,
)
from budgetscope.collector.pending import Outcome, PendingQueue, Ticket
from budgetscope.ingest.otlp_json import parse as parse_json
from budgetscope.ingest.spanbatch import BadBatch

log = logging.getLogger("budgetscope.collector")

MAX_POST_BYTES = 4 << 20  # protobuf parts waiting for a shard go as one export up to this size
FORWARD_TIMEOUT_S = 30.0  # a shard that has not answered a part this long counts as unavailable (503)
RETRYABLE = (429, 502, 503, 504)


def shard_of(trace_id: bytes, n: int) -> int:
    """The shard (0..n-1) of a trace: crc32 of its id's bytes mod n (JSON's hex ids are read as bytes first)."""
    return zlib.crc32(trace_id) % n


def _json_id(trace_id) -> bytes:
    """A JSON span's traceId as bytes: hex as OTLP/JSON writes it; anything else by its text (its shard then
    rejects the span as the collector would have)."""
    try:
        return bytes.fromhex(trace_id)
    except (TypeError, ValueError):
        return str(trace_id).encode()


@dataclass(slots=True)
class Part:
    """The spans of one request that go to one shard: `body` in the request's encoding, `spans` of them."""

    body: bytes
    spans: int


def split_proto(payload: bytes, n: int) -> dict[int, Part]:
    """An `ExportTraceServiceRequest` (protobuf) as one part per shard that has spans; BadBatch if not OTLP."""
    # imported on use: the OTLP protobuf classes 64 ms, protobuf 57 ms to import
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    msg = ExportTraceServiceRequest()
    try:
        msg.ParseFromString(payload)
    except DecodeError as e:
        raise BadBatch(f"not an OTLP protobuf trace export ({e})") from None
    groups = [[(s, shard_of(s.trace_id, n)) for s in ss.spans] for rs in msg.resource_spans for ss in rs.scope_spans]
    used = {i for g in groups for _, i in g}
    if len(used) <= 1:  # one shard (or no span: its shard says what it makes of it)
        return {used.pop() if used else 0: Part(payload, sum(map(len, groups)))}
    out = {i: ExportTraceServiceRequest() for i in used}
    counts = dict.fromkeys(used, 0)
    spans = iter(groups)
    for rs in msg.resource_spans:
        for ss in rs.scope_spans:
            by: dict[int, list] = {}
            for s, i in next(spans):
                by.setdefault(i, []).append(s)
            for i, ss_spans in by.items():
                dst_rs = out[i].resource_spans.add(schema_url=rs.schema_url)
                dst_rs.resource.CopyFrom(rs.resource)
                dst_ss = dst_rs.scope_spans.add(schema_url=ss.schema_url)
                dst_ss.scope.CopyFrom(ss.scope)
                dst_ss.spans.extend(ss_spans)
                counts[i] += len(ss_spans)
    return {i: Part(m.SerializeToString(), counts[i]) for i, m in out.items()}


def split_json(payload: bytes, n: int) -> dict[int, Part]:
    """An OTLP/JSON trace export as one part per shard that has spans; BadBatch if it is not JSON. A structure
    that is not OTLP goes whole to shard 0, whose collector answers it."""
    doc = parse_json(payload)
    try:
        groups = [
            [(s, shard_of(_json_id(s.get("traceId")), n)) for s in ss.get("spans", ())]
            for rs in doc["resourceSpans"]
            for ss in rs.get("scopeSpans", ())
        ]
    except (KeyError, TypeError, AttributeError):
        return {0: Part(payload, 0)}
    used = {i for g in groups for _, i in g}
    if len(used) <= 1:
        return {used.pop() if used else 0: Part(payload, sum(map(len, groups)))}
    out: dict[int, dict] = {}
    counts = dict.fromkeys(used, 0)
    spans = iter(groups)
    for rs in doc["resourceSpans"]:
        for ss in rs.get("scopeSpans", ()):
            by: dict[int, list] = {}
            for s, i in next(spans):
                by.setdefault(i, []).append(s)
            for i, ss_spans in by.items():
                part = out.setdefault(i, {"resourceSpans": []})
                part["resourceSpans"].append({**rs, "scopeSpans": [{**ss, "spans": ss_spans}]})
                counts[i] += len(ss_spans)
    return {i: Part(orjson.dumps(d), counts[i]) for i, d in out.items()}


def split(payload: bytes, fmt: str, n: int) -> dict[int, Part]:
    """`payload` ("otlp-proto" or "otlp-json") as one part per shard that has spans."""
    return (split_proto if fmt == "otlp-proto" else split_json)(payload, n)


@dataclass(slots=True)
class Answer:
    """One shard's answer to one part: an HTTP status (0: no answer) and its message."""

    status: int
    message: str


def _message(body: bytes, fmt: str) -> str:
    """The `google.rpc.Status` message of an error body (JSON or protobuf), or '' if it has none."""
    if fmt == "otlp-json":
        try:
            return str(orjson.loads(body).get("message", ""))
        except (orjson.JSONDecodeError, AttributeError):
            return ""
    try:  # googleapis-common-protos: installed with grpcio-status, not required
        from google.rpc import status_pb2

        return status_pb2.Status.FromString(body).message
    except Exception:  # noqa: BLE001 - no such module, or a body that is no Status: the HTTP status says it
        return ""


@dataclass
class Shard:
    """One downstream collector: where it is, and what the router sent it."""

    url: str
    host: str = ""
    port: int = 0
    posts: int = 0  # exports sent (each the parts that were waiting, concatenated)
    parts: int = 0
    spans: int = 0
    failed: int = 0  # parts not landed: refused, unreachable, timed out

    def __post_init__(self) -> None:
        u = urlsplit(self.url if "//" in self.url else f"http://{self.url}")
        if u.scheme != "http" or not u.hostname or u.path not in ("", "/", TRACES_PATH):
            raise ValueError(f"shard {self.url!r}: give http://HOST:PORT of a collector's OTLP/HTTP receiver")
        self.host, self.port = u.hostname, u.port or 4318


class _Link:
    """One keep-alive connection to one shard."""

    def __init__(self, shard: Shard, timeout_s: float):
        self.shard = shard
        self.timeout_s = timeout_s
        self.conn: http.client.HTTPConnection | None = None

    def post(self, body: bytes, fmt: str) -> Answer:
        """POST one export to the shard and read its answer. A reused connection that the shard had closed
        (idle) is opened again once and the export sent again: the shard stores a part it already had once."""
        for _ in (0, 1):
            fresh = self.conn is None
            if fresh:
                self.conn = http.client.HTTPConnection(self.shard.host, self.shard.port, timeout=self.timeout_s)
            try:
                self.conn.request("POST", TRACES_PATH, body, {"Content-Type": CONTENT_TYPE[fmt]})
                r = self.conn.getresponse()
                answer_body = r.read()
            except TimeoutError:
                self.close()
                return Answer(0, f"shard {self.shard.url} did not answer in {self.timeout_s:g} s")
            except (OSError, http.client.HTTPException) as e:
                self.close()
                if fresh:
                    return Answer(0, f"shard {self.shard.url} is unreachable ({type(e).__name__})")
                continue
            if r.will_close:
                self.close()
            return Answer(r.status, "" if r.status == 200 else _message(answer_body, fmt))
        return Answer(0, f"shard {self.shard.url} is unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass(eq=False)
class _Request:
    """One exporter request in flight: its parts by shard, and the shards' answers so far."""

    ticket: Ticket
    parts: dict[int, Part]
    answers: dict[int, Answer] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class _Job:
    """One part of a request, waiting for its shard."""

    request: _Request
    shard: int

    @property
    def part(self) -> Part:
        return self.request.parts[self.shard]

    @property
    def format(self) -> str:
        return self.request.ticket.format


class _Lane:
    """The parts waiting for one shard. A sender takes every protobuf part waiting (up to MAX_POST_BYTES) as one
    export: serialized `ExportTraceServiceRequest`s concatenate into one whose `resource_spans` are theirs, so a
    shard gets exports as large as the exporters' while its senders are busy, and each at once when idle."""

    def __init__(self) -> None:
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._closed = False

    def put(self, job: _Job) -> None:
        with self._cond:
            self._jobs.append(job)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def take(self) -> list[_Job]:
        """The next export's parts; [] once closed and drained."""
        with self._cond:
            while not self._jobs and not self._closed:
                self._cond.wait()
            if not self._jobs:
                return []
            group = [self._jobs.popleft()]
            size = len(group[0].part.body)
            while (
                group[0].format == "otlp-proto"
                and self._jobs
                and self._jobs[0].format == "otlp-proto"
                and size + len(self._jobs[0].part.body) <= MAX_POST_BYTES
            ):
                group.append(self._jobs.popleft())
                size += len(group[-1].part.body)
            return group


def verdict(parts: dict[int, Part], answers: dict[int, Answer], shards: list[Shard]) -> tuple[Outcome, str, int]:
    """The exporter's outcome of a request from its parts' answers: (outcome, message, spans rejected)."""
    retry = {i: a for i, a in answers.items() if a.status == 0 or a.status in RETRYABLE}
    if retry:
        busy = all(a.status == 429 for a in retry.values())
        said = "; ".join(f"shard {shards[i].url}: {a.message or a.status}" for i, a in sorted(retry.items()))
        return (Outcome.BUSY if busy else Outcome.FAILED), f"not landed on every shard, retry later ({said})", 0
    rejected = {i: a for i, a in answers.items() if a.status != 200}
    if not rejected:
        return Outcome.LANDED, "", 0
    first = min(rejected)
    message = f"shard {shards[first].url}: {rejected[first].message or rejected[first].status}"
    if len(rejected) == len(answers):
        return Outcome.REJECTED, message, 0
    return Outcome.LANDED, message, sum(parts[i].spans for i in rejected)


@dataclass
class RouterStats:
    """What the router did: requests answered by outcome, spans landed on their shard (a retried request's
    parts count again; the shard stores them once)."""

    requests: int = 0
    landed: int = 0
    partial: int = 0
    rejected: int = 0
    retryable: int = 0
    spans_landed: int = 0
    by_shard: list[Shard] = field(default_factory=list)


class TraceRouter:
    """Serves OTLP/HTTP traces on (host, port) and forwards each request's spans to `shard_urls` by trace id.

    One thread splits the requests (CPU-bound: more would only share the GIL); `connections` exports are in
    flight to each shard at once, each on its own keep-alive connection. The bounds of the receiver (pending
    bytes, message size, connections) are the collector's."""

    def __init__(
        self,
        shard_urls: list[str],
        host: str = "127.0.0.1",
        port: int = 4318,
        *,
        connections: int = 2,
        max_pending_bytes: int = 64 << 20,
        max_message_bytes: int = 16 << 20,
        retry_after_s: float = 1.0,
        max_connections: int = 512,
        timeout_s: float = FORWARD_TIMEOUT_S,
    ):
        if not shard_urls:
            raise ValueError("give at least one shard")
        self.shards = [Shard(u) for u in shard_urls]
        self.stats = RouterStats(by_shard=self.shards)
        self._lock = threading.Lock()
        self.queue = PendingQueue(max_pending_bytes)
        self.receiver = OtlpHttpReceiver(
            host, port, self.queue, max_message_bytes, retry_after_s, max_connections=max_connections
        )
        self._lanes = [_Lane() for _ in self.shards]
        self._splitter = threading.Thread(target=self._split_loop, name="budgetscope-router-split", daemon=True)
        self._senders = [
            threading.Thread(
                target=self._send_loop, args=(i, timeout_s), daemon=True, name=f"budgetscope-router-{i}-{k}"
            )
            for i in range(len(self.shards))
            for k in range(connections)
        ]

    @property
    def port(self) -> int:
        return self.receiver.port

    def __enter__(self) -> TraceRouter:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        for t in (self._splitter, *self._senders):
            t.start()
        self.receiver.start()

    def stop(self, timeout_s: float = 30.0) -> RouterStats:
        """Stop accepting, answer every request already read (forwarded or refused), then close."""
        self.receiver.stop_accepting(0)
        self.queue.close()
        self._splitter.join(timeout_s)
        for lane in self._lanes:
            lane.close()
        for t in self._senders:
            t.join(timeout_s)
        self.receiver.close(timeout_s)
        return self.stats

    def _split_loop(self) -> None:
        while group := self.queue.take(0.0, 1):
            for ticket in group:
                self._split(ticket)

    def _split(self, ticket: Ticket) -> None:
        """Split one request onto the shards' lanes (or reject it: not OTLP)."""
        try:
            parts = split(ticket.payload, ticket.format, len(self.shards))
        except BadBatch as e:
            self._resolve(ticket, Outcome.REJECTED, str(e), 0)
            return
        request = _Request(ticket, parts)
        for i in parts:
            self._lanes[i].put(_Job(request, i))

    def _send_loop(self, i: int, timeout_s: float) -> None:
        link = _Link(self.shards[i], timeout_s)
        try:
            while jobs := self._lanes[i].take():
                answer = link.post(b"".join(j.part.body for j in jobs), jobs[0].format)
                # refused for good (a bad span, too large for the shard): send its parts alone, to land the good
                refused = answer.status not in (0, 200, *RETRYABLE)
                answers = (
                    [link.post(j.part.body, j.format) for j in jobs]
                    if refused and len(jobs) > 1
                    else [answer] * len(jobs)
                )
                self._count_post(i, jobs, answers)
                for job, a in zip(jobs, answers):
                    self._answered(job, a)
        finally:
            link.close()

    def _answered(self, job: _Job, answer: Answer) -> None:
        """A shard answered one part; the request is resolved once every part is answered."""
        request = job.request
        with self._lock:
            request.answers[job.shard] = answer
            if len(request.answers) < len(request.parts):
                return
        outcome, message, rejected = verdict(request.parts, request.answers, self.shards)
        self._resolve(request.ticket, outcome, message, rejected)

    def _resolve(self, ticket: Ticket, outcome: Outcome, message: str, rejected: int) -> None:
        with self._lock:
            s = self.stats
            s.requests += 1
            s.landed += outcome is Outcome.LANDED
            s.partial += outcome is Outcome.LANDED and bool(rejected)
            s.rejected += outcome is Outcome.REJECTED
            s.retryable += outcome in (Outcome.BUSY, Outcome.FAILED)
        self.queue.release(ticket.reserved)
        ticket.rejected_spans = rejected
        ticket.resolve(outcome, message)

    def _count_post(self, i: int, jobs: list[_Job], answers: list[Answer]) -> None:
        with self._lock:
            shard = self.shards[i]
            shard.posts += 1
            for job, a in zip(jobs, answers):
                shard.parts += 1
                if a.status == 200:
                    shard.spans += job.part.spans
                    self.stats.spans_landed += job.part.spans
                elif a.status == 0 or a.status in RETRYABLE:
                    shard.failed += 1
