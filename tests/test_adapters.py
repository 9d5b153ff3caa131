"""Source adapters → `requests` rows, on traces built in the exact wire format."""

from __future__ import annotations

import math

import pytest

from conftest import rows
from otlp_wire import MS, T0, export, jsonl, native_request, span, span_id, trace_id

COLS = (
    "frontend_ms, queue_ms, prefill_ms, decode_ms, postprocess_ms, unaccounted_ms, ttft_ms, e2e_ms, "
    "network_ms, ttft_network_ms, client_ttft_ms, client_e2e_ms"
)


def test_native_stages_and_client_join(archive_path, ingest_text):
    _, s = native_request(client=(7, 3), output_tokens=41)
    ingest_text(archive_path, jsonl(export(s[:-1]), export(s[-1:], service="loadgen")))
    (r,) = rows(archive_path, f"SELECT {COLS}, tpot_ms, has_client_span, tier, model, input_tokens FROM requests")
    (
        frontend,
        queue,
        prefill,
        decode,
        post,
        unacc,
        ttft,
        e2e,
        net,
        ttft_net,
        c_ttft,
        c_e2e,
        tpot,
        has_c,
        tier,
        model,
        inp,
    ) = r
    assert (frontend, queue, prefill, decode, post) == (2.0, 10.0, 50.0, 400.0, 3.0)
    assert unacc == 0.0 and ttft == 62.0 and e2e == 465.0
    assert (net, ttft_net) == (10.0, 10.0)  # uplink 7 + downlink 3, on both legs
    assert (c_ttft, c_e2e) == (72.0, 475.0)
    assert tpot == 10.0 and has_c and (tier, model, inp) == ("interactive", "m", 100)


def test_genai_span_names_derive_the_same_row_as_the_old_names(tmp_path, ingest_text):
    """`{gen_ai.operation.name} {gen_ai.request.model}` for the server root and the client span (today's names)
    and `llm.request` / `llm.client.request` (before) give the same row; another scope's `chat m` is not ours."""
    _, old = native_request(client=(7, 3))
    new = [
        dict(sp, name="text_completion m") if sp["name"] in ("llm.request", "llm.client.request") else sp for sp in old
    ]
    cols = f"SELECT {COLS}, has_client_span, source FROM requests"
    for name, spans in (("old", old), ("new", new)):
        ingest_text(tmp_path / name, jsonl(export(spans[:-1]), export(spans[-1:], service="loadgen")))
    assert rows(tmp_path / "new", cols) == rows(tmp_path / "old", cols)
    assert rows(tmp_path / "new", "SELECT count(*), max(network_ms) FROM requests") == [(1, 10.0)]
    other = span(trace_id(), span_id(), "chat m", T0, T0 + MS, kind=2, attributes={"budgetscope.outcome": "ok"})
    ingest_text(tmp_path / "other", jsonl(export([other], scope="someone.else")))
    assert rows(tmp_path / "other", "SELECT source FROM spans") == [("other",)]


def test_native_without_client_has_unknown_network(archive_path, ingest_text):
    ingest_text(archive_path, jsonl(export(native_request()[1])))
    assert rows(archive_path, "SELECT network_ms, ttft_network_ms, client_ttft_ms, has_client_span FROM requests") == [
        (None, None, None, False)
    ]


def test_repeated_stages_add_up_and_ttft_window_is_clipped(archive_path, ingest_text):
    """Preemption during decode: queue and prefill again after the first token."""
    stages = (
        ("frontend", 1),
        ("queue", 5),
        ("prefill", 20),
        ("decode", 100),
        ("queue", 30),
        ("prefill", 25),
        ("decode", 200),
        ("postprocess", 2),
    )
    _, s = native_request(stages=stages, extra_root={"budgetscope.first_token_unix_nano": T0 + 26 * MS})
    ingest_text(archive_path, jsonl(export(s)))
    assert rows(
        archive_path,
        "SELECT queue_ms, prefill_ms, decode_ms, ttft_ms, ttft_queue_ms, ttft_prefill_ms, "
        "queue_entries, unaccounted_ms, ttft_unaccounted_ms FROM requests",
    ) == [(35.0, 45.0, 300.0, 26.0, 5.0, 20.0, 2, 0.0, 0.0)]


