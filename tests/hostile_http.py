"""Malformed OTLP/HTTP requests (issue 37), each with the status the collector must answer before closing the
connection: used by tests/test_collector_framing.py, benchmarks/fault_collector_abuse.py and the fuzz seeds.

Every entry is (what, the bytes after `POST /v1/traces HTTP/1.1` + Host + Content-Type, the status)."""

from __future__ import annotations

import gzip

HEAD = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"

FRAMING = [
    ("chunk size -1", b"Transfer-Encoding: chunked\r\n\r\n-1\r\nx\r\n0\r\n\r\n", 400),
    ("chunk size +5", b"Transfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk size 0x10", b"Transfer-Encoding: chunked\r\n\r\n0x10\r\n" + bytes(16) + b"\r\n0\r\n\r\n", 400),
    ("chunk size of 17 hex digits", b"Transfer-Encoding: chunked\r\n\r\n00000000000000005\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk size 2^64", b"Transfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", 400),
    ("chunk size past the message limit", b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n", 413),
    ("chunk size ' 5'", b"Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk size line ended by LF alone", b"Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400),
    ("chunk data not followed by CRLF", b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXY0\r\n\r\n", 400),
    ("chunk extension with a space in its name", b"Transfer-Encoding: chunked\r\n\r\n5;a b\r\nhello\r\n0\r\n\r\n", 400),
    ("a chunk-size line of 2 KiB", b"Transfer-Encoding: chunked\r\n\r\n5;a=" + b"b" * 2048 + b"\r\nhello\r\n", 400),
    ("a trailer with a space before its colon", b"Transfer-Encoding: chunked\r\n\r\n0\r\nX-T : 1\r\n\r\n", 400),
    ("a chunked body cut short", b"Transfer-Encoding: chunked\r\n\r\n5\r\nhel", 400),
    ("Content-Length: \\xb2 (latin-1 \u00b2: passes str.isdigit)", b"Content-Length: \xb2\r\n\r\nxx", 400),
    ("Content-Length: \u00b2 in UTF-8", "Content-Length: \u00b2\r\n\r\nxx".encode(), 400),
    ("Content-Length: +5", b"Content-Length: +5\r\n\r\nhello", 400),
    ("Content-Length: -1", b"Content-Length: -1\r\n\r\n", 400),
    ("Content-Length: 0x10", b"Content-Length: 0x10\r\n\r\n", 400),
    ("Content-Length: 5, 5", b"Content-Length: 5, 5\r\n\r\nhello", 400),
    ("two Content-Length", b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
    ("Content-Length of 5,000 digits", b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n", 413),
    ("Content-Length and Transfer-Encoding", b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("Transfer-Encoding: gzip, chunked", b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
    ("Transfer-Encoding: chunked, gzip", b"Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 400),
    ("Transfer-Encoding: xchunked", b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 501),
    ("a space before the colon", b"Content-Length : 5\r\n\r\nhello", 400),
    ("a folded header line", b"Content-Length: 5\r\nX-A: b\r\n c\r\n\r\nhello", 400),
    ("a NUL in a header value", b"X-A: b\x00c\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("a bare CR in a header value", b"X-A: b\rc\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("two Host headers", b"Host: y\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("200 header lines", b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"Content-Length: 5\r\n\r\nhello", 431),
    ("Content-Encoding: zstd", b"Content-Encoding: zstd\r\nContent-Length: 5\r\n\r\nhello", 415),
    (
        "a gzip body of 314,572 empty members",
        b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % (20 * 314_572)
        + gzip.compress(b"", mtime=0) * 314_572,
        400,
    ),
]

# (what, a whole request, the status): the request line itself malformed
REQUEST_LINES = [
    ("HTTP/2.0", b"POST /v1/traces HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    ("two spaces", b"POST  /v1/traces HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("no version (HTTP/0.9)", b"POST /v1/traces\r\nHost: x\r\n\r\n", 400),
    ("a NUL in the method", b"PO\x00ST /v1/traces HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("a lower-case version", b"POST /v1/traces http/1.1\r\nHost: x\r\n\r\n", 400),
    ("no Host", b"POST /v1/traces HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", 400),
    ("a TLS handshake", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
]
