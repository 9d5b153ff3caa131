"""The collector's spool: the raw bytes of every batch landed in the in-memory working set but not yet
published, appended and fsynced before the batch is acknowledged.

An acknowledgement must survive a crash, and landing a group of exports in a DuckDB file for that cost a
commit of ~20 ms and a checkpoint now and then (most of the collector's time). Appending the bytes that came in
costs a write and an fsync. After a crash the next writer lands the spooled batches again: those that reached a
commit before the crash are known by their bytes' hash (`ingest_batches`) and skipped, the others land as they
did the first time. A commit empties the spool once its manifest is written.

File `_writer/spool/<n>.spool`, a sequence of records:

    magic b"BSP1" | u32 crc32 of what follows | u16 len(format) | u16 len(origin) | u16 len(position)
    | u64 len(payload) | format | origin | position | payload          (little endian, UTF-8 strings)

A record cut short or failing its checksum ends the file: it was being written when the process died, so it
was never acknowledged.

`append(..., views=True)` hands back each payload as a read-only view of the file it was just written to (a
memory map): the caller may drop its own copy and hold the bytes on disk, in the page cache, until it needs
them (the collector's acknowledged batches wait to land as decoded columns and read their bytes again only if
one must go to the reference decoder).
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from budgetscope.archive.manifest import fsync_dir

MAGIC = b"BSP1"
_HEAD = struct.Struct("<4sI")
_LENS = struct.Struct("<HHHQ")
_IOV_MAX = 1024  # buffers a writev takes: IOV_MAX on Linux and macOS


@dataclass(slots=True)
class RawBatch:
    """One batch as it arrived: an OTLP/JSON document or a serialized protobuf `ExportTraceServiceRequest`."""

    payload: bytes | memoryview  # bytes-like: the lines of a trace file are views of the buffers it was read into
    format: str  # "otlp-json" | "otlp-proto" | "otlp-metrics-json" | "otlp-metrics-proto" (GPU samples)
    origin: str
    position: str


def _record(b: RawBatch) -> tuple[bytes, memoryview]:
    """A batch's record as (everything before the payload, the payload): the payload is written from where it
    lies (copying it into the record had been 15 % of the collector's acceptor)."""
    f, o, p = b.format.encode(), b.origin.encode(), b.position.encode()
    payload = memoryview(b.payload).cast("B")
    meta = _LENS.pack(len(f), len(o), len(p), len(payload)) + f + o + p
    return _HEAD.pack(MAGIC, zlib.crc32(payload, zlib.crc32(meta))) + meta, payload


def _write_all(fd: int, parts: list[memoryview]) -> None:
    """Write the buffers in order, `_IOV_MAX` to a call; a short write goes on from where it stopped."""
    i = 0
    while i < len(parts):
        n = os.writev(fd, parts[i : i + _IOV_MAX])
        while i < len(parts) and n >= len(parts[i]):
            n -= len(parts[i])
            i += 1
        if n:
            parts[i] = parts[i][n:]


def _records(data: bytes) -> Iterator[RawBatch]:
    pos, end = 0, len(data)
    while pos + _HEAD.size + _LENS.size <= end:
        magic, crc = _HEAD.unpack_from(data, pos)
        if magic != MAGIC:
            return
        lf, lo, lp, ln = _LENS.unpack_from(data, pos + _HEAD.size)
        stop = pos + _HEAD.size + _LENS.size + lf + lo + lp + ln
        if stop > end or zlib.crc32(memoryview(data)[pos + _HEAD.size : stop]) != crc:
            return
        at = pos + _HEAD.size + _LENS.size
        fmt, origin = data[at : at + lf].decode(), data[at + lf : at + lf + lo].decode()
        position = data[at + lf + lo : at + lf + lo + lp].decode()
        yield RawBatch(data[at + lf + lo + lp : stop], fmt, origin, position)
        pos = stop


def _files(folder: Path) -> list[Path]:
    return sorted((p for p in folder.glob("*.spool") if p.stem.isdigit()), key=lambda p: int(p.stem))


class Spool:
    """Append-only, fsynced record of unpublished batches under `folder`."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._fd = -1
        self._next = max((int(p.stem) for p in self._files()), default=0) + 1

    def _files(self) -> list[Path]:
        return _files(self.folder)

    def batches(self, upto: int | None = None) -> Iterator[RawBatch]:
        """What the spool holds (in its files up to number `upto`), oldest first (after a crash: what may not
        have been published)."""
        return self.read(self.folder, upto)

    @staticmethod
    def read(folder: Path, upto: int | None = None) -> Iterator[RawBatch]:
        """What the spool in `folder` holds, oldest first, read without creating or opening anything."""
        for p in _files(folder):
            if upto is None or int(p.stem) <= upto:
                yield from _records(p.read_bytes())

    def append(self, batches: Iterable[RawBatch], views: bool = False) -> list[memoryview] | None:
        """Write the batches and fsync: when this returns they survive a crash. `views`: return each batch's
        payload as a read-only view of the file (in order), or None if the file cannot be mapped."""
        parts = [memoryview(x) for b in batches for x in _record(b)]
        if not parts:
            return [] if views else None
        if self._fd < 0:
            path = self.folder / f"{self._next}.spool"
            self._next += 1
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            fsync_dir(self.folder)
        start = os.lseek(self._fd, 0, os.SEEK_END)
        sizes = [len(x) for x in parts]  # before writing: a short write shortens the buffers in `parts`
        try:
            _write_all(self._fd, parts)
            os.fsync(self._fd)
        except OSError:
            # A record cut short ends its file when it is read back: it must stay the file's last, or the
            # acknowledged records appended after it (once the disk has room again) would be lost with it.
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            self.close()  # the next append starts a new file
            raise
        return self._views(start, sizes) if views else None

    def _views(self, start: int, sizes: list[int]) -> list[memoryview] | None:
        """The payloads of the records just written from `start` (`sizes`: head, payload, head, ...), as views of
        one read-only map of those bytes. The map lives as long as a view of it; the file may be deleted
        meanwhile (its pages stay until the map goes), never shortened: the only truncation (a failed append)
        cuts at the end of what was mapped before."""
        at = start - start % mmap.ALLOCATIONGRANULARITY
        end = start + sum(sizes)
        try:
            whole = memoryview(mmap.mmap(self._fd, end - at, offset=at, access=mmap.ACCESS_READ))
        except (OSError, ValueError):  # a file system that cannot map: the caller keeps its bytes
            return None
        out, pos = [], start - at
        for head, payload in zip(sizes[::2], sizes[1::2]):
            pos += head
            out.append(whole[pos : pos + payload])
            pos += payload
        return out

    def rotate(self) -> int:
        """Start a new file at the next append; the number of the last file before it (0: none)."""
        self.close()
        return self._next - 1

    def clear(self, upto: int | None = None) -> None:
        """What the files up to number `upto` (all: None) hold was published: delete them."""
        if upto is None:
            self.close()
        for p in self._files():
            if upto is None or int(p.stem) <= upto:
                p.unlink()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
