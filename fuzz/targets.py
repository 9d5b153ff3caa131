"""The fuzz targets: one function a target, `check(data: bytes)`, which returns when the input is handled as
promised and raises `Finding` (or crashes, under the sanitizers) when it is not. They use nothing of the
fuzzing engine, so a saved input replays anywhere (`fuzz/run.py TARGET --replay FILE`, and
tests/test_fuzz_regressions.py, which replays every file of `fuzz/regressions/`).

| target | what it feeds | what must hold |
|---|---|---|
| `otlpjson` | one OTLP/JSON batch to the C decoder (ASan + UBSan build) | no memory error, no undefined behaviour; a batch taken whole or left whole |
| `otlpjson_diff` | the same, to all three JSON paths | C decoder, DuckDB path and reference decoder: the same rows (C and DuckDB byte for byte; C and the reference byte for byte for a batch with span events), or the same rejection |
| `otlpproto` | one OTLP protobuf batch to the C decoder (ASan + UBSan) | as `otlpjson` |
| `otlpproto_diff` | the same, to the C decoder and the reference path | the same rows byte for byte, or the C decoder leaves what the reference rejects; the reference raises only `BadBatch` |
| `otlp_metrics` | one metrics export, JSON or protobuf (first byte) | `BadBatch` or rows that land in `gpu_samples`'s types; nothing else raised |
| `budgets` | a budgets file's text | `BudgetError` naming the file, or budgets that keep every rule of the format |
| `prometheus` | a `/metrics` body | `PrometheusError` naming its line, or samples; the same samples as prometheus_client where both parse it |
| `query` | SQL to `budgetscope query` | `QueryError` or rows; the archive's files unchanged, no file outside it read, nothing written |
| `inflate` | a gzip or deflate body to `Inflater` in tiny steps and feeds (the first byte picks them) | the output zlib gives in one go, or the same refusal; 413 exactly past the limit; no other exception |
| `http` | bytes on one connection to the OTLP/HTTP receiver (request lines, headers, chunked bodies, pipelining) | well-formed answers, never 500, no error logged; every body handed on is one h11 parses at that place in the stream; no byte left held |
"""

from __future__ import annotations

import atexit
import ctypes
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

SCRATCH = "BUDGETSCOPE_FUZZ_SCRATCH"  # names the scratch folder fuzz/run.py makes for a target's process


class Finding(AssertionError):
    """An input that breaks a promise; the message says which."""


def _exact(data: bytes):
    """A copy of `data` in a buffer of exactly its size (with PYTHONMALLOC=malloc, ASan's redzone starts at its
    last byte: a bytes object's trailing NUL would hide a one-byte over-read)."""
    return (ctypes.c_char * len(data)).from_buffer_copy(data)


# -- the C decoders --------------------------------------------------------------------------------------------

_decoder = None


def decoder():
    """The C module under test: the sanitizer build when the process has the ASan runtime (fuzz/run.py sets it
    up), else the installed extension (a replay in the test process checks the differential only)."""
    global _decoder
    if _decoder is None:
        if os.environ.get("BUDGETSCOPE_FUZZ_SANITIZED") == "1":
            import build

            _decoder = build.load_sanitized()
        else:
            from budgetscope.ingest import _otlpjson

            _decoder = _otlpjson
    return _decoder


def _c_rows(decode, data: bytes):
    """The rows the C decoder wrote for one batch, or None when it left it."""
    from budgetscope.ingest import otlp_fast, staging

    table, taken, left, _ = otlp_fast._table(decode([_exact(data)], [1]), [1])
    if left:
        if table is not None:
            raise Finding("a batch left, but rows written for it")
        return None
    got = [] if table is None else [tuple(r[c] for c in staging.DECODED_COLUMNS) for r in table.to_pylist()]
    if taken != {1: len(got)}:
        raise Finding(f"{taken} spans said taken, {len(got)} rows written")
    return sorted(got, key=repr)


def otlpjson(data: bytes) -> None:
    _c_rows(decoder().decode, data)


