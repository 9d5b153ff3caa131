"""A real engine behind a real uvicorn server on 127.0.0.1 (a free port), for the engine's HTTP tests."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.engine_loop import EngineLoop
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.server import Server
from budgetscope.engine.telemetry import Telemetry


@contextmanager
def running_server(config: EngineConfig | None = None, telemetry: Telemetry | None = None, api_key: str | None = None):
    """Yield (base_url, engine); the server and the engine thread stop on exit. `api_key`: as `--api-key`."""
    import uvicorn

    engine = LLMEngine(config or EngineConfig(model="tiny", max_model_len=512, num_kv_blocks=256), telemetry)
    loop = EngineLoop(engine).start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(Server(loop, api_key).app, log_level="warning", lifespan="off"))
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
