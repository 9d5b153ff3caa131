"""Clients that leave the engine mid-stream, many at once and at every point of a request's life (queued, in
prefill, after some tokens; politely or with a TCP reset), beside clients that stay: every KV block comes back,
the scheduler empties, and each request's root span says what happened to it (`cancelled` for those that left,
`ok` for the others), with its stages inside it."""

from __future__ import annotations

import json
import random
import socket
import struct
import threading

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.telemetry import Telemetry
from budgetscope.instrument import Instrumentation
from engine_fixtures import running_server, wait_for


def _leave_after(url: str, request_id: str, num_lines: int) -> None:
    body = {"prompt": f"leaving {request_id}", "max_tokens": 300, "ignore_eos": True, "stream": True}
    with httpx.stream(
        "POST", f"{url}/v1/completions", json=body, headers={"x-request-id": request_id}, timeout=30
    ) as r:
        lines = r.iter_lines()
        for _ in range(num_lines):
            next(lines)


def _reset_after_sending(url: str, request_id: str) -> None:
    """Send a streaming request, then drop the connection with a TCP RST (SO_LINGER 0), no FIN."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"prompt": "reset", "max_tokens": 300, "ignore_eos": True, "stream": True}).encode()
    s = socket.create_connection((host, int(port)))
    s.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"x-request-id: %s\r\nContent-Length: %d\r\n\r\n%s" % (request_id.encode(), len(body), body)
    )
    s.recv(200)  # the headers (and perhaps a token): it is running or queued
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def _stay(url: str, request_id: str) -> None:
    body = {"prompt": f"staying {request_id}", "max_tokens": 12, "ignore_eos": True, "stream": True}
    with httpx.stream(
        "POST", f"{url}/v1/completions", json=body, headers={"x-request-id": request_id}, timeout=60
    ) as r:
        assert list(r.iter_lines())[-2] == "data: [DONE]"


@pytest.mark.slow
def test_clients_leaving_mid_stream_free_every_block_and_are_traced_cancelled():
    exporter = InMemorySpanExporter()
    tel = Telemetry(Instrumentation(service_name="budgetscope-engine", exporter=exporter))
    config = EngineConfig(model="tiny", max_model_len=512, num_kv_blocks=96, max_num_seqs=4, max_num_batched_tokens=64)
    rng = random.Random(17)
    leaving = {f"leave-{i}": rng.choice([0, 0, 1, 2, 5, 20]) for i in range(14)}
    resetting = [f"reset-{i}" for i in range(4)]
    staying = [f"stay-{i}" for i in range(4)]
    with running_server(config, tel) as (url, engine):
        threads = (
            [threading.Thread(target=_leave_after, args=(url, rid, n)) for rid, n in leaving.items()]
            + [threading.Thread(target=_reset_after_sending, args=(url, rid)) for rid in resetting]
            + [threading.Thread(target=_stay, args=(url, rid)) for rid in staying]
        )
        rng.shuffle(threads)
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert wait_for(
            lambda: engine.block_manager.num_used_blocks == 0 and not engine.scheduler.has_work, timeout_s=20
        ), (engine.block_manager.num_used_blocks, engine.scheduler.num_running)
        assert wait_for(lambda: sum(engine.metrics.outcomes.values()) == len(threads), timeout_s=10)
        tel.flush()
    spans = exporter.get_finished_spans()
    roots = {s.attributes["gen_ai.response.id"]: s for s in spans if s.name.startswith("text_completion ")}
    assert set(roots) == set(leaving) | set(resetting) | set(staying)
    outcomes = {rid: root.attributes["budgetscope.outcome"] for rid, root in roots.items()}
    assert {rid: o for rid, o in outcomes.items() if rid.startswith("stay")} == dict.fromkeys(staying, "ok")
    assert all(outcomes[rid] == "cancelled" for rid in [*leaving, *resetting]), outcomes
    for root in roots.values():
        kids = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
        assert kids and all(root.start_time <= k.start_time <= k.end_time <= root.end_time for k in kids)
        if root.attributes["budgetscope.outcome"] == "cancelled":
            assert root.attributes["gen_ai.usage.output_tokens"] < 300
