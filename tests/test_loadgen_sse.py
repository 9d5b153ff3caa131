"""SSE parsing and the HTTP/1.1 response parser, fed bytes in every split."""

import pytest

from budgetscope.loadgen.http_connection import HttpConnection
from budgetscope.loadgen.sse import SSEParser, read_chunk

STREAM = (
    b'data: {"choices":[{"text":"a"}]}\n\n'
    b": keep-alive comment\n\n"
    b'event: message\ndata: {"choices":[{"delta":{"content":"b"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)
PAYLOADS = [
    b'{"choices":[{"text":"a"}]}',
    b'{"choices":[{"delta":{"content":"b"}}]}',
    b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}',
    b"[DONE]",
]


def feed_in_pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    parser, out, start = SSEParser(), [], 0
    for cut in [*cuts, len(data)]:
        out += parser.feed(data[start:cut])
        start = cut
    assert parser.pending == b""
    return out


def test_whole_stream():
    assert feed_in_pieces(STREAM, []) == PAYLOADS


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_two_way_split_and_every_newline_style(newline):
    data = STREAM.replace(b"\n", newline)
    for cut in range(1, len(data)):
        assert feed_in_pieces(data, [cut]) == PAYLOADS, cut


def test_byte_by_byte_crlf():
    data = STREAM.replace(b"\n", b"\r\n")
    assert feed_in_pieces(data, list(range(1, len(data)))) == PAYLOADS


def test_multi_line_data_is_joined_and_one_space_stripped():
    assert SSEParser().feed(b"data: one\ndata:two\ndata:  three\n\n") == [b"one\ntwo\n three"]


def test_unfinished_event_waits_for_its_blank_line():
    parser = SSEParser()
    assert parser.feed(b"data: [DONE]\n") == []
    assert parser.feed(b"\n") == [b"[DONE]"]


def test_read_chunk_kinds():
    assert read_chunk(b"[DONE]").is_done
    assert read_chunk(b'{"choices":[{"text":"x"}]}').is_token
    assert read_chunk(b'{"choices":[{"text":"x","finish_reason":"length"}]}').is_token
    assert read_chunk(b'{"choices":[{"text":"","finish_reason":null}]}').is_token  # bytes not yet decodable
    assert not read_chunk(b'{"choices":[{"text":"","finish_reason":"stop"}]}').is_token  # a closing event
    assert not read_chunk(b'{"choices":[{"delta":{"role":"assistant","content":""}}]}').is_token
    assert not read_chunk(b'{"choices":[{"delta":{},"finish_reason":"stop"}]}').is_token
    assert read_chunk(b'{"choices":[{"delta":{"content":""},"finish_reason":null}]}').is_token
    assert read_chunk(b'{"choices":[{"delta":{"reasoning_content":"hm"}}]}').is_token
    assert read_chunk(b'{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}').is_token
    usage = read_chunk(b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}')
    assert (usage.prompt_tokens, usage.completion_tokens, usage.is_token) == (3, 9, False)
    assert read_chunk(b'{"error":{"message":"boom","type":"x"}}').error == "stream_error: boom"
    assert read_chunk(b"not json").error.startswith("bad_event")


class FakeTransport:
    def __init__(self):
        self.written, self.aborted = [], False

    def write(self, data):
        self.written.append(data)

    def abort(self):
        self.aborted = True


class Handler:
    def __init__(self):
        self.status, self.headers, self.data, self.done, self.error, self.keep_alive = (
            None,
            None,
            b"",
            False,
            None,
            None,
        )

    def head(self, status, headers):
        self.status, self.headers = status, headers

    def body(self, data, t_ns):
        self.data += data

    def complete(self, t_ns, keep_alive):
        self.done, self.keep_alive = True, keep_alive

    def fail(self, error, t_ns):
        self.error = error


def exchange(response: bytes, cuts=()):
    conn = HttpConnection()
    conn.connection_made(FakeTransport())
    handler = Handler()
    conn.send(b"POST / HTTP/1.1\r\n\r\n", handler)
    start = 0
    for cut in [*cuts, len(response)]:
        conn.data_received(response[start:cut])
        start = cut
    return conn, handler


CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
)


def test_chunked_response_in_any_split():
    for cut in range(1, len(CHUNKED)):
        conn, handler = exchange(CHUNKED, [cut])
        assert (handler.status, handler.data, handler.done, handler.keep_alive) == (200, b"hello world", True, True)
        assert handler.headers[b"content-type"] == b"text/event-stream"


def test_content_length_response_and_connection_close():
    response = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy"
    conn, handler = exchange(response, [20, 70])
    assert (handler.status, handler.data, handler.done, handler.keep_alive) == (503, b"busy", True, False)
    assert conn.transport.aborted


def test_body_until_close():
    conn, handler = exchange(b"HTTP/1.0 200 OK\r\n\r\npart one, ")
    conn.data_received(b"part two")
    assert not handler.done
    conn.connection_lost(None)
    assert handler.done and handler.data == b"part one, part two"


def test_connection_lost_mid_response_fails_the_exchange():
    conn, handler = exchange(CHUNKED[:-12])
    conn.connection_lost(None)
    assert handler.error == "connection_closed" and not handler.done


def test_garbage_fails_the_exchange_not_the_caller():
    conn, handler = exchange(b"SSH-2.0-OpenSSH\r\n\r\n")
    assert handler.error.startswith("bad_response") and conn.transport.aborted
