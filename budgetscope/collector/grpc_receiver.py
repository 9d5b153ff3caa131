"""`OtlpGrpcReceiver`: `opentelemetry.proto.collector.trace.v1.TraceService/Export` over gRPC.

The request stays serialized bytes end to end (a generic handler without deserializer): the archive decodes it.
Statuses follow the OTLP/gRPC spec: OK with an empty `ExportTraceServiceResponse` once the batch is in the
archive; INVALID_ARGUMENT (not retried) for a bad batch; UNAUTHENTICATED for a missing or wrong bearer token; RESOURCE_EXHAUSTED with RetryInfo when the pending
bytes are at their limit; UNAVAILABLE with RetryInfo while shutting down or when the archive failed. The
RetryInfo travels both in the standard `grpc-status-details-bin` Status and in `google.rpc.retryinfo-bin`,
the trailer the OpenTelemetry Python exporter reads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from budgetscope.auth import bearer_ok
from budgetscope.collector import status as st
from budgetscope.collector.listen import why_not
from budgetscope.collector.pending import Outcome, PendingQueue

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
METRICS_SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"  # GPU samples → gpu_samples
NUM_WORKERS = 32  # handler threads: most of their life is spent waiting for the writer's commit
MAX_CONCURRENT_RPCS = 128  # beyond this gRPC itself answers RESOURCE_EXHAUSTED (bounds bodies held by gRPC)


class GrpcUnavailable(ImportError):
    """grpcio is not installed."""


def _grpc():
    try:
        # imported on use: grpc 48 ms to import
        import grpc
    except ImportError:
        raise GrpcUnavailable(
            "OTLP/gRPC needs grpcio: pip install 'budgetscope[instrument]' (or run with the gRPC receiver off)"
        ) from None
    return grpc


class OtlpGrpcReceiver:
    """Serves OTLP/gRPC on (host, port); port 0 picks a free port (see `.port`). OSError if taken.
    `tls`: (certificate chain PEM, private key PEM) to serve over TLS. `token`: every call must carry the
    `authorization: Bearer <token>` metadata."""

    def __init__(
        self,
        host: str,
        port: int,
        queue: PendingQueue,
        max_message_bytes: int,
        retry_after_s: float,
        metrics: bool = False,
        *,
        tls: tuple[bytes, bytes] | None = None,
        token: str | None = None,
    ):
        grpc = _grpc()
        self.queue = queue
        self.retry_after_s = retry_after_s
        self.token = token
        self._grpc = grpc
        self._codes = {
            Outcome.REJECTED: grpc.StatusCode.INVALID_ARGUMENT,
            Outcome.BUSY: grpc.StatusCode.RESOURCE_EXHAUSTED,
            Outcome.CLOSED: grpc.StatusCode.UNAVAILABLE,
            Outcome.FAILED: grpc.StatusCode.UNAVAILABLE,
        }
        handler = grpc.method_handlers_generic_handler(
            SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self._export)}
        )
        metrics_on = metrics
        metrics = grpc.method_handlers_generic_handler(
            METRICS_SERVICE,
            {
                "Export": grpc.unary_unary_rpc_method_handler(
                    lambda request, context: self._export(request, context, "otlp-metrics-proto")
                )
            },
        )
        self._pool = ThreadPoolExecutor(NUM_WORKERS, thread_name_prefix="budgetscope-otlp-grpc")
        self._server = grpc.server(
            self._pool,
            handlers=[handler, metrics] if metrics_on else [handler],
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
            options=[
                ("grpc.so_reuseport", 0),  # else a second collector binds silently
                ("grpc.max_receive_message_length", max_message_bytes),
            ],
        )
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            if tls is None:
                self.port: int = self._server.add_insecure_port(address)
            else:
                cert, key = tls
                self.port = self._server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
        except RuntimeError:
            self.port = 0
        if not self.port:
            self._pool.shutdown(wait=False)
            raise OSError(f"cannot listen on {address} ({why_not(host, port) or 'gRPC could not bind it'})")
        self._stopped = None

    def start(self) -> None:
        self._server.start()

    def stop_accepting(self, grace_s: float) -> None:
        """Refuse new RPCs at once; those in progress get `grace_s` to be answered (see `close`)."""
        self._stopped = self._server.stop(grace_s)

    def close(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the RPCs in progress to be answered."""
        if self._stopped is not None:
            self._stopped.wait(timeout_s)
        self._pool.shutdown(wait=False)

    def _export(self, request: bytes, context, fmt: str = "otlp-proto") -> bytes:
        if self.token is not None and not bearer_ok(_metadata(context, "authorization"), self.token):
            context.abort(
                self._grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (authorization: Bearer …)"
            )
        reserved = max(len(request), 1)
        refused = self.queue.reserve(reserved)
        if refused:
            self._abort(
                context,
                refused,
                "the collector is busy (pending bytes at their limit); retry later"
                if refused is Outcome.BUSY
                else "the collector is shutting down; retry later",
            )
        peer = context.peer().split(":", 1)[-1]  # "ipv4:127.0.0.1:5000" → "127.0.0.1:5000"
        ticket = self.queue.submit(request, fmt, "otlp-grpc", peer, reserved)
        if ticket.outcome is not Outcome.LANDED:
            self._abort(context, ticket.outcome, ticket.error or "the collector is shutting down; retry later")
        return b""  # an empty ExportTraceServiceResponse: full success

    def _abort(self, context, outcome: Outcome, message: str) -> None:
        code = self._codes[outcome]
        if outcome is not Outcome.REJECTED:
            context.set_trailing_metadata(
                (
                    ("grpc-status-details-bin", st.status_proto(code.value[0], message, self.retry_after_s)),
                    ("google.rpc.retryinfo-bin", st.retry_info(self.retry_after_s)),
                )
            )
        context.abort(code, message)


def _metadata(context, key: str) -> str | None:
    for k, v in context.invocation_metadata():
        if k == key:
            return v
    return None
