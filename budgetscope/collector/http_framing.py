"""HTTP/1.1 request framing, parsed strictly (RFC 9112): the request line, the header fields, how long the body
is, and a chunked body's size lines and trailers. Pure functions over bytes already read (the receiver reads
them, bounded, from its connection); each refusal is a `FramingError` with the status to answer and one line.

What is refused, and with which status (the connection is then closed, as RFC 9112 asks of a message whose
framing cannot be trusted):

- 400: a request line that is not `METHOD SP TARGET SP HTTP/d.d`; a header line without a colon, with a space
  before it, with a name that is not a token, folded (obs-fold) or holding a control character or a bare CR/LF;
  `Content-Length` that is not ASCII digits alone (`+5`, `-1`, `0x10`, `²`, `5, 5`), given twice, or beside
  `Transfer-Encoding`; `Transfer-Encoding` in an HTTP/1.0 request or with chunked not last; `Host`,
  `Content-Type`, `Content-Encoding` or `Authorization` given twice; no `Host` in an HTTP/1.1 request; a chunk
  size that is not 1 to 16 hex digits (`-1`, `+5`, `0x10`, ` 5`) followed by well-formed extensions and CRLF;
  chunk data not followed by CRLF; more chunks than one per KiB of data plus CHUNK_ALLOWANCE;
- 413 (by the receiver, against its limit): a `Content-Length` or a chunk size past it, before a byte is read;
- 431: more than MAX_HEADER_LINES header (or trailer) lines, or more than MAX_HEADER_BYTES of them;
- 501: a transfer coding other than chunked; 505: an HTTP version other than 1.x.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HEADER_BYTES = 64 << 10  # the request line and headers (and a chunked body's trailers); past it: 431
MAX_HEADER_LINES = 100  # header (or trailer) lines of one request; past it: 431
MAX_CHUNK_LINE = 1 << 10  # a chunk-size line, its extensions and CRLF included
MAX_SIZE_DIGITS = 16  # hex digits of a chunk size (2^64 - 1): more is refused, leading zeros or not
CHUNK_ALLOWANCE = 1024  # chunks a body may have beyond one per KiB of its data (tiny chunks cost CPU, not bytes)

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e]+) HTTP/([0-9])\.([0-9])")
_FIELD_NAME = re.compile(_TOKEN)
_FIELD_CTL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # in a value: controls but HTAB
_CHUNK_LINE = re.compile(
    rb"([0-9A-Fa-f]{1,%d})((?:[ \t]*;[ \t]*%s(?:[ \t]*=[ \t]*(?:%s|%s))?)*)[ \t]*\r\n"
    % (MAX_SIZE_DIGITS, _TOKEN, _TOKEN, _QUOTED)
)
_DIGITS = re.compile(rb"[0-9]+")
TOO_LONG = 1 << 63  # a Content-Length of more than 18 digits: past any limit (int() of 5,000 digits raises)
SINGLE = ("content-length", "host", "content-type", "content-encoding", "authorization")
"""Header fields that may appear once: a second one is refused (400), not merged or overwritten."""


class FramingError(Exception):
    """A request whose framing is refused: answer `status` with this one-line message, then close."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class RequestHead:
    """A request line and header fields that passed `parse_head`."""

    method: str
    target: str
    version: str  # "HTTP/1.0" | "HTTP/1.1" (any 1.x minor above 1 reads as 1.1)
    headers: dict[str, str]  # lower-case name → value; a field given on several lines, joined with ", "
    length: int | None  # the body's Content-Length (0 when none is given); None when chunked
    keep_alive: bool  # the peer may send another request on the connection after this one

    @property
    def is_chunked(self) -> bool:
        return self.length is None

    @property
    def has_body(self) -> bool:
        return self.length is None or self.length > 0


