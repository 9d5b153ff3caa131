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

from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.shards import ShardError, shard_path
from budgetscope.opener import Archive
from budgetscope.synthetic import SyntheticSpec, write_jsonl
from conftest import rows
from otlp_wire import export, native_request

RUN_COLLECT = "import sys; from budgetscope.commands.collect import collect; collect(sys.argv[1:])"
SHARDS = ("a", "b", "c")
REQUESTS = "SELECT * FROM requests ORDER BY trace_id, server_span_id"


def _collect(archive: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_COLLECT, "--archive", str(archive), "--no-grpc", "--http-port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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
        single, "SELECT count(*), count(DISTINCT trace_id) FROM spans"
    )
    assert rows(root, REQUESTS) == rows(single, REQUESTS)
    assert rows(root, "SELECT count(*) FROM requests") == [(600,)]
    from test_archive_folder import _report

    assert _report(root) == _report(single)
    import polars as pl

    with Archive(root, read_only=True) as r:
        assert r.lazy("requests").select(pl.len()).collect().item() == 600


def test_a_trace_re_derived_in_one_shard_and_seen_in_another_is_one_row(tmp_path):
    """Each shard counts its commits (`_seq`) from 1, and shard a's re-derivation of a trace must not drop what
    shard b holds of it: the trace, seen on both shards, reads as one row derived from all its spans (the
    server spans both shards got counted once)."""
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
        (1, 1, 1)
    ]
    with Archive(root, read_only=True) as r:
        assert r.lazy("requests").collect().height == 1 and r.split_traces == 1


def _batch(doc: dict, position: str):
    from budgetscope.archive.spool import RawBatch

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
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "budgetscope.cli",
            "collect",
            "--archive",
            str(tmp_path / "fleet"),
            "--shard",
            "no/slash",
            "--http-port",
            "0",
            "--no-grpc",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "shard id 'no/slash'" in r.stderr


CLIENT, ROOT = "llm.client.request", "llm.request"


def misrouted(doc: dict, n: int, *, client_away: set[str], stages_away: set[str]) -> list[dict | None]:
    """`fake_load_balancer`, but the client span of a trace in `client_away`, and the stage spans of one in
    `stages_away`, go to the next shard: what a shard list change or a restart mid-trace does."""
    out: list[dict | None] = [None] * n
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            by_shard: dict[int, list] = {}
            for span in ss["spans"]:
                i = zlib.crc32(bytes.fromhex(span["traceId"])) % n
                away = (
                    client_away
                    if span["name"] == CLIENT
                    else stages_away
                    if span["name"].startswith("stage.")
                    else set()
                )
                by_shard.setdefault((i + 1) % n if span["traceId"] in away else i, []).append(span)
            for i, spans in by_shard.items():
                out[i] = out[i] or {"resourceSpans": []}
                out[i]["resourceSpans"].append({**rs, "scopeSpans": [{**ss, "spans": spans}]})
    return out


@pytest.fixture(scope="module")
def split_fleet(tmp_path_factory) -> tuple[Path, Path, int]:
    return build_split_fleet(tmp_path_factory.mktemp("split"))


def build_split_fleet(d: Path) -> tuple[Path, Path, int]:
    """(a sharded root where 1 trace in 7 has its client span on another shard and 1 in 11 its stage spans, the
    same spans in one archive, the number of traces split)."""
    traces = d / "t.jsonl"
    write_jsonl(
        traces, SyntheticSpec(num_requests=400, tiers=("interactive", "batch"), spans_per_line=40, cause="queue")
    )
    exports = [json.loads(line) for line in traces.read_text().splitlines() if line.strip()]
    ids = sorted(
        {
            sp["traceId"]
            for doc in exports
            for rs in doc["resourceSpans"]
            for ss in rs["scopeSpans"]
            for sp in ss["spans"]
        }
    )
    client_away, stages_away = set(ids[::7]), set(ids[3::11])
    root, single = d / "fleet", d / "single"
    with Archive(single) as one:
        one.ingest([_batch(doc, str(k)) for k, doc in enumerate(exports)])
    for i, shard in enumerate(SHARDS):
        with Archive(shard_path(root, shard)) as a:
            parts = [
                misrouted(doc, len(SHARDS), client_away=client_away, stages_away=stages_away)[i] for doc in exports
            ]
            a.ingest([_batch(p, str(k)) for k, p in enumerate(parts) if p is not None])
    return root, single, len(client_away | stages_away)


def _raw_report(path: Path) -> dict:
    from budgetscope.analysis import build_report, load_budgets

    with Archive(path, read_only=True) as r:
        return build_report(r.con, load_budgets(Path(__file__).parent.parent / "sample_traces" / "budgets.toml"))


def test_a_report_over_split_traces_equals_one_archive(split_fleet):
    from spark_support import assert_same  # floats to 1e-9: the rows come in another order, sums round differently

    root, single, split = split_fleet
    assert split > 60
    for s in SHARDS:  # the shards alone hold partial rows: more rows than traces, all time unaccounted in some
        assert rows(
            root / f"shard={s}", "SELECT count(*) FILTER (has_client_span AND server_span_id IS NULL) > 0 FROM requests"
        ) == [(True,)]
    assert rows(root, REQUESTS) == rows(single, REQUESTS)
    assert rows(root, "SELECT count(*) FROM requests") == [(400,)]
    with Archive(root, read_only=True) as r:
        assert r.split_traces == split
        assert r.lazy("requests").select(pl_len()).collect().item() == 400
    assert_same(_raw_report(single), _raw_report(root))


def pl_len():
    import polars as pl

    return pl.len()


def test_the_report_says_how_many_traces_were_split(split_fleet, tmp_path):
    root, _, split = split_fleet
    budgets = Path(__file__).parent.parent / "sample_traces" / "budgets.toml"
    out = {}
    for fmt in ("json", "table", "markdown"):
        r = subprocess.run(
            [sys.executable, "-m", "budgetscope.cli", "report", "-a", str(root), "-b", str(budgets), "--format", fmt],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert r.returncode in (0, 1), r.stderr
        out[fmt] = r.stdout
    assert json.loads(out["json"])["split_traces"] == split
    said = f"{split} traces had spans on more than one shard"
    assert said in out["table"] and said in out["markdown"]
    page = tmp_path / "incident.html"  # the postmortem says it among its notes
    window = ["--from", "0", "--to", str(4_102_444_800 * 10**9)]
    r = subprocess.run(
        [sys.executable, "-m", "budgetscope.cli", "postmortem", "-a", str(root), *window, "-o", str(page)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert f"<div class='note'>{said}" in page.read_text()