def otlpproto(data: bytes) -> None:
    _c_rows(decoder().decode_proto, data)


# -- the other paths -------------------------------------------------------------------------------------------

_con = None


def _duckdb():
    global _con
    if _con is None:
        import duckdb

        from budgetscope.ingest import jsonsql, staging

        _con = duckdb.connect()
        _con.execute("SET threads = 1")
        staging.setup(_con)
        jsonsql.setup(_con)
    return _con


def _staged(batch) -> list | str:
    """Rows the staging SQL makes of a reference decoder's batch, or its first error."""
    from budgetscope.ingest import staging

    con = _duckdb()
    con.register("bs_ref", batch.to_arrow(1))
    try:
        staged = con.execute(
            f"SELECT {', '.join(staging.DECODED_COLUMNS)}, err FROM ({staging.normalise('bs_ref')})"
        ).fetchall()
    finally:
        con.unregister("bs_ref")
    errors = [r[-1] for r in staged if r[-1] is not None]
    return errors[0] if errors else sorted((r[:-1] for r in staged), key=repr)


def _reference(decode, data: bytes) -> list | str:
    """(rows, or the rejection message) of the reference path: the pure-Python decoder, then the staging SQL.
    Any exception but `BadBatch` is a finding: the ingest would fail instead of rejecting the batch."""
    from budgetscope.ingest.spanbatch import BadBatch

    try:
        batch = decode(data)
    except BadBatch as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - that is the finding
        raise Finding(f"the reference decoder raised {type(e).__name__}: {e}") from e
    return _staged(batch) if len(batch) else []


def _json_reference(data: bytes) -> list | str:
    from budgetscope.ingest import otlp_json

    return _reference(lambda d: otlp_json.decode(otlp_json.parse(d)), data)


def _duckdb_rows(data: bytes):
    """The rows the DuckDB path lands for one batch, or None when it hands the batch on (as `jsonsql.land`
    decides: a row count other than the `"spanId"` keys in the bytes, a nested value, no span at all, a bad
    span). The document goes in as the ingest passes it: bytes in a string column, unchecked."""
    import duckdb
    import pyarrow as pa

    from budgetscope.ingest import jsonsql, otlp_json, staging
    from budgetscope.ingest.batches import _binary_column, _int64_column

    con = _duckdb()
    con.register(
        "bs_raw", pa.Table.from_arrays([_int64_column([1]), _binary_column([data])], names=["batch_id", "doc"])
    )
    try:
        # Not JSON to DuckDB: the flattening fails and its retry keeps only valid documents. Asked first, as
        # it is 200 times cheaper than the flattening and most mutated inputs are not JSON.
        try:
            ((valid,),) = con.execute("SELECT json_valid(doc) FROM bs_raw").fetchall()
        except (duckdb.Error, UnicodeDecodeError):
            valid = False
        if not valid:
            return None
        flatten = jsonsql._FLATTEN.replace("@RAW@", "bs_raw")
        sql = f"SELECT {', '.join(staging.DECODED_COLUMNS)}, err FROM ({staging.normalise('(' + flatten + ')')})"
        try:
            got = con.execute(sql.replace("@WHERE@", "")).fetchall()
        except (duckdb.Error, UnicodeDecodeError):  # as jsonsql.land
            got = con.execute(sql.replace("@WHERE@", "WHERE json_valid(doc)")).fetchall()
    finally:
        con.unregister("bs_raw")
    if not otlp_json.count_spans(data):  # as jsonsql.land: a document without a span goes to the reference path
        return None
    if any(r[-1] is not None or "\\u0000" in r[11] + r[12] for r in got) or len(got) != otlp_json.count_spans(data):
        return None
    return sorted((r[:-1] for r in got), key=repr)


def _meaning(rows: list) -> list:
    """Rows with attributes and resource parsed: the reference decoder writes JSON with orjson, the DuckDB path
    and the C decoder as DuckDB's to_json does; the promise between them is the same values."""
    return sorted(([*r[:11], json.loads(r[11]), json.loads(r[12])] for r in rows), key=repr)