def parse_head(head: bytes) -> RequestHead:
    """The request line and header fields of `head` (up to and including its empty line). FramingError when
    refused (see the module's docstring). The receiver checks the body's length against its limit (413)."""
    lines = head.split(b"\r\n")
    while lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise FramingError(400, "not an HTTP/1.x request (no request line)")
    m = _REQUEST_LINE.fullmatch(lines[0])
    if m is None:
        raise FramingError(400, "not an HTTP/1.x request line (METHOD TARGET HTTP/1.1)")
    if m.group(3) != b"1":
        raise FramingError(505, f"HTTP/{m.group(3).decode()}.{m.group(4).decode()} is not served (use HTTP/1.1)")
    version = "HTTP/1.0" if m.group(4) == b"0" else "HTTP/1.1"
    headers = field_lines(lines[1:], "header")
    if version == "HTTP/1.1" and "host" not in headers:
        raise FramingError(400, "an HTTP/1.1 request without a Host header")
    length = body_length(headers, version)
    connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return RequestHead(m.group(1).decode(), m.group(2).decode(), version, headers, length, keep_alive)


def field_lines(lines: list[bytes], what: str) -> dict[str, str]:
    """Header (or trailer: `what`) field lines, each without its CRLF, as a dict of lower-case names."""
    if len(lines) > MAX_HEADER_LINES:
        raise FramingError(431, f"more than {MAX_HEADER_LINES} {what} lines")
    fields: dict[str, str] = {}
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            raise FramingError(400, f"a folded {what} line (obs-fold is not accepted)")
        if b"\r" in line or b"\n" in line:
            raise FramingError(400, f"a bare CR or LF in a {what} line")
        raw_name, sep, raw_value = line.partition(b":")
        if not sep or _FIELD_NAME.fullmatch(raw_name) is None:
            raise FramingError(400, f"a malformed {what} line (NAME: VALUE, no space before the colon)")
        value = raw_value.strip(b" \t")
        if _FIELD_CTL.search(value):
            raise FramingError(400, f"a control character in the {what} {raw_name.decode()!r}")
        name = raw_name.decode().lower()
        text = value.decode("latin-1")
        if name in fields:
            if name in SINGLE:
                raise FramingError(400, f"the {what} {raw_name.decode()!r} is given twice")
            text = f"{fields[name]}, {text}"
        fields[name] = text
    return fields


def body_length(headers: dict[str, str], version: str) -> int | None:
    """The body's length from `Content-Length` (0 without one; TOO_LONG for more than 18 digits: past any
    limit), or None for a chunked body."""
    te = headers.get("transfer-encoding")
    cl = headers.get("content-length")
    if te is not None:
        if cl is not None:
            raise FramingError(400, "both Content-Length and Transfer-Encoding (one says how long the body is)")
        if version == "HTTP/1.0":
            raise FramingError(400, "Transfer-Encoding in an HTTP/1.0 request")
        codings = [c.strip().lower() for c in te.split(",") if c.strip()]
        if codings == ["chunked"]:
            return None
        if "chunked" in codings and codings[-1] != "chunked":
            raise FramingError(400, "Transfer-Encoding with chunked not last")
        raise FramingError(501, f"unsupported Transfer-Encoding {te[:64]!r} (only chunked is served)")
    if cl is None:
        return 0
    raw = cl.encode("latin-1")
    if _DIGITS.fullmatch(raw) is None:
        raise FramingError(400, f"Content-Length {cl[:32]!r} is not a number (ASCII digits alone)")
    digits = raw.lstrip(b"0")
    return TOO_LONG if len(digits) > 18 else int(digits or b"0")


def chunk_size(line: bytes) -> int:
    """The size of the chunk whose size line (extensions and CRLF included) is `line`; extensions are
    checked and ignored."""
    if len(line) > MAX_CHUNK_LINE:
        raise FramingError(400, f"a chunk-size line over {MAX_CHUNK_LINE:,} bytes")
    m = _CHUNK_LINE.fullmatch(line)
    if m is None:
        raise FramingError(400, "a malformed chunk size (1 to 16 hex digits, optional ;extensions, then CRLF)")
    return int(m.group(1), 16)


def check_chunk_count(num_chunks: int, data_bytes: int) -> None:
    """At most one chunk per KiB of data, plus CHUNK_ALLOWANCE: tiny chunks cost the receiver a loop each."""
    if num_chunks > CHUNK_ALLOWANCE + data_bytes // 1024:
        raise FramingError(400, f"{num_chunks:,} chunks for {data_bytes:,} bytes (chunks average under 1 KiB)")
