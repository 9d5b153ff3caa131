"""What runs inside a service: the request/stage API that emits budgetscope's span contract.

    instr = Instrumentation(service_name="my-engine")          # exporter from OTEL_* variables
    req = instr.start_request(model="tiny", tier="interactive", traceparent=headers.get("traceparent"))
    req.mark("queue"); req.mark("prefill"); req.token(); ...; req.mark("postprocess")
    req.finish(outcome="ok", input_tokens=12, output_tokens=40)

Exporters are flushed at exit and on SIGTERM (budgetscope.instrument.process_exit). Importing this package
loads neither the OpenTelemetry SDK nor torch; see docs/instrumentation.md.
"""

from budgetscope.instrument.client import ClientRequest, ClientTracer
from budgetscope.instrument.context import current_request, stage
from budgetscope.instrument.instrumentation import Instrumentation
from budgetscope.instrument.noop_request import NoopRequestTrace
from budgetscope.instrument.process_exit import install_sigterm_handler
from budgetscope.instrument.request_trace import RequestFinishedError, RequestTrace

__all__ = [
    "ClientRequest",
    "ClientTracer",
    "Instrumentation",
    "NoopRequestTrace",
    "RequestFinishedError",
    "RequestTrace",
    "current_request",
    "install_sigterm_handler",
    "stage",
]
