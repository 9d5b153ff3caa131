"""vLLM journey tracing and PD disaggregation beyond the conformance cases (tests/conformance/vllm/): the same
trace over OTLP protobuf, a journey whose timings did not arrive, a classic span under the journey API span, PD
legs that are not a pair and PD legs under one client span (on Spark: tests/test_spark.py, every conformance case)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from conftest import rows
from otlp_wire import to_proto

CASES = Path(__file__).parent / "conformance" / "vllm"
COLS = (
    "request_id, outcome, frontend_ms, queue_ms, prefill_ms, decode_ms, postprocess_ms, ttft_ms, e2e_ms, queue_entries"
)


def _docs(case: str) -> list[dict]:
    return [json.loads(line) for line in (CASES / case / "spans.jsonl").read_text().splitlines()]


def _jsonl(docs: list[dict]) -> str:
    return "".join(json.dumps(d) + "\n" for d in docs)


def test_journey_events_sent_as_protobuf_give_the_same_row(archive_path, ingest_text, tmp_path):
    """vLLM's exporter sends protobuf (gRPC or http/protobuf): the events must survive that path too."""
    docs = _docs("journey-preempted-chunked")
    ingest_text(archive_path, _jsonl(docs))
    as_json = rows(archive_path, f"SELECT {COLS} FROM requests")
    other = tmp_path / "proto-archive"
    for i, d in enumerate(docs):
        ingest_text(other, to_proto(d), name=f"export-{i}.pb")
    assert rows(other, f"SELECT {COLS} FROM requests") == as_json
    assert abs(as_json[0][3] - 599.98) < 1e-3  # the re-queues are in queue


def test_a_journey_whose_core_span_is_missing_is_unknown_not_zero(archive_path, ingest_text):
    """The API span alone (the `llm_core` span lost or sampled away) has no timings: every stage NULL."""
    docs = [
        d
        for d in _docs("journey-preempted-chunked")
        if d["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] == "llm_request"
    ]
    ingest_text(archive_path, _jsonl(docs))
    ((rid, outcome, *stages, entries),) = rows(archive_path, f"SELECT {COLS} FROM requests")
    assert rid == "chatcmpl-journey-0001" and outcome == "ok"
    assert stages == [None] * 7 and entries is None


def test_pd_legs_fold_only_when_the_prefill_leg_ended_first(archive_path, ingest_text):
    """Two spans with one request id that overlap in time (a client reusing an id, not a PD hand-off) stay two
    rows: only a one-token leg that ended before the other began is a prefill leg."""
    docs = copy.deepcopy(_docs("pd-disaggregated"))
    prefill = docs[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    prefill["endTimeUnixNano"] = str(int(prefill["endTimeUnixNano"]) + 10_000_000)  # ends after the decode leg began
    ingest_text(archive_path, _jsonl(docs))
    got = rows(archive_path, "SELECT service_name, e2e_ms FROM requests ORDER BY arrival_ns")
    assert [(s, round(e, 3)) for s, e in got] == [("vllm-prefill", 315.0), ("vllm-decode", 1270.0)]


def test_a_classic_span_under_the_journey_api_span_is_the_same_request(archive_path, ingest_text):
    """Journey builds whose `do_tracing` still ran sent a classic `llm_request` (scope `vllm.llm_engine`) as a
    child of the API span: one request, one row (the journey row, which sees the re-queues)."""
    docs = _docs("journey-preempted-chunked")
    api = docs[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    classic = _docs("classic")[0]
    inner = classic["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    inner.update(traceId=api["traceId"], parentSpanId=api["spanId"])
    for kv in inner["attributes"]:
        if kv["key"] == "gen_ai.request.id":
            kv["value"] = {"stringValue": "chatcmpl-journey-0001"}
    ingest_text(archive_path, _jsonl([*docs, classic]))
    (got,) = rows(archive_path, f"SELECT {COLS} FROM requests")
    assert got[0] == "chatcmpl-journey-0001" and abs(got[3] - 599.98) < 1e-3 and got[-1] == 3
    # without its core span the API span has no timings: the classic child's row is kept instead
    ingest_text(archive_path.parent / "b", _jsonl([docs[0], classic]))
    (got,) = rows(archive_path.parent / "b", f"SELECT {COLS} FROM requests")
    assert got[0] == "chatcmpl-journey-0001" and abs(got[3] - 100.0) < 1e-3


def test_pd_legs_under_one_client_span_give_one_row_with_network(archive_path, ingest_text):
    """A proxy that forwards `traceparent` puts both legs in the client's trace: one row, joined to the client
    span. Client: sent 4 ms before the prefill leg arrived, done 6 ms after the decode leg ended (T0 + 1593):
    client E2E = 1603 ms, network = 1603 − 1592 (server E2E from the prefill leg's arrival) = 11 ms."""
    docs = _docs("pd-disaggregated")
    t0 = 1_790_000_000_000_000_000
    client = _docs("journey-client-traceparent")[0]
    cspan = client["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    cspan.update(startTimeUnixNano=str(t0 - 4_000_000), endTimeUnixNano=str(t0 + 1_599_000_000))
    for d in docs:
        leg = d["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        leg.update(traceId=cspan["traceId"], parentSpanId=cspan["spanId"])
    ingest_text(archive_path, _jsonl([client, *docs]))
    ((rid, e2e, client_e2e, network, has_client),) = rows(
        archive_path, "SELECT request_id, e2e_ms, client_e2e_ms, network_ms, has_client_span FROM requests"
    )
    assert rid.startswith("cmpl-6f1d2c3b") and has_client
    assert abs(e2e - 1592.0) < 1e-3 and abs(client_e2e - 1603.0) < 1e-3 and abs(network - 11.0) < 1e-3


def test_the_prompt_length_is_read_from_the_engine_events_when_the_api_span_lacks_it(archive_path, ingest_text):
    """The event attributes are parsed only for the requests that need them (derive/vllm.py): an API span without
    `gen_ai.usage.prompt_tokens` takes the largest `prefill.total_tokens` of its core's journey events, an
    aborted one its reason, and a request beside them that needs neither keeps its own figures."""
    docs = copy.deepcopy(_docs("journey-preempted-chunked"))
    for d in docs:
        span = d["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        if span["name"] == "llm_request":
            span["attributes"] = [a for a in span["attributes"] if a["key"] != "gen_ai.usage.prompt_tokens"]
        else:  # the engine's count grew with a chunk of the prompt: the largest is the prompt's length
            attrs = span["events"][-1]["attributes"]
            (total,) = [a for a in attrs if a["key"] == "prefill.total_tokens"]
            total["value"] = {"intValue": "3100"}
    ingest_text(archive_path, _jsonl(docs + _docs("journey-aborted") + _docs("journey-client-traceparent")))
    got = rows(archive_path, "SELECT request_id, outcome, input_tokens FROM requests ORDER BY request_id")
    assert ("chatcmpl-journey-0001", "ok", 3100) in got
    assert ("chatcmpl-aborted-0001", "cancelled", 6000) in got
    assert len(got) == 3 and all(tokens is not None for _, _, tokens in got)