def _has_events(data: bytes) -> bool:
    """A span of the batch has a non-empty `events` list: without the C decoder the batch is the reference
    decoder's alone (the DuckDB path hands it on), so the C decoder must store what that path stores."""
    import orjson

    try:
        doc = orjson.loads(data)
        return any(
            isinstance(s, dict) and isinstance(s.get("events"), list) and len(s["events"]) > 0
            for rs in doc["resourceSpans"]
            for ss in rs.get("scopeSpans") or ()
            for s in ss.get("spans") or ()
        )
    except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
        return False


def otlpjson_diff(data: bytes) -> None:
    c = _c_rows(decoder().decode, data)
    ref = _json_reference(data)
    d = _duckdb_rows(data)
    for path, rows in (("the C decoder", c), ("the DuckDB path", d)):
        if rows is None:
            continue
        if isinstance(ref, str):
            raise Finding(f"{path} took a batch the reference decoder rejects ({ref})")
        if _meaning(rows) != _meaning(ref):
            raise Finding(f"{path} and the reference decoder store different spans:\n{rows}\n{ref}")
    if c is not None and d is not None and c != d:
        raise Finding(f"the C decoder and the DuckDB path store different bytes:\n{c}\n{d}")
    if c is not None and d is None and _has_events(data) and c != ref:
        raise Finding(f"a batch with span events: the C decoder and the reference store different bytes:\n{c}\n{ref}")


def otlpproto_diff(data: bytes) -> None:
    from budgetscope.ingest import otlp_proto

    c = _c_rows(decoder().decode_proto, data)
    ref = _reference(otlp_proto.decode, data)
    if c is None:
        return
    if isinstance(ref, str):
        raise Finding(f"the C decoder took a batch the reference rejects ({ref})")
    if c != ref:
        raise Finding(f"the C decoder and the reference path store different bytes:\n{c}\n{ref}")


# -- OTLP metrics ----------------------------------------------------------------------------------------------


def otlp_metrics(data: bytes) -> None:
    """First byte even: OTLP/JSON, odd: protobuf; the rest is the export."""
    from budgetscope.ingest import otlp_metrics as m
    from budgetscope.ingest.spanbatch import BadBatch

    if not data:
        return
    fmt, payload = (m.JSON if data[0] % 2 == 0 else m.PROTO), data[1:]
    try:
        rows = m.decode(payload, fmt)
    except BadBatch as e:
        if "\n" in str(e):
            raise Finding(f"a rejection of more than one line: {e!r}") from None
        return
    except Exception as e:  # noqa: BLE001 - that is the finding
        raise Finding(f"decode raised {type(e).__name__}: {e}") from e
    try:
        rows.to_arrow(1)
    except Exception as e:  # noqa: BLE001 - one failing case is reported and the run goes on
        raise Finding(f"decoded points that do not fit gpu_samples ({type(e).__name__}: {e})") from e
    for ts, v in zip(rows.ts_ns, rows.value):
        if not isinstance(ts, int) or ts <= 0 or not isinstance(v, float):
            raise Finding(f"a point with time {ts!r} and value {v!r}")


# -- budgets TOML ----------------------------------------------------------------------------------------------


