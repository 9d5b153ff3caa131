"""What joining imported records to their server rows by request id (derive/id_links.py) costs the collector's
commits, on an archive without imports (the common case) and with records waiting for their server rows.

    python benchmarks/bench_id_links.py [--spans 300000] [--commits 20]

Opens a folder archive as the collector does (a durable writer) and lands --spans spans in it, 512-span exports
of native requests committed 20 at a time, so that its working set holds them as a collector's does; then times
--commits commits of one more export each, the id links on and off in turn (off: the derivation as it was before
them), first with no import, then after 40 AIPerf-like records whose server rows are not there (every commit then
looks for their ids). Then the once-a-writer read of the waiting records (`IdLinks` seeding) on a fresh writer of
the same archive. Prints medians in ms with the machine and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from common import machine
from otlp_wire import export, native_request


def _export(first: int) -> bytes:
    spans = [s for k in range(120) for s in native_request(arrival=time.time_ns() - 10**9 + (first + k) * 10**6)[1]]
    return json.dumps(export(spans[:512])).encode()


def _build(a, spans: int) -> None:
    from budgetscope.archive.spool import RawBatch

    done = n = 0
    while done < spans:
        a.ingest(
            [RawBatch(_export(n + k * 120), "otlp-json", "bench", f"request {n + k}") for k in range(20)], derive=False
        )
        a.commit()
        done += 20 * 512
        n += 20 * 120


def _imported(root: Path) -> bytes:
    """40 AIPerf-like client records whose ids no server row has."""
    from budgetscope.sources.importers import client_span, document

    t = time.time_ns() - 5 * 10**9
    spans = [
        client_span(
            b"bench-import",
            i,
            sent_ns=t + i * 10**7,
            end_ns=t + i * 10**7 + 5 * 10**8,
            first_token_ns=None,
            itl_ms=None,
            input_tokens=1,
            output_tokens=1,
            model="m",
            error=None,
            extra={"budgetscope.client.request_id": f"waiting-{i}"},
        )
        for i in range(40)
    ]
    return document("aiperf", spans)


def _toggle(on: bool, saved: dict) -> None:
    from budgetscope.derive import id_links

    if on:
        for k, v in saved.items():
            setattr(id_links.IdLinks, k, v)
    else:
        id_links.IdLinks.before = lambda self: None
        id_links.IdLinks.after = lambda self, derived: False
        id_links.IdLinks.kept = lambda self, derived: None
        id_links.IdLinks.tracking = property(lambda self: False)


def _alternating(a, commits: int, first: int) -> dict[bool, list[float]]:
    """ms of each commit of one 512-span export, the id links on and off in turn."""
    from budgetscope.archive.spool import RawBatch
    from budgetscope.derive import id_links

    saved = {k: id_links.IdLinks.__dict__[k] for k in ("before", "after", "kept", "tracking")}
    out: dict[bool, list[float]] = {True: [], False: []}
    try:
        order = [i % 2 == 0 for i in range(commits)]
        random.Random(commits).shuffle(order)  # on and off interleaved at random: the load moves under both alike
        for i, on in enumerate(order):
            _toggle(on, saved)
            a.ingest([RawBatch(_export(first + i * 120), "otlp-json", "bench", f"new {first + i}")], derive=False)
            t = time.perf_counter()
            a.commit()
            out[on].append((time.perf_counter() - t) * 1e3)
    finally:
        _toggle(True, saved)
    return out


def main() -> None:
    from budgetscope.archive.spool import RawBatch
    from budgetscope.derive.id_links import IdLinks
    from budgetscope.opener import Archive

    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=300_000)
    ap.add_argument("--commits", type=int, default=20)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp()) / "a"
    print(f"{machine()}; load average {os.getloadavg()[0]:.1f} at the start")
    with Archive(root, durable=True) as a:
        t = time.perf_counter()
        _build(a, args.spans)
        held = a.con.execute("SELECT count(*) FROM spans").fetchone()[0]
        print(f"{args.spans:,} spans landed in {time.perf_counter() - t:.1f} s; the working set holds {held:,}")
        for label in ("no import", "40 records waiting"):
            if label != "no import":
                a.ingest([RawBatch(_imported(root), "otlp-json", "bench", "aiperf file")], derive=False)
                a.commit()
            ms = _alternating(a, args.commits, 10**7 * (2 if label == "no import" else 3))
            print(
                f"{label:>18}: commit median {statistics.median(ms[False]):6.1f} ms with the id links off, "
                f"{statistics.median(ms[True]):6.1f} ms on; load {os.getloadavg()[0]:.1f}"
            )
    with Archive(root, durable=True) as a:
        links = IdLinks(a.con, a.published_requests, a.bring_back, a.new_spans)
        t = time.perf_counter()
        links._seed()
        print(f"reading the waiting records once ({links.waiting} of them): {(time.perf_counter() - t) * 1e3:.1f} ms")
    shutil.rmtree(root.parent)


if __name__ == "__main__":
    main()
