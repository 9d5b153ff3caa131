"""Tokenizers, streaming detokenization, stop strings and request parsing (no model)."""

import pytest

from budgetscope.engine.detokenizer import Detokenizer
from budgetscope.engine.errors import RequestError
from budgetscope.engine.protocol import parse_request
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
