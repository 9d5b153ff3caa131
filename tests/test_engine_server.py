"""The server end to end over real HTTP on 127.0.0.1: streaming, non-streaming, errors, overload, disconnects."""

import json
import threading

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")

from budgetscope.engine.engine_config import EngineConfig
from engine_fixtures import running_server, wait_for


@pytest.fixture(scope="module", params=["engine process", "engine thread"])
def served(request):
    """The server with its engine in its own process (`engine serve`'s default), then on a thread (in process)."""
    config = EngineConfig(model="tiny", max_model_len=512, num_kv_blocks=256, max_prompt_tokens=100)
    with running_server(config, in_process=request.param == "engine thread") as s:
        yield s


def sse_events(response):
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            events.append(line[len("data: ") :])
    return events


def test_completion_non_streaming(served):
    url, _ = served
    r = httpx.post(
        f"{url}/v1/completions",
        json={"model": "tiny", "prompt": "hello", "max_tokens": 7, "ignore_eos": True, "temperature": 0},
    )
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 7 and body["usage"]["prompt_tokens"] == 6  # BOS + 5 bytes
    assert r.headers["x-request-id"] == body["id"]


def test_completion_streaming_one_chunk_per_token_then_done(served):
    url, _ = served
    payload = {
        "prompt": "stream me",
        "max_tokens": 9,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{url}/v1/completions", json=payload) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    token_chunks = [c for c in chunks if c["choices"]]
    assert len(token_chunks) == 9
    assert [c["choices"][0]["finish_reason"] for c in token_chunks] == [None] * 8 + ["length"]
    assert chunks[-1]["usage"]["completion_tokens"] == 9


def test_chat_completion_both_modes(served):
    url, _ = served
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    r = httpx.post(f"{url}/v1/chat/completions", json={"messages": messages, "max_tokens": 4, "ignore_eos": True})
    body = r.json()
    assert r.status_code == 200 and body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant" and body["usage"]["completion_tokens"] == 4
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json={"messages": messages, "max_tokens": 3, "ignore_eos": True, "stream": True},
    ) as r:
        events = sse_events(r)
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]" and len(chunks) == 3
    assert chunks[0]["object"] == "chat.completion.chunk" and chunks[0]["choices"][0]["delta"]["role"] == "assistant"


def test_models_health_and_errors(served):
    url, _ = served
    assert httpx.get(f"{url}/health").status_code == 200
    assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "tiny"
    oversize = httpx.post(f"{url}/v1/completions", json={"prompt": "x" * 200, "max_tokens": 2})
    assert oversize.status_code == 400 and "limit is 100" in oversize.json()["error"]["message"]
    too_long = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 600})
    assert too_long.status_code == 400
    assert httpx.post(f"{url}/v1/completions", content=b"{nope").status_code == 400
    assert httpx.post(f"{url}/v1/completions", json={"prompt": 5}).status_code == 400
    assert httpx.post(f"{url}/v1/completions", json={"prompt": "a", "temperature": -1}).status_code == 400
    assert httpx.post(f"{url}/v1/completions", json={"prompt": "a", "model": "gpt-9"}).status_code == 404


def test_token_id_prompt_and_seeded_sampling_is_reproducible(served):
    url, _ = served
    payload = {"prompt": [256, 104, 105], "max_tokens": 6, "seed": 11, "temperature": 0.9, "ignore_eos": True}
    a = httpx.post(f"{url}/v1/completions", json=payload).json()
    b = httpx.post(f"{url}/v1/completions", json=payload).json()
    assert a["usage"]["prompt_tokens"] == 3
    assert a["choices"][0]["text"] == b["choices"][0]["text"]


def test_prefix_cache_hits_are_reported_in_usage(served):
    url, _ = served
    prompt = "a shared system prompt that spans several blocks of sixteen tokens each " * 1
    httpx.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 1})
    again = httpx.post(f"{url}/v1/completions", json={"prompt": prompt + "and more", "max_tokens": 1}).json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 64


def test_streaming_client_disconnect_frees_blocks(served):
    url, engine = served
    with httpx.stream(
        "POST", f"{url}/v1/completions", json={"prompt": "long", "max_tokens": 400, "ignore_eos": True, "stream": True}
    ) as r:
        lines = r.iter_lines()
        for _ in range(3):
            next(lines)
        assert engine.block_manager.num_used_blocks > 0
    assert wait_for(lambda: engine.block_manager.num_used_blocks == 0 and engine.scheduler.num_running == 0)


