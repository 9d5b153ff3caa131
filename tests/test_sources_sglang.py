"""SGLang: the request trace (`Req <rid>` root, thread spans, stage slices) → server rows.

Names as SGLang writes them: python/sglang/srt/tracing/trace.py (root `Req {rid[:8]}` with attribute `rid`) and
the `RequestStage` slice names of python/sglang/srt/tracing/req_time_stats.py (sgl-project/sglang).
"""

from __future__ import annotations

import pytest
from conftest import rows

from budgetscope.sources.importers import KIND_CLIENT, KIND_SERVER, document, span

T0 = 1_800_000_000_000_000_000
MS = 1_000_000


def _trace(tid: str, parent: str | None = None, *, latency_attrs: bool = True) -> list[dict]:
    root, tok, sched = "00000000000000c1", "00000000000000c2", "00000000000000c3"
    attrs = {"rid": "0123456789abcdef", "gen_ai.usage.prompt_tokens": 40, "gen_ai.usage.completion_tokens": 6}
    if latency_attrs:
        attrs |= {"gen_ai.latency.time_to_first_token": 0.060, "gen_ai.latency.e2e": 0.120}

    def sl(sid, name, a, b, parent_id):
        return span(tid, sid, name, 1, T0 + int(a * MS), T0 + int(b * MS), {}, parent_span_id=parent_id)

    return [
        span(tid, root, "Req 01234567", KIND_SERVER, T0, T0 + 121 * MS, attrs, parent_span_id=parent),
        span(tid, tok, "Tokenizer", 1, T0, T0 + 121 * MS, {}, parent_span_id=root),
        span(tid, sched, "Scheduler [TP 0]", 1, T0 + 3 * MS, T0 + 118 * MS, {}, parent_span_id=root),
        sl("00000000000000d1", "tokenize", 0, 2, tok), sl("00000000000000d2", "dispatch", 2, 3, tok),
        sl("00000000000000d3", "request_process", 3, 5, sched), sl("00000000000000d4", "prefill_waiting", 5, 35, sched),
        sl("00000000000000d5", "prefill_forward", 35, 58, sched), sl("00000000000000d6", "decode_loop", 60, 115, sched),
    ]


def test_sglang_slices_map_to_stages(archive_path, ingest_text):
    ingest_text(archive_path, document("sglang", _trace(f"{1:032x}")).decode())
    (r,) = rows(archive_path, """SELECT source, request_id, frontend_ms, queue_ms, prefill_ms, decode_ms,
        postprocess_ms, ttft_ms, e2e_ms, unaccounted_ms, ttft_unaccounted_ms, input_tokens, output_tokens,
        queue_entries FROM requests""")
    assert r[:2] == ("sglang", "0123456789abcdef")
    assert r[2:9] == pytest.approx((5.0, 30.0, 25.0, 55.0, 5.0, 60.0, 120.0))
    assert r[9] == pytest.approx(0.0) and r[10] == pytest.approx(0.0)
    assert r[11:] == (40, 6, 1)
    assert {s for (s,) in rows(archive_path, "SELECT source FROM spans WHERE name <> 'Tokenizer' "
                                             "AND NOT starts_with(name, 'Scheduler')")} == {"sglang"}


def test_sglang_without_latency_attributes_uses_the_slices(archive_path, ingest_text):
    ingest_text(archive_path, document("sglang", _trace(f"{2:032x}", latency_attrs=False)).decode())
    (r,) = rows(archive_path, "SELECT ttft_ms, prefill_ms, e2e_ms, postprocess_ms FROM requests")
    assert r == pytest.approx((58.0, 23.0, 121.0, 6.0))  # first token: end of the last prefill slice


def test_sglang_joins_its_client_span(archive_path, ingest_text):
    tid, csid = f"{3:032x}", f"{3:016x}"
    c = span(tid, csid, "llm.client.request", KIND_CLIENT, T0 - 2 * MS, T0 + 124 * MS,
             {"budgetscope.client.first_token_unix_nano": T0 + 63 * MS})
    ingest_text(archive_path, document("sglang", _trace(tid, csid)).decode() + "\n" +
                document("loadgen", [c]).decode())
    assert rows(archive_path, "SELECT source, network_ms, ttft_network_ms FROM requests") == [
        ("sglang", pytest.approx(6.0), pytest.approx(5.0))]
