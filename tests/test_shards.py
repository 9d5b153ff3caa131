"""Sharded collection: three `budgetscope collect --shard` processes behind a router by trace id, read as one."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import httpx
import pytest
from conftest import rows
from otlp_wire import export, native_request

from budgetscope.archive.archive import Archive, ArchiveError
from budgetscope.archive.shards import ShardError, shard_path
from budgetscope.synthetic import SyntheticSpec, write_jsonl

RUN_COLLECT = "import sys; from budgetscope.collector.command import collect; collect(sys.argv[1:])"
SHARDS = ("a", "b", "c")
REQUESTS = "SELECT * FROM requests ORDER BY trace_id, server_span_id"


def _collect(archive: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", RUN_COLLECT, "--archive", str(archive), "--no-grpc",
                             "--http-port", "0", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    banner = proc.stdout.readline()
    m = re.match(r"budgetscope collect: OTLP/HTTP http://127\.0\.0\.1:(\d+)/v1/traces;", banner)
    assert m, banner + (proc.stderr.read() if proc.poll() is not None else "")
    return proc, int(m.group(1))


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, proc.stderr.read()


def fake_load_balancer(doc: dict, n: int) -> list[dict | None]:
    """A stand-in for the OpenTelemetry Collector's `loadbalancing` exporter (routing_key: traceID): the spans of
    one export split by a hash of their trace id, resource and scope kept, one export per shard (None: none)."""
    out: list[dict | None] = [None] * n
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            by_shard: dict[int, list] = {}
            for span in ss["spans"]:
                by_shard.setdefault(zlib.crc32(bytes.fromhex(span["traceId"])) % n, []).append(span)
            for i, spans in by_shard.items():
                out[i] = out[i] or {"resourceSpans": []}
                out[i]["resourceSpans"].append({**rs, "scopeSpans": [{**ss, "spans": spans}]})
    return out


@pytest.mark.slow
def test_three_shards_behind_a_router_read_as_one_equal_one_collector(tmp_path):
    traces = tmp_path / "t.jsonl"
    write_jsonl(traces, SyntheticSpec(num_requests=600, tiers=("interactive", "batch"), spans_per_line=50))
    exports = [json.loads(line) for line in traces.read_text().splitlines() if line.strip()]
    root, single = tmp_path / "fleet", tmp_path / "single"
    procs = [_collect(root, "--shard", s) for s in SHARDS]
    one = _collect(single)
    try:
        with httpx.Client(timeout=60) as client:
            for doc in exports:
                r = client.post(f"http://127.0.0.1:{one[1]}/v1/traces", json=doc)
                assert r.status_code == 200
                for (_, port), part in zip(procs, fake_load_balancer(doc, len(SHARDS))):
                    if part is not None:
                        assert client.post(f"http://127.0.0.1:{port}/v1/traces", json=part).status_code == 200
    finally:
        for proc, _ in [*procs, one]:
            _stop(proc)
    assert sorted(p.name for p in root.iterdir()) == [f"shard={s}" for s in SHARDS]
    for s in SHARDS:  # every shard got traces of its own
        assert rows(root / f"shard={s}", "SELECT count(*) > 0 FROM requests") == [(True,)]
    assert rows(root, "SELECT count(*), count(DISTINCT trace_id) FROM spans") == rows(
        single, "SELECT count(*), count(DISTINCT trace_id) FROM spans")
    assert rows(root, REQUESTS) == rows(single, REQUESTS)
    assert rows(root, "SELECT count(*) FROM requests") == [(600,)]
    from test_archive_folder import _report

    assert _report(root) == _report(single)
    import polars as pl

    with Archive(root, read_only=True) as r:
        assert r.lazy("requests").select(pl.len()).collect().item() == 600


def test_a_trace_re_derived_in_one_shard_is_not_dropped_from_another(tmp_path):
    """Each shard counts its commits (`_seq`) from 1: shard a's re-derivation of a trace must not drop the row
    shard b derived from its own spans of the same trace (misrouted: two partial rows, as documented)."""
    root = tmp_path / "fleet"
    _, spans = native_request(client=(5, 3))
    server = [s for s in spans if s["name"] != "llm.client.request"]
    client = [s for s in spans if s["name"] == "llm.client.request"]
    with Archive(shard_path(root, "a")) as a:  # two commits: the second re-derives the trace (a delete, _seq 2)
        a.ingest([_batch(export(server), "1")])
        a.ingest([_batch(export(client, service="loadgen"), "2")])
    with Archive(shard_path(root, "b")) as b:  # one commit (_seq 1) of the same trace's server spans
        b.ingest([_batch(export(server), "1")])
    assert rows(root, "SELECT count(*), count(DISTINCT trace_id), count(*) FILTER (has_client_span) FROM requests") == [
        (2, 1, 1)]
    with Archive(root, read_only=True) as r:
        assert r.lazy("requests").collect().height == 2


def _batch(doc: dict, position: str):
    from budgetscope.ingest.batches import RawBatch

    return RawBatch(json.dumps(doc).encode(), "otlp-json", "test", position)


def test_shard_ids_and_roots_are_checked_in_one_line(tmp_path):
    for bad in ("", "a/b", "..", "x" * 65, "sp ace"):
        with pytest.raises(ShardError, match="shard id"):
            shard_path(tmp_path / "fleet", bad)
    with pytest.raises(ShardError, match="a folder, not a single file"):
        shard_path(tmp_path / "fleet.duckdb", "a")
    plain = tmp_path / "plain"
    with Archive(plain) as a:
        a.ingest([_batch(export(native_request()[1]), "1")])
    with pytest.raises(ShardError, match="is an archive of its own"):
        shard_path(plain, "a")
    with Archive(shard_path(tmp_path / "fleet", "a")):
        pass
    with pytest.raises(ArchiveError, match="is a sharded archive: read it as a whole, write one shard"):
        Archive(tmp_path / "fleet")
    r = subprocess.run([sys.executable, "-m", "budgetscope.cli", "collect", "--archive", str(tmp_path / "fleet"),
                        "--shard", "no/slash", "--http-port", "0", "--no-grpc"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "shard id 'no/slash'" in r.stderr