def budgets(data: bytes) -> None:
    from budgetscope.analysis.budgets import BUDGETABLE_STAGES, MATCH_KEYS, TTFT_STAGES, BudgetError, parse_budgets

    text = data.decode("utf-8", "replace")
    try:
        b = parse_budgets(text, "fuzz.toml")
    except BudgetError as e:
        if not str(e).startswith("fuzz.toml: "):
            raise Finding(f"an error that does not name the file: {e!r}") from None
        return
    except Exception as e:  # noqa: BLE001 - one failing case is reported and the run goes on
        raise Finding(f"parse_budgets raised {type(e).__name__}: {e}") from e
    if not b.tiers:
        raise Finding("budgets with no tiers")
    for t in b.tiers:
        if not 0 < t.percentile < 100:
            raise Finding(f"tier {t.name}: percentile {t.percentile}")
        budgets_ms = [t.ttft_ms, t.tpot_ms, t.e2e_ms, *t.stages.values()]
        if any(v is not None and not (math.isfinite(v) and v > 0) for v in budgets_ms):
            raise Finding(f"tier {t.name}: a budget that is not a positive number: {budgets_ms}")
        if set(t.stages) - set(BUDGETABLE_STAGES) or set(t.match) - set(MATCH_KEYS):
            raise Finding(f"tier {t.name}: unknown stage or filter kept")
        if t.ttft_ms is not None and sum(v for s, v in t.stages.items() if s in TTFT_STAGES) > t.ttft_ms:
            raise Finding(f"tier {t.name}: stage budgets overflow ttft_ms")
        if t.e2e_ms is not None and sum(t.stages.values()) > t.e2e_ms:
            raise Finding(f"tier {t.name}: stage budgets overflow e2e_ms")


# -- Prometheus text -------------------------------------------------------------------------------------------


def _client_samples(text: str):
    """prometheus_client's samples for a body without `#` lines, as (name, labels, value, ts in µs), or None
    when it does not parse it (or is not installed)."""
    try:
        from prometheus_client import parser
    except ImportError:
        return None
    try:
        out = []
        for family in parser.text_string_to_metric_families(text):
            for s in family.samples:
                ts = None if s.timestamp is None else round(float(s.timestamp) * 1e6)
                out.append((s.name, dict(s.labels), s.value, ts))
        return out
    except Exception:  # noqa: BLE001 - its parser raises ValueError, IndexError, ... on what it refuses
        return None


def _same_value(a: float, b) -> bool:
    """prometheus_client keeps an integer value as a Python int, exact; budgetscope's values are floats."""
    try:
        b = float(b)
    except OverflowError:
        return math.isinf(a)
    return a == b or (math.isnan(a) and math.isnan(b))


def _same_ts(a: int | None, b: int | None) -> bool:
    """budgetscope reads a timestamp exactly (Decimal), prometheus_client as a float: 1.7e92 ms differ past
    the float's 17 digits."""
    return a == b or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12))


def prometheus(data: bytes) -> None:
    from budgetscope.sources.prometheus import PrometheusError, parse

    text = data.decode("utf-8", "replace")
    try:
        ours = parse(text)
    except PrometheusError as e:
        if not str(e).startswith("line "):
            raise Finding(f"an error that does not name its line: {e!r}") from None
        ours = None
    except Exception as e:  # noqa: BLE001 - one failing case is reported and the run goes on
        raise Finding(f"parse raised {type(e).__name__}: {e}") from e
    # Against prometheus_client where it parses the body: comment lines aside (its # TYPE renames counters).
    if any(line.lstrip().startswith("#") for line in text.splitlines()):
        return
    # Only where both parse: budgetscope is stricter by design (an unquoted name that is not a legacy name,
    # `a.b 1`, is an error; prometheus_client takes any bytes up to the space as the name).
    theirs = _client_samples(text)
    if theirs is None or ours is None:
        return
    mine = [(s.metric, s.labels, s.value, None if s.ts_ns is None else round(s.ts_ns / 1000)) for s in ours]
    if len(mine) != len(theirs) or not all(
        a[0] == b[0] and a[1] == b[1] and _same_value(a[2], b[2]) and _same_ts(a[3], b[3]) for a, b in zip(mine, theirs)
    ):
        raise Finding(f"different samples from prometheus_client:\n{mine}\n{theirs}")


# -- the SQL sandbox of `budgetscope query` --------------------------------------------------------------------

SECRET = "budgetscope-fuzz-secret-7f3a9c"