def test_first_token_falls_back_to_the_first_decode_span(archive_path, ingest_text):
    stages = (("queue", 5), ("prefill", 20), ("decode", 100), ("queue", 30), ("prefill", 25), ("decode", 200))
    _, s = native_request(stages=stages)
    ingest_text(archive_path, jsonl(export(s)))
    assert rows(archive_path, "SELECT ttft_ms, first_token_ns FROM requests") == [(25.0, T0 + 25 * MS)]


def test_itl_split_across_decode_spans_is_joined_in_order(archive_path, ingest_text):
    tid, root = trace_id(), span_id()
    spans = [
        span(tid, root, "llm.request", T0, T0 + 100 * MS, kind=2, attributes={"gen_ai.usage.output_tokens": 4}),
        span(tid, span_id(), "stage.prefill", T0, T0 + 10 * MS, parent=root),
        span(
            tid,
            span_id(),
            "stage.decode",
            T0 + 60 * MS,
            T0 + 100 * MS,
            parent=root,
            attributes={"budgetscope.decode.itl_ms": [20.0]},
        ),
        span(
            tid,
            span_id(),
            "stage.decode",
            T0 + 10 * MS,
            T0 + 40 * MS,
            parent=root,
            attributes={"budgetscope.decode.itl_ms": [10.0, 20.0]},
        ),
    ]
    ingest_text(archive_path, jsonl(export(spans)))
    assert rows(archive_path, "SELECT itl_ms, tier, outcome, unaccounted_ms FROM requests") == [
        ([10.0, 20.0, 20.0], "default", "ok", 20.0)
    ]


def test_one_token_request_has_nan_tpot(archive_path, ingest_text):
    ingest_text(archive_path, jsonl(export(native_request(output_tokens=1)[1])))
    ((tpot,),) = rows(archive_path, "SELECT tpot_ms FROM requests")
    assert math.isnan(tpot)


def _vllm_span(tid, sid, parent, *, queue=0.05, ttft=0.30, prefill=0.20, decode=1.5, e2e=1.9):
    return span(
        tid,
        sid,
        "llm_request",
        T0,
        T0 + int(e2e * 1e9),
        parent=parent,
        kind=2,
        attributes={
            "gen_ai.response.model": "meta-llama/Llama-3.2-1B",
            "gen_ai.request.id": "cmpl-abc",
            "gen_ai.usage.prompt_tokens": 128,
            "gen_ai.usage.completion_tokens": 64,
            "gen_ai.request.max_tokens": 64,
            "gen_ai.request.temperature": 0.0,
            "gen_ai.request.top_p": 1.0,
            "gen_ai.request.n": 1,
            "gen_ai.latency.time_in_queue": queue,
            "gen_ai.latency.time_to_first_token": ttft,
            "gen_ai.latency.e2e": e2e,
            "gen_ai.latency.time_in_model_prefill": prefill,
            "gen_ai.latency.time_in_model_decode": decode,
            "gen_ai.latency.time_in_model_inference": prefill + decode,
        },
    )