def test_non_streaming_client_disconnect_frees_blocks():
    """The client gives up after 0.3 s on a 2,000-token request (5 s here; 400 tokens took only 0.5–0.8 s, a
    margin a faster machine could eat): the server frees its blocks without waiting for the end."""
    config = EngineConfig(model="tiny", max_model_len=2048, num_kv_blocks=256)
    with running_server(config) as (url, engine):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{url}/v1/completions",
                json={"prompt": "long", "max_tokens": 2000, "ignore_eos": True},
                timeout=httpx.Timeout(5.0, read=0.3),
            )
        # the outcome first: in the engine process's state the request may not have shown yet
        assert wait_for(lambda: engine.metrics.outcomes.get("cancelled") == 1)
        assert wait_for(lambda: engine.block_manager.num_used_blocks == 0 and engine.scheduler.num_running == 0)


def test_deadline_gives_timeout(served):
    url, _ = served
    r = httpx.post(
        f"{url}/v1/completions",
        json={"prompt": "slow", "max_tokens": 400, "ignore_eos": True},
        headers={"x-budgetscope-deadline-ms": "50"},
    )
    assert r.status_code == 504 and r.json()["error"]["type"] == "timeout"


def test_metrics_text(served):
    url, _ = served
    httpx.post(f"{url}/v1/completions", json={"prompt": "m", "max_tokens": 3, "ignore_eos": True})
    text = httpx.get(f"{url}/metrics").text
    for name in ("requests_running", "requests_waiting", "kv_cache_usage_ratio", "generation_tokens_total"):
        assert f"# TYPE budgetscope_engine_{name} " in text
    assert "# TYPE budgetscope_engine_time_to_first_token_seconds histogram" in text
    assert 'budgetscope_engine_inter_token_latency_seconds_bucket{le="+Inf"}' in text
    count = [
        line for line in text.splitlines() if line.startswith("budgetscope_engine_time_to_first_token_seconds_count")
    ]
    assert int(count[0].split()[1]) >= 1
    assert 'budgetscope_engine_requests_total{outcome="ok"}' in text


def test_overload_answers_429_with_retry_after():
    config = EngineConfig(
        model="tiny", max_model_len=2048, num_kv_blocks=256, max_num_seqs=1, max_num_batched_tokens=64, max_waiting=1
    )
    with running_server(config) as (url, engine):
        long = {"prompt": "hog", "max_tokens": 2000, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=long) as first:
            assert first.status_code == 200
            lines = first.iter_lines()  # keep a reference: a dropped iterator closes the response
            next(lines)  # running: holds the only sequence slot
            waiter = threading.Thread(
                target=httpx.post,
                args=(f"{url}/v1/completions",),
                kwargs={"json": {"prompt": "wait", "max_tokens": 2}, "timeout": 30},
            )
            waiter.start()
            assert wait_for(lambda: engine.scheduler.num_waiting == 1)
            # httpx's default 5 s would time the answer: on a loaded 2-core machine it once took longer
            rejected = httpx.post(f"{url}/v1/completions", json={"prompt": "no room", "max_tokens": 2}, timeout=30)
            assert rejected.status_code == 429
            assert int(rejected.headers["retry-after"]) >= 1
            assert rejected.json()["error"]["type"] == "rate_limit_exceeded"
        waiter.join(30)
        assert 'requests_total{outcome="rejected"} 1' in httpx.get(f"{url}/metrics").text


def test_client_leaving_while_queued_is_dropped_from_the_queue():
    config = EngineConfig(
        model="tiny", max_model_len=2048, num_kv_blocks=256, max_num_seqs=1, max_num_batched_tokens=64
    )
    with running_server(config) as (url, engine):
        hog = {"prompt": "hog", "max_tokens": 2000, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=hog) as first:
            lines = first.iter_lines()
            next(lines)
            with httpx.stream("POST", f"{url}/v1/completions", json={**hog, "prompt": "queued"}) as second:
                assert second.status_code == 200  # headers go out at once; no token yet
                assert wait_for(lambda: engine.scheduler.num_waiting == 1)
            assert wait_for(lambda: engine.scheduler.num_waiting == 0)
            assert engine.scheduler.num_running == 1
        assert wait_for(lambda: engine.block_manager.num_used_blocks == 0 and not engine.scheduler.has_work)
        assert wait_for(lambda: engine.metrics.outcomes.get("cancelled") == 2)


def test_serving_loop_freezes_the_heap_and_shortens_the_gil_switch_interval():
    """Both keep instrumentation and HTTP bursts out of ITL (docs/engine.md, measured figures)."""
    import gc
    import sys

    from budgetscope.engine.engine_loop import EngineLoop
    from budgetscope.engine.llm_engine import LLMEngine
    from budgetscope.gil import SWITCH_INTERVAL_S

    before = sys.getswitchinterval()
    loop = EngineLoop(LLMEngine(EngineConfig(model="tiny", max_model_len=128, num_kv_blocks=32))).start()
    try:
        assert gc.get_freeze_count() > 0
        assert wait_for(lambda: sys.getswitchinterval() == min(before, SWITCH_INTERVAL_S))
    finally:
        loop.stop()
    assert sys.getswitchinterval() == before
    assert gc.get_freeze_count() == 0
