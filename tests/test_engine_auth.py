"""`engine serve --api-key`: /v1/* needs `Authorization: Bearer KEY` (as `vllm serve --api-key`), /health and
/metrics stay open, and the load generator sends the key from OPENAI_API_KEY or -H."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")

from click.testing import CliRunner

from budgetscope.engine.engine_config import EngineConfig
from engine_fixtures import running_server

KEY = "sk-test-0123456789"


@pytest.fixture(scope="module")
def served():
    with running_server(EngineConfig(model="tiny", max_model_len=256, num_kv_blocks=64), api_key=KEY) as s:
        yield s


def test_v1_needs_the_key_health_and_metrics_do_not(served):
    url, _ = served
    body = {"prompt": "hi", "max_tokens": 2}
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": KEY}, {"X-Api-Key": KEY}):
        r = httpx.post(f"{url}/v1/completions", json=body, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", headers
        assert r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{url}/v1/models").status_code == 401
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(f"{url}/v1/models", headers=auth).status_code == 200
    assert httpx.post(f"{url}/v1/completions", json=body, headers=auth).json()["usage"]["completion_tokens"] == 2
    assert httpx.get(f"{url}/health").status_code == 200 and httpx.get(f"{url}/metrics").status_code == 200


@pytest.mark.parametrize("how", ["env", "header"])
def test_the_load_generator_sends_the_key(served, how, monkeypatch, tmp_path):
    from budgetscope.commands.load import load

    url, _ = served
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = [url, "--rate", "20", "--requests", "4", "--prompt-tokens", "4", "--output-tokens", "2", "--format", "json"]
    if how == "env":
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
    else:
        args += ["-H", f"Authorization: Bearer {KEY}"]
    result = CliRunner().invoke(load, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["ok"], summary["status_codes"]) == (4, {"200": 4}), summary


def test_without_the_key_the_load_generator_sees_401(served, monkeypatch):
    from budgetscope.commands.load import load

    url, _ = served
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = CliRunner().invoke(
        load,
        [
            url,
            "--rate",
            "20",
            "--requests",
            "2",
            "--prompt-tokens",
            "4",
            "--output-tokens",
            "2",
            "--model",
            "tiny",
            "--format",
            "json",
        ],
    )
    assert json.loads(result.stdout)["status_codes"] == {"401": 2}


def test_serve_passes_the_key_and_warns_without_one_beyond_loopback(monkeypatch):
    """The CLI wiring, with the server itself faked (nothing listens): --api-key / $BUDGETSCOPE_API_KEY reach
    it, and a host other machines can reach without a key prints a warning."""
    import budgetscope.engine.server as server_module
    from budgetscope.engine.command import engine

    seen = []

    def fake_run_server(llm, host, port, log_level, api_key):
        seen.append((host, api_key))

    monkeypatch.setattr(server_module, "serve", fake_run_server)
    monkeypatch.delenv("BUDGETSCOPE_API_KEY", raising=False)
    base = ["serve", "--config", "tiny", "--max-model-len", "64", "--kv-blocks", "8", "--no-instrument"]
    result = CliRunner().invoke(engine, [*base, "--host", "0.0.0.0"])
    assert result.exit_code == 0, result.output
    assert "warning: listening on 0.0.0.0 without authentication" in result.output and seen[-1] == ("0.0.0.0", None)
    monkeypatch.setenv("BUDGETSCOPE_API_KEY", KEY)
    result = CliRunner().invoke(engine, [*base])
    assert "warning" not in result.output and seen[-1] == ("127.0.0.1", KEY)
