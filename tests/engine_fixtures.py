"""A real engine behind a real uvicorn server on 127.0.0.1 (a free port), for the engine's HTTP tests.

By default the engine runs in its own process (`CoreClient`), as `engine serve` runs it; `in_process=True` steps
it on a thread of the test's process (`--engine-in-process`).
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from types import SimpleNamespace

from budgetscope.engine.core_client import CoreClient
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.engine_loop import EngineLoop
from budgetscope.engine.frontend import Frontend
from budgetscope.engine.http_protocol import uvicorn_config
from budgetscope.engine.server import Server
from budgetscope.engine.telemetry import Telemetry


class EngineProcessView:
    """What the tests read of an engine (`scheduler`, `block_manager`, `metrics`), for one in the engine process:
    the state it sent with its last step (requests sent but not yet taken count as waiting, as admission counts
    them), and the API process's metrics."""

    def __init__(self, client: CoreClient):
        self.client = client
        self.metrics = client.metrics

    @property
    def scheduler(self):
        g = self.client.state.gauges
        waiting = g.num_waiting + self.client.num_in_transit
        return SimpleNamespace(num_waiting=waiting, num_running=g.num_running, has_work=bool(waiting or g.num_running))

    @property
    def block_manager(self):
        return SimpleNamespace(num_used_blocks=self.client.state.gauges.kv_blocks_used)


@contextmanager
def running_server(
    config: EngineConfig | None = None,
    telemetry: Telemetry | None = None,
    api_key: str | None = None,
    in_process: bool = False,
):
    """Yield (base_url, engine); the server and the engine stop on exit. `api_key`: as `--api-key`. `engine` is the
    LLMEngine in process, else an EngineProcessView of the engine process (with `.client`, its CoreClient)."""
    import uvicorn

    config = config or EngineConfig(model="tiny", max_model_len=512, num_kv_blocks=256)
    if in_process:
        from budgetscope.engine.llm_engine import LLMEngine

        engine = LLMEngine(config, telemetry)
        loop = EngineLoop(engine).start()
    else:
        loop = CoreClient(Frontend(config, telemetry)).start()
        engine = EngineProcessView(loop)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(Server(loop, api_key).app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", engine
    finally:
        server.should_exit = True
        thread.join(10)
        loop.stop()
        sock.close()


def wait_for(predicate, timeout_s: float = 5.0, interval_s: float = 0.01) -> bool:
    """Poll predicate until it is true or timeout_s passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
