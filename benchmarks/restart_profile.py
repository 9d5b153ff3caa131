"""Where a restart of `budgetscope collect` after kill -9 spends its time, up to listening.

    python benchmarks/restart_profile.py [--spans 300000] [--spool-spans 20000] [--runs 3]

Builds an archive of --spans spans (as a collector publishes them) and a spool of --spool-spans acknowledged,
unpublished spans (what kill -9 leaves), then, --runs times on a fresh copy: (1) runs `collect` as a process and
times it from spawn to its banner (what `fault_kill9_collect.py` measures); (2) in another process, times each
phase: the interpreter, importing the command, opening the archive (its parts: orphans, working set, batch
records, seeding dropped traces, landing the spool, the first commit, the compactor) and binding. Prints the
medians in ms.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from common import machine
from otlp_wire import export, native_request

RUN_COLLECT = "import sys; from budgetscope.commands.collect import collect; collect(sys.argv[1:])"

PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
out = {}
from budgetscope.commands.collect import collect  # what `budgetscope collect` imports before anything
out["import the command"] = time.perf_counter() - t0
from budgetscope.collector import Collector
out["import the collector"] = time.perf_counter() - t0 - out["import the command"]
import budgetscope.archive.directory as d
import budgetscope.archive.compaction as comp
from budgetscope.archive.duckdb_archive import DuckDBArchive
import budgetscope.collector.server as srv
import budgetscope.collector.writer as wr

def timed(owner, name, label):
    real = getattr(owner, name, None)
    if real is None:  # an older version of the code, without that part
        return
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            out[label] = out.get(label, 0.0) + time.perf_counter() - t
    setattr(owner, name, wrapper)

timed(d, "_remove_orphans", "archive: remove orphans")
timed(DuckDBArchive, "__init__", "archive: working set (DuckDB in memory)")
timed(d.DirectoryArchive, "_setup_state", "archive: load batch records")
timed(d.DirectoryArchive, "_seed_dropped", "archive: seed dropped traces")
timed(d.DirectoryArchive, "recover", "archive: land and publish the spool (recover)")
timed(d.DirectoryArchive, "_land_spool", "archive: land the spool (before recover)")
timed(wr.ArchiveWriter, "_recover", "after start: land and publish the spool, while listening")
timed(comp.Compactor, "__init__", "archive: start the compactor")
timed(wr.ArchiveWriter, "start", "open the archive (all)")
timed(srv.Collector, "_bind", "bind the receivers")
c = Collector(sys.argv[1], grpc_port=None, http_port=0)
t = time.perf_counter()
c.start()
out["Collector.start (all)"] = time.perf_counter() - t
out["process to listening"] = time.perf_counter() - t0
import httpx
body = open(sys.argv[2], "rb").read()
r = httpx.post(f"http://127.0.0.1:{c.http_port}/v1/traces", content=body, headers={"Content-Type": "application/json"})
assert r.status_code == 200, r.text
out["process to the first export answered"] = time.perf_counter() - t0
c.stop()
print(json.dumps(out))
"""


def build(root: Path, spans: int, spool_spans: int) -> None:
    """An archive of `spans` published spans and a spool of `spool_spans` acknowledged ones (as after kill -9)."""
    from budgetscope.archive.spool import RawBatch, Spool
    from budgetscope.opener import Archive

    def batches(first: int, n_spans: int, origin: str) -> list:
        docs, i = [], first
        per = 20 * 6  # 20 requests of 6 spans an export, as the kill -9 benchmark sends
        for _ in range(max(1, n_spans // per)):
            docs.append(
                export(
                    [
                        s
                        for k in range(20)
                        for s in native_request(arrival=time.time_ns() - 3600 * 10**9 + (i + k) * 10**6)[1]
                    ]
                )
            )
            i += 20
        return [RawBatch(json.dumps(d).encode(), "otlp-json", origin, f"request {n}") for n, d in enumerate(docs)], i

    published, nxt = batches(0, spans, "otlp-http")
    with Archive(root, durable=True) as a:
        for k in range(0, len(published), 200):
            a.ingest(published[k : k + 200], derive=False)
            a.commit()
    acked, _ = batches(nxt, spool_spans, "otlp-http")
    Spool(root / "_writer" / "spool").append(acked)


def _banner(tree: str, root: Path) -> float:
    """Seconds from spawning `collect` of the checkout `tree` on `root` to its banner (it then listens)."""
    import os

    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_COLLECT, "--archive", str(root), "--no-grpc", "--http-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": tree},
    )
    proc.stdout.readline()
    took = time.perf_counter() - t0
    proc.terminate()
    proc.communicate(timeout=60)
    return took


