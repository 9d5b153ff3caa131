"""Tokenizers, streaming detokenization, stop strings and request parsing (no model)."""

import random
import time

import pytest

from budgetscope.engine.detokenizer import Detokenizer
from budgetscope.engine.errors import RequestError
from budgetscope.engine.protocol import ChunkEncoder, chunk, parse_request, sse
from budgetscope.engine.server import _cut_text, _stop_cut
from budgetscope.engine.tokenizer import ByteTokenizer, render_chat


def test_byte_tokenizer_roundtrip_with_bos():
    tok = ByteTokenizer()
    ids = tok.encode("héllo")
    assert ids[0] == tok.bos_token_id and tok.decode(ids) == "héllo"


def test_detokenizer_never_emits_half_a_character():
    tok = ByteTokenizer()
    detok = Detokenizer(tok)
    pieces = [detok.add([b]) for b in "é€x".encode()]
    assert pieces == ["", "é", "", "", "€", "x"]
    assert detok.text == "é€x" and detok.flush() == ""


class WindowedByteTokenizer(ByteTokenizer):
    """The byte tokenizer without `silent_from`: the Detokenizer keeps every id in its window (the reference)."""

    silent_from = None


@pytest.mark.parametrize("seed", range(6))
def test_silent_ids_left_out_of_the_window_change_no_delta(seed):
    """Ids past 255 decode to nothing anywhere: leaving them out of the window gives the same deltas, token by
    token, and the same flush, over ASCII, multi-byte characters, invalid bytes and runs of silent ids."""
    rng = random.Random(seed)
    pool = list(b"ab ") + list("é€😀".encode()) + [0x80, 0xBF, 0xFF, 0xC3] + [256, 257, 300, 31999]
    ids = [rng.choice(pool) for _ in range(400)]
    fast, reference = Detokenizer(ByteTokenizer()), Detokenizer(WindowedByteTokenizer())
    assert [fast.add([t]) for t in ids] == [reference.add([t]) for t in ids]
    assert fast.flush() == reference.flush() and fast.text == reference.text
    assert len(fast.token_ids) < len(reference.token_ids)


def test_chunk_encoder_writes_the_bytes_json_dumps_writes(monkeypatch):
    """The per-stream encoder gives exactly `sse(chunk(...))` (json.dumps, ASCII escapes) for both APIs, the first
    chat delta (with its role), every finish reason, quotes, controls and non-ASCII text."""
    monkeypatch.setattr(time, "time", lambda: 1_795_000_000.75)  # chunk() reads the clock: one second for both
    for is_chat in (False, True):
        req = parse({"messages": [{"role": "user", "content": "x"}]} if is_chat else {"prompt": "x"}, chat=is_chat)
        request_id, model = 'cmpl-"é\\1', "m\u2028odel"
        encoder = ChunkEncoder(req, request_id, model)
        for text in ["", "a", 'q"u\\o', "é\ufffd😀", "\n\t\x00\x7f"]:
            for reason in (None, "stop", "length"):
                for first in (False, True):
                    expected = sse(chunk(req, request_id, model, text, reason, first))
                    assert encoder.event(text, reason, first, 1_795_000_000) == expected


def test_stop_cut_finds_a_stop_string_spanning_deltas():
    assert _stop_cut("hello wor", ["lo w"], 3) == 0  # delta "wor" cut to ""
    assert _stop_cut("abcSTOPdef", ["STOP"], 10) == 3
    assert _stop_cut("abc", ["x"], 1) is None
    assert _cut_text("one two three", ["two"]) == "one "


def parse(body, headers=None, chat=False):
    return parse_request(body, headers or {}, chat, "tiny", 16, render_chat)


def test_parse_tier_tenant_deadline_from_body_or_headers():
    req = parse(
        {"prompt": "a"},
        {"x-budgetscope-tier": "batch", "x-budgetscope-tenant": "t1", "x-budgetscope-deadline-ms": "250"},
    )
    assert (req.tier, req.tenant, req.deadline_s) == ("batch", "t1", 0.25)
    req = parse({"prompt": "a", "budgetscope_tier": "interactive"}, {"x-budgetscope-tier": "batch"})
    assert req.tier == "interactive" and req.params.max_tokens == 16


def test_parse_rejects_what_the_engine_does_not_serve():
    for body in (
        {"prompt": "a", "n": 2},
        {"prompt": ["a", "b"]},
        {"prompt": "a", "max_tokens": 0},
        {"prompt": "a", "stop": [1]},
        {"messages": []},
        [1, 2],
    ):
        with pytest.raises(RequestError) as err:
            parse(body, chat=isinstance(body, dict) and "messages" in body)
        assert err.value.status == 400


def test_chat_renders_messages_with_text_parts():
    req = parse({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}, chat=True)
    assert req.prompt == "<|user|>\nhi\n<|assistant|>\n"
