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


TARGETS = {
    "otlpjson": otlpjson,
    "otlpjson_diff": otlpjson_diff,
    "otlpproto": otlpproto,
    "otlpproto_diff": otlpproto_diff,
    "otlp_metrics": otlp_metrics,
    "budgets": budgets,
    "prometheus": prometheus,
    "query": query,
}
# the targets that need the sanitizer build of the C decoders when fuzzed
SANITIZED = {"otlpjson", "otlpjson_diff", "otlpproto", "otlpproto_diff"}
