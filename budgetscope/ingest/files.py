"""Read trace files as a stream of `RawBatch`es: OTLP JSON lines, one OTLP JSON document, or OTLP protobuf, each
possibly gzip- or zstd-compressed (told by the file's first bytes, not its name).

OTLP metrics exports (GPU samples) are told apart per batch (`resourceMetrics`) and routed to `gpu_samples`."""

from __future__ import annotations

import gzip
import io
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import orjson

from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.spool import RawBatch
from budgetscope.ingest import otlp_fast, otlp_metrics
from budgetscope.ingest.otlp_proto import split_messages

PROTO_SUFFIXES = (".pb", ".binpb", ".proto", ".protobuf", ".otlp")
COMPRESSED_SUFFIXES = (".gz", ".gzip", ".zst", ".zstd")
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_HINT = "pip install 'budgetscope[zstd]'"


def compression(path: Path) -> str | None:
    """`gzip`, `zstd` or None (not compressed), from the file's magic bytes."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    return "zstd" if head == ZSTD_MAGIC else None


def _zstd_reader(raw: BinaryIO, path: Path) -> tuple[BinaryIO, type[Exception]]:
    """A decompressing reader over `raw` and the error a bad stream raises: the standard library's zstd (Python
    3.14+), else `zstandard` (the `zstd` extra)."""
    if sys.version_info >= (3, 14):
        # imported on use: compression.zstd (optional, 3.14+) to import
        from compression import zstd

        return zstd.ZstdFile(raw), zstd.ZstdError
    try:
        # imported on use: zstandard 22 ms to import
        import zstandard
    except ImportError:
        raise ArchiveError(f"{path} is zstd-compressed; reading it needs zstandard: {ZSTD_HINT}") from None
    return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=False)), zstandard.ZstdError


@contextmanager
def open_trace_file(path: Path) -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """(stream of the file's bytes, decompressed when compressed; the file itself, for progress by `tell()`).
    A compressed stream that is cut short or corrupt raises ArchiveError naming the file."""
    kind = compression(path)
    with open(path, "rb") as raw:
        if kind is None:
            yield raw, raw
            return
        if kind == "gzip":
            stream, bad = gzip.GzipFile(fileobj=raw), zlib.error
        else:
            stream, bad = _zstd_reader(raw, path)
        try:
            yield stream, raw
        except (OSError, EOFError, bad) as e:
            raise ArchiveError(f"{path}: not a whole {kind} stream ({e})") from None


def check(path: str | os.PathLike) -> None:
    """Raise ArchiveError (one line, naming the file) unless a compressed file decompresses whole: run before
    anything is written, so that a cut-off `.gz` leaves no half-landed file behind. Costs one decompression
    pass (about 0.3 s per 100 MB of gzip here); uncompressed files are not read."""
    p = Path(path)
    if compression(p) is None:
        return
    with open_trace_file(p) as (f, _):
        while f.read(1 << 20):
            pass


def _name_suffix(path: Path) -> str:
    """The suffix that names the format: `.pb` for `traces.pb.gz`."""
    suffixes = [x.lower() for x in path.suffixes]
    while suffixes and suffixes[-1] in COMPRESSED_SUFFIXES:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def input_problem(path: str, what: str = "trace file") -> str | None:
    """Why `path` cannot be read as an input file, in words (`no such file`, `not a regular file (a FIFO)`,
    `an empty file (0 bytes)`), or None when it is a regular file with something in it. A FIFO or a device
    is refused: reading one could block, or never end."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return e.strerror or str(e)
    if stat.S_ISDIR(mode):
        return f"is a directory, not a {what}"
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        return f"not a regular file ({kind})"
    if os.path.getsize(path) == 0:
        return "an empty file (0 bytes)"
    return None


def sniff(path: Path) -> str:
    """`jsonl`, `json` (one document, possibly pretty-printed) or `proto`.

    The extension decides for protobuf; otherwise bytes that are not UTF-8 mean protobuf (its ids are random
    bytes), and a JSON file is JSON lines when one of its first lines is a whole JSON object on its own.
    """
    if _name_suffix(path) in PROTO_SUFFIXES:
        return "proto"
    with open_trace_file(path) as (f, _):
        head = f.read(1 << 16)
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.start < len(head) - 4:  # not just a character cut at the end of the head
                return "proto"
    with open_trace_file(path) as (f, _):
        seen = 0
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                if isinstance(orjson.loads(line), dict):
                    return "jsonl"
            except orjson.JSONDecodeError:
                pass
            seen += 1
            if seen >= 8:
                break
    return "json" if seen else "jsonl"


def _json_format(payload) -> str:
    return otlp_metrics.JSON if otlp_metrics.is_metrics_json(payload) else "otlp-json"


def read_batches(path: str | os.PathLike, tracker=None) -> Iterator[RawBatch]:
    """Yield the batches of a trace file. `tracker(bytes_read)` is called as the file is read."""
    p = Path(path)
    if p.is_dir():
        raise ArchiveError(f"{p} is a directory, not a trace file")
    if not p.exists():
        raise ArchiveError(f"no trace file at {p}")
    kind = sniff(p)
    origin = str(p)
    with open_trace_file(p) as (f, raw):
        if kind == "proto":
            data = f.read()
            msgs = split_messages(data)
            fmt = otlp_metrics.PROTO if msgs and otlp_metrics.is_metrics_proto(msgs[0]) else "otlp-proto"
            for i, m in enumerate(msgs, start=1):
                yield RawBatch(m, fmt, origin, f"message {i}" if len(msgs) > 1 else "document")
        elif kind == "json":
            data = f.read()
            yield RawBatch(data, _json_format(data), origin, "document")
        else:
            for n, line, _ in _lines(f):
                if not _blank(line):
                    yield RawBatch(line, _json_format(line), origin, f"line {n}")
                if tracker and n % 256 == 0:
                    tracker(raw.tell())  # bytes of the file itself, compressed or not: the progress bar's total
        if tracker:
            tracker(raw.tell())


READ_BLOCK = 8 << 20


def _lines(f) -> Iterator[tuple[int, memoryview, int]]:
    """(line number, line with its newline, bytes read so far) for each line of a binary file.

    The file is read in blocks straight into buffers that the lines are views of: one copy of the bytes, where
    iterating the file object costs two (its own buffer, then each line), 0.3 s more for 450 MB here. A line
    longer than a block grows the next block. Each buffer lives as long as a line viewing it."""
    # the C module's blocks are not zeroed before the read overwrites them (bytearray(n) writes n zeros)
    new_block = otlp_fast.block if otlp_fast.AVAILABLE else bytearray
    n = done = 0
    tail = b""
    block = READ_BLOCK
    while True:
        buf = new_block(len(tail) + block)
        memoryview(buf)[: len(tail)] = tail
        got = f.readinto(memoryview(buf)[len(tail) :])
        done += got
        end = len(tail) + got
        view = memoryview(buf)[:end]
        start = 0
        while True:
            nl = buf.find(10, start, end)  # b"\n"
            if nl < 0:
                break
            n += 1
            yield n, view[start : nl + 1], done
            start = nl + 1
        if not got:  # end of file: what is left is a last line without its newline
            if start < end:
                yield n + 1, view[start:end], done
            return
        tail = bytes(view[start:end])
        block = max(block, 2 * len(tail))


def _blank(line: memoryview) -> bool:
    first = line[0] if len(line) else 10
    return first in b" \t\r\n" and not bytes(line).strip()