def test_vllm_llm_request_span(archive_path, ingest_text):
    tid, sid, cid = trace_id(), span_id(), span_id()
    client = span(
        tid,
        cid,
        "llm.client.request",
        T0 - 4 * MS,
        T0 + 1902 * MS,
        kind=3,
        attributes={"budgetscope.client.first_token_unix_nano": T0 + 303 * MS, "http.response.status_code": 200},
    )
    ingest_text(
        archive_path,
        jsonl(
            export([_vllm_span(tid, sid, cid)], service="vllm", scope="vllm.llm_engine"),
            export([client], service="loadgen"),
        ),
    )
    (r,) = rows(archive_path, f"SELECT source, request_id, model, input_tokens, output_tokens, {COLS} FROM requests")
    assert r[:5] == ("vllm", "cmpl-abc", "meta-llama/Llama-3.2-1B", 128, 64)
    frontend, queue, prefill, decode, post, unacc, ttft, e2e, net, ttft_net, c_ttft, c_e2e = r[5:]
    assert queue == pytest.approx(50) and prefill == pytest.approx(200) and decode == pytest.approx(1500)
    assert frontend == pytest.approx(50) and post == pytest.approx(100) and unacc == pytest.approx(0, abs=1e-9)
    assert ttft == pytest.approx(300) and e2e == pytest.approx(1900)
    assert net == pytest.approx(6) and ttft_net == pytest.approx(7)
    assert rows(archive_path, "SELECT source FROM spans ORDER BY 1") == [("client",), ("vllm",)]


def test_vllm_without_stage_attributes_leaves_them_unknown(archive_path, ingest_text):
    tid, sid = trace_id(), span_id()
    s = _vllm_span(tid, sid, None)
    s["attributes"] = [a for a in s["attributes"] if "model_" not in a["key"]]
    ingest_text(archive_path, jsonl(export([s], service="vllm", scope="vllm.llm_engine")))
    assert rows(archive_path, "SELECT frontend_ms, prefill_ms, decode_ms, postprocess_ms, queue_ms FROM requests") == [
        (None, None, None, None, pytest.approx(50))
    ]


@pytest.mark.parametrize(
    "kinds",
    [
        ("native",),
        ("native", "client"),
        ("vllm",),
        ("vllm", "client", "tgi"),
        ("client",),
        ("tgi", "sglang"),
        ("native", "vllm", "tgi", "sglang", "client"),
    ],
)
def test_leaving_out_absent_adapters_changes_no_row(tmp_path, ingest_text, kinds):
    """`derive_pending` builds the requests query with only the adapters whose spans are in scope (each costs
    its fixed share of a small batch's derivation); the rows are those of the query with every adapter."""
    from budgetscope.derive.requests import requests_sql
    from budgetscope.sources.importers import document
    from test_sources_sglang import _trace as sglang_trace
    from test_sources_tgi import SERVICE as TGI_SERVICE
    from test_sources_tgi import _tgi_trace

    docs = []
    if "native" in kinds:
        docs.append(jsonl(export(native_request(client=(2, 1))[1]), export(native_request()[1])))
    if "vllm" in kinds:
        docs.append(jsonl(export([_vllm_span(trace_id(), span_id(), None)], service="vllm", scope="vllm.llm_engine")))
    if "tgi" in kinds:
        docs.append(document(TGI_SERVICE, _tgi_trace(f"{7:032x}", None)).decode() + "\n")
    if "sglang" in kinds:
        docs.append(document("sglang", sglang_trace(f"{8:032x}")).decode() + "\n")
    if "client" in kinds:  # a request no server span claims: the client-only adapter's
        docs.append(
            jsonl(
                export(
                    [
                        span(
                            trace_id(),
                            span_id(),
                            "llm.client.request",
                            T0,
                            T0 + 90 * MS,
                            kind=3,
                            attributes={"budgetscope.client.first_token_unix_nano": T0 + 30 * MS},
                        )
                    ],
                    service="loadgen",
                )
            )
        )
    path = tmp_path / "a.duckdb"
    ingest_text(path, "".join(docs))
    present = {s for (s,) in rows(path, "SELECT DISTINCT source FROM spans")}
    every = rows(path, f"SELECT * FROM ({requests_sql('spans')}) ORDER BY trace_id, request_id")
    pruned = rows(path, f"SELECT * FROM ({requests_sql('spans', present)}) ORDER BY trace_id, request_id")
    assert len(every) >= len(kinds) and str(pruned) == str(every)  # str: NaN tpot compares equal as text
    assert str(rows(path, "SELECT * FROM requests ORDER BY trace_id, request_id")) == str(every)
