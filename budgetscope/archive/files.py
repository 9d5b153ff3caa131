"""Read trace files as a stream of `RawBatch`es: OTLP JSON lines, one OTLP JSON document, or OTLP protobuf.

OTLP metrics exports (GPU samples) are told apart per batch (`resourceMetrics`) and routed to `gpu_samples`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from budgetscope.archive.archive import ArchiveError, RawBatch
from budgetscope.archive import otlp_metrics
from budgetscope.archive.otlp_proto import split_messages

PROTO_SUFFIXES = (".pb", ".binpb", ".proto", ".protobuf", ".otlp")


def sniff(path: Path) -> str:
    """`jsonl`, `json` (one document, possibly pretty-printed) or `proto`.

    The extension decides for protobuf; otherwise bytes that are not UTF-8 mean protobuf (its ids are random
    bytes), and a JSON file is JSON lines when one of its first lines is a whole JSON object on its own.
    """
    import orjson

    if path.suffix.lower() in PROTO_SUFFIXES:
        return "proto"
    with open(path, "rb") as f:
        head = f.read(1 << 16)
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.start < len(head) - 4:  # not just a character cut at the end of the head
                return "proto"
        f.seek(0)
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


def _json_format(payload: bytes) -> str:
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
    if kind == "proto":
        data = p.read_bytes()
        msgs = split_messages(data)
        fmt = otlp_metrics.PROTO if msgs and otlp_metrics.is_metrics_proto(msgs[0]) else "otlp-proto"
        for i, m in enumerate(msgs, start=1):
            yield RawBatch(m, fmt, origin, f"message {i}" if len(msgs) > 1 else "document")
        if tracker:
            tracker(len(data))
        return
    if kind == "json":
        data = p.read_bytes()
        yield RawBatch(data, _json_format(data), origin, "document")
        if tracker:
            tracker(len(data))
        return
    done = 0
    with open(p, "rb") as f:
        for n, line in enumerate(f, start=1):
            done += len(line)
            if line.strip():
                yield RawBatch(line, _json_format(line), origin, f"line {n}")
            if tracker and n % 256 == 0:
                tracker(done)
    if tracker:
        tracker(done)