def killed(root: Path, seconds: float, clients: int = 4) -> int:
    """The state kill -9 leaves: `collect` on `root` under `clients` OTLP/HTTP senders for `seconds`, then
    SIGKILL. Returns the spans acknowledged."""
    import re
    import threading

    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_COLLECT, "--archive", str(root), "--no-grpc", "--http-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    port = int(re.search(r":(\d+)/v1/traces", proc.stdout.readline()).group(1))
    acked, stop = [0], threading.Event()

    def send() -> None:
        with httpx.Client(timeout=10) as h:
            while not stop.is_set():
                doc = export([s for _ in range(20) for s in native_request(arrival=time.time_ns())[1]])
                try:
                    r = h.post(
                        f"http://127.0.0.1:{port}/v1/traces",
                        content=json.dumps(doc),
                        headers={"Content-Type": "application/json"},
                    )
                    acked[0] += 120 if r.status_code == 200 else 0
                except httpx.HTTPError:
                    return

    senders = [threading.Thread(target=send) for _ in range(clients)]
    for t in senders:
        t.start()
    time.sleep(seconds)
    proc.kill()
    proc.wait()
    stop.set()
    for t in senders:
        t.join()
    return acked[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=300_000)
    ap.add_argument("--spool-spans", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--kill-after",
        type=float,
        metavar="S",
        help="instead of building the archive, run `collect` "
        "under 4 senders for S seconds and kill -9 it (the state `fault_kill9_collect.py` restarts on)",
    )
    ap.add_argument(
        "--also",
        metavar="TREE",
        help="another checkout of budgetscope (e.g. `git worktree add` of an "
        "older commit, with its compiled decoders): its spawn-to-banner is timed too, runs interleaved",
    )
    args = ap.parse_args()
    import os

    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        if args.kill_after:
            print(
                f"archive: collect killed after {args.kill_after:g} s under load, "
                f"{killed(base, args.kill_after):,} spans acknowledged"
            )
        else:
            build(base, args.spans, args.spool_spans)
            print(f"archive: {args.spans:,} spans published, {args.spool_spans:,} in the spool")
        (Path(tmp) / "export.json").write_text(
            json.dumps(export([s for k in range(20) for s in native_request(arrival=time.time_ns() + k * 10**6)[1]]))
        )
        here = str(Path(__file__).resolve().parent.parent)
        trees = [here] + ([str(Path(args.also).resolve())] if args.also else [])
        banners: dict[str, list[float]] = {t: [] for t in trees}
        phases = []
        for run in range(args.runs):
            for kind in [*trees, "phases"]:
                root = Path(tmp) / f"{len(phases)}-{run}-{Path(kind).name}"
                shutil.copytree(base, root)
                if kind != "phases":
                    banners[kind].append(_banner(kind, root))
                else:
                    r = subprocess.run(
                        [sys.executable, "-c", PHASES, str(root), str(Path(tmp) / "export.json")],
                        capture_output=True,
                        text=True,
                        timeout=120,
                        cwd=here,
                        env={**os.environ, "PYTHONPATH": here},
                    )
                    if r.returncode:
                        sys.exit(r.stderr)
                    phases.append(json.loads(r.stdout.strip().splitlines()[-1]))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare = time.perf_counter() - t0
    for tree, banner in banners.items():
        print(
            f"spawn to banner (collect, --no-grpc) of {tree}: median {statistics.median(banner) * 1e3:,.0f} ms, "
            f"max {max(banner) * 1e3:,.0f} ms over {args.runs} runs"
        )
    print(f"  a bare interpreter: {bare * 1e3:,.0f} ms")
    for name in phases[0]:
        print(f"  {name}: {statistics.median(p.get(name, 0.0) for p in phases) * 1e3:,.0f} ms")


if __name__ == "__main__":
    main()