class _Sandbox:
    """An archive to query, and a file beside it that no query may read."""

    def __init__(self):
        # under fuzz/run.py, in the scratch folder its parent process removes (a libFuzzer run ends with exit(),
        # which skips atexit); replayed in a pytest process, removed at its exit
        self.root = Path(tempfile.mkdtemp(prefix="budgetscope-fuzz-query-", dir=os.environ.get(SCRATCH)))
        atexit.register(shutil.rmtree, self.root, True)
        self.archive = self.root / "archive"
        from budgetscope.ingest.files import read_batches
        from budgetscope.opener import Archive
        from budgetscope.synthetic import SyntheticSpec, write_jsonl

        traces = self.root / "traces.jsonl"
        write_jsonl(traces, SyntheticSpec(num_requests=20))
        with Archive(self.archive) as a:
            a.ingest(read_batches(traces))
        traces.unlink()
        for name in ("secret.txt", "secret.csv", "secret.json"):
            (self.root / name).write_text(f'{{"k": "{SECRET}"}}\n' if name.endswith("json") else f"k\n{SECRET}\n")
        self.segment = next(self.archive.glob("spans/**/*.parquet"))
        self.files = self.snapshot()

    def snapshot(self) -> dict:
        return {
            str(p.relative_to(self.root)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(self.root.rglob("*"))
            if p.is_file()
        }


_sandbox = None


def query(data: bytes) -> None:
    from budgetscope.query import QueryError, run_query

    global _sandbox
    if _sandbox is None:
        _sandbox = _Sandbox()
    # the paths a reader may read, which DuckDB would let a statement write too: the first hole wrote a segment
    sql = (
        data.decode("utf-8", "replace")
        .replace("@SECRET@", str(_sandbox.root / "secret"))
        .replace("@SEGMENT@", str(_sandbox.segment))
        .replace("@ARCHIVE@", str(_sandbox.archive))
    )
    try:
        result = run_query(_sandbox.archive, sql)
    except QueryError as e:
        if "\n" in str(e):
            raise Finding(f"a QueryError of more than one line: {e!r}") from None
        result = None
    except Exception as e:  # noqa: BLE001 - one failing case is reported and the run goes on
        raise Finding(f"run_query raised {type(e).__name__}: {e}") from e
    if result is not None and SECRET in repr(result.rows):
        raise Finding(f"a query read a file outside the archive: {sql!r}")
    if _sandbox.snapshot() != _sandbox.files:
        raise Finding(f"a query changed the files: {sql!r}")


# -- the OTLP/HTTP receiver's framing ---------------------------------------------------------------------------

STATUSES = {200, 400, 401, 404, 405, 411, 413, 415, 429, 431, 501, 503, 505}  # 500 is a bug


class _FakeArchiveWriter:
    """A fake of the collector's archive writer: takes every ticket of the queue, records its payload and answers
    it LANDED (the receiver's framing is under test, not the archive)."""

    def __init__(self, queue):
        import threading

        self.queue = queue
        self.payloads: list[bytes] = []
        threading.Thread(target=self._run, name="fuzz-fake-writer", daemon=True).start()

    def _run(self) -> None:
        from budgetscope.collector.pending import Outcome

        while True:
            for t in self.queue.take(0.0, 1 << 30) or []:
                self.payloads.append(t.payload)
                self.queue.release(t.reserved)
                t.resolve(Outcome.LANDED)


class _ErrorLog:
    """The receiver's log records at ERROR or above."""

    def __init__(self):
        import logging

        self.records: list = []
        handler = logging.Handler(logging.ERROR)
        handler.emit = self.records.append
        logging.getLogger("budgetscope.collector").addHandler(handler)


_http = None


def _receiver():
    """One receiver for the process: 64 KiB messages, a budget of 256 KiB, GET /metrics and /status served."""
    global _http
    if _http is None:
        from budgetscope.collector.http_receiver import OtlpHttpReceiver
        from budgetscope.collector.pending import PendingQueue

        queue = PendingQueue(256 << 10)
        receiver = OtlpHttpReceiver(
            "127.0.0.1",
            0,
            queue,
            64 << 10,
            1.0,
            metrics=True,
            status=lambda: {"state": "fuzzing"},
            self_metrics=lambda: b"fuzz_up 1\n",
        )
        receiver.start()
        _http = (receiver, queue, _FakeArchiveWriter(queue), _ErrorLog())
    return _http


def _exchange(port: int, data: bytes) -> tuple[bytes, bool]:
    """Send `data` on a new connection, half-close, read until the receiver closes; (what came back, whether it
    came back whole: False after a reset, which may eat answers)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # answered and closed before all of it was read: the answers are still to read
        out = b""
        try:
            while chunk := s.recv(1 << 16):
                out += chunk
        except TimeoutError:
            raise Finding("the receiver neither answered nor closed within 10 s of the input's end") from None
        except OSError:
            return out, False
    return out, True


def _responses(out: bytes) -> list[int]:
    """The final statuses of the responses in `out`, each checked: a status line, headers, a Content-Length body
    (an interim `100 Continue` is a status line alone)."""
    statuses = []
    while out:
        head, sep, rest = out.partition(b"\r\n\r\n")
        if not sep:
            raise Finding(f"an answer cut short: {out[:200]!r}")
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or parts[0] != b"HTTP/1.1" or not parts[1].isdigit():
            raise Finding(f"not an HTTP/1.1 status line: {lines[0][:200]!r}")
        if parts[1] == b"100":  # an interim answer to `Expect: 100-continue`: a status line alone, no body
            if len(lines) != 1:
                raise Finding(f"a 100 Continue with header fields: {head[:200]!r}")
            out = rest
            continue
        fields = dict(line.split(b": ", 1) for line in lines[1:])
        if b"Content-Length" not in fields:
            raise Finding(f"an answer without a Content-Length: {head[:200]!r}")
        length = int(fields[b"Content-Length"])
        statuses.append(int(parts[1]))
        out = rest[length:]
    return statuses


def _reference_bodies(data: bytes) -> list[bytes | None]:
    """h11's reading of `data` as requests on one connection (empty lines before a request line skipped, as RFC
    9112 2.2 allows and h11 does not): each request's body, inflated as its Content-Encoding says (None when
    that fails); up to the first request h11 refuses or cannot finish."""
    import gzip
    import zlib

    import h11

    bodies: list[bytes | None] = []
    rest = data
    while rest:
        while rest.startswith(b"\r\n"):
            rest = rest[2:]
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=80 << 10)
        conn.receive_data(rest)
        conn.receive_data(b"")
        body, encoding = b"", b""
        try:
            while True:
                event = conn.next_event()
                if isinstance(event, h11.Request):
                    encoding = dict(event.headers).get(b"content-encoding", b"").strip().lower()
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:  # NEED_DATA at the end, or the peer gone: no whole request
                    return bodies
        except h11.RemoteProtocolError:
            return bodies
        try:
            if encoding in (b"gzip", b"x-gzip"):
                body = gzip.decompress(body)
            elif encoding == b"deflate":
                try:
                    d = zlib.decompressobj(zlib.MAX_WBITS)
                    inflated = d.decompress(body)
                except zlib.error:
                    d = zlib.decompressobj(-zlib.MAX_WBITS)
                    inflated = d.decompress(body)
                body = inflated if d.eof else None
        except (OSError, EOFError, zlib.error):
            body = None
        bodies.append(body)
        conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
        conn.send(h11.EndOfMessage())
        if conn.our_state is h11.MUST_CLOSE:
            return bodies
        rest = conn.trailing_data[0]
    return bodies


def _is_subsequence(got: list[bytes], of: list[bytes | None]) -> bool:
    it = iter(of)
    return all(any(g == o for o in it) for g in got)


def http(data: bytes) -> None:
    import time

    receiver, queue, writer, errors = _receiver()
    landed_before = len(writer.payloads)
    out, whole = _exchange(receiver.port, data)
    if whole:
        statuses = _responses(out)
        if bad := [s for s in statuses if s not in STATUSES]:
            raise Finding(f"answered {bad}")
    deadline = time.monotonic() + 5
    while (receiver.num_connections or queue.pending_bytes) and time.monotonic() < deadline:
        time.sleep(0.001)
    if queue.pending_bytes:
        raise Finding(f"{queue.pending_bytes:,} bytes still held after the connection ended")
    if errors.records:
        raise Finding(f"the receiver logged an error: {errors.records[0].getMessage()}")
    landed = writer.payloads[landed_before:]
    if landed and not _is_subsequence(landed, _reference_bodies(data)):
        raise Finding(f"a body was handed on that h11 does not read there: {landed!r}")


# -- bounded inflation ----------------------------------------------------------------------------------------


def _reference_inflate(body: bytes, is_gzip: bool, wbits: int) -> tuple[bytes | None, int]:
    """(the output zlib makes of `body` in one call a stream, or None when it refuses it; the gzip members)."""
    import zlib

    out, rest, members = b"", body, 0  # an empty body is an empty output (a client that gzips nothing)
    try:
        while rest:
            members += 1
            d = zlib.decompressobj(wbits)
            out += d.decompress(rest)
            if not d.eof:
                return None, members
            rest = d.unused_data if is_gzip else b""
    except zlib.error:
        return None, members
    return out, members


def inflate(data: bytes) -> None:
    """The first byte's bit 0: gzip (0) or deflate (1); bits 1-2: zlib fed 7, 61 or 509 bytes a call; bit 3: steps
    of 97 or 4,099 bytes. The rest is the body, inflated in tiny steps and feeds (the paths of a large body on a
    small input) against zlib in one call a stream."""
    from budgetscope.collector import inflate as inf

    if not data:
        return
    encoding, body, limit = ("gzip" if data[0] % 2 == 0 else "deflate"), data[1:], 4096
    # the module's sizes, set for this input and put back after it: a replay in a test process leaves them as
    # they were for the tests after it
    saved = inf.FEED_BYTES, inf.STEP_BYTES
    inf.FEED_BYTES = (7, 61, 509)[(data[0] >> 1 & 3) % 3]
    inf.STEP_BYTES = (97, 4099)[data[0] >> 3 & 1]
    pool = inf.InflatePool(2 * limit + 2)
    i = inf.Inflater(body, encoding, limit, pool)
    try:
        while not i.step():
            if i.held != i.size or pool.used != i.held:
                raise Finding(f"{pool.used} bytes counted in the pool for {i.size} made")
        ours: bytes | int = i.output
    except inf.InflateError as e:
        if "\n" in str(e):
            raise Finding(f"a refusal of more than one line: {e!r}") from None
        ours = e.status
    except Finding:
        raise
    except Exception as e:  # noqa: BLE001 - that is the finding
        raise Finding(f"the inflater raised {type(e).__name__}: {e}") from e
    finally:
        pool.release(i)
        inf.FEED_BYTES, inf.STEP_BYTES = saved
    ref, members = _reference_inflate(body, i.is_gzip, i.wbits)
    if ref is not None and len(ref) > limit:
        want: bytes | int = 413
    elif ref is not None and members > inf.MAX_GZIP_MEMBERS and i.is_gzip:
        want = 400
    else:
        want = 400 if ref is None else ref
    if ours != want and not (ours == 413 and ref is None):  # past the limit before the bad byte: 413 first
        raise Finding(f"inflated to {ours if isinstance(ours, int) else len(ours)!r}, zlib says {want!r}")


TARGETS = {
    "otlpjson": otlpjson,
    "otlpjson_diff": otlpjson_diff,
    "otlpproto": otlpproto,
    "otlpproto_diff": otlpproto_diff,
    "otlp_metrics": otlp_metrics,
    "budgets": budgets,
    "prometheus": prometheus,
    "query": query,
    "inflate": inflate,
    "http": http,
}
# the targets that need the sanitizer build of the C decoders when fuzzed
SANITIZED = {"otlpjson", "otlpjson_diff", "otlpproto", "otlpproto_diff"}
