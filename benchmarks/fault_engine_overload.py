"""The reference engine offered 5x its capacity, measured from outside it (the load generator and /metrics).

    python benchmarks/fault_engine_overload.py [--factor 5] [--seconds 20]
    python benchmarks/fault_engine_overload.py --closed 512 [--no-retry-after] [--no-deadline]

1. `budgetscope engine serve --config tiny` (4 slots) on a free port.
2. Capacity: a closed loop (`budgetscope load --concurrency 4`) of --capacity-requests: its ok/s.
3. Overload: `budgetscope load` open loop at --factor x capacity for --seconds, each request carrying
   `x-budgetscope-deadline-ms` (the engine's deadline-aware admission) and the clients giving up after it.
   With --closed N instead: a closed loop of N in flight for --seconds (GuideLLM's default sweep opens 512),
   each slot waiting out a 429's Retry-After unless --no-retry-after; --no-deadline sends no deadline header.
   The engine's own ok finishes over the run (/metrics, before and after) tell an engine that collapsed from a
   client that could not keep up.
4. After the run: /metrics says no sequence running or waiting and no KV block held. Admitted requests whose
   clients timed out are listed with their client TTFT and when in the run they were sent.

Checks (exit 1 if one breaks): the engine still serves at least 0.8 x its capacity; it refuses with 429 and
Retry-After, each refusal answered in under --max-refusal-ms (p99); no KV block is left held.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import httpx

from common import free_port, machine

BS = [sys.executable, "-m", "budgetscope.cli"]
SHAPE = ["--prompt-tokens", "128", "--output-tokens", "32"]


def load(url: str, out: Path, *args: str) -> dict:
    r = subprocess.run(
        [*BS, "load", url, *SHAPE, "--format", "json", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        sys.exit(f"budgetscope load failed: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout)


def metric(text: str, name: str) -> float:
    """A sample of the engine's /metrics `text`, NaN when absent."""
    m = re.search(rf"^budgetscope_engine_{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def _engine_ok(url: str) -> float:
    """Requests the engine finished ok so far (its /metrics)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    m = re.search(r'^budgetscope_engine_requests_total\{outcome="ok"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--factor", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--deadline-ms", type=int, default=3000)
    ap.add_argument("--max-refusal-ms", type=float, default=100.0)
    ap.add_argument("--capacity-requests", type=int, default=150, help="requests of the closed-loop capacity run")
    ap.add_argument("--closed", type=int, help="overload with a closed loop of this many in flight instead")
    ap.add_argument("--no-retry-after", action="store_true", help="--closed: the slots ignore Retry-After")
    ap.add_argument("--no-deadline", action="store_true", help="send no x-budgetscope-deadline-ms")
    args = ap.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    engine = subprocess.Popen(
        [
            *BS,
            "engine",
            "serve",
            "--config",
            "tiny",
            "--port",
            str(port),
            "--max-seqs",
            "4",
            "--threads",
            "1",
            "--no-instrument",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if engine.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"the engine did not start: {engine.stderr.read()[-500:]}")
            time.sleep(0.2)
        with tempfile.TemporaryDirectory() as tmp:
            warm = load(url, Path(tmp) / "warm.json", "--rate", "50", "--requests", "8", "--concurrency", "4")
            cap = load(url, Path(tmp) / "cap.json", "--concurrency", "4", "--requests", str(args.capacity_requests))
            capacity = cap["ok_throughput_rps"]
            offered = (
                ["--concurrency", str(args.closed)] + (["--no-retry-after"] if args.no_retry_after else [])
                if args.closed
                else ["--rate", f"{args.factor * capacity:.2f}"]
            )
            deadline = ["--no-deadline"] if args.no_deadline else []  # load sends --timeout as the deadline
            ok_before = _engine_ok(url)
            over = load(
                url,
                Path(tmp) / "over.json",
                *offered,
                "--duration",
                str(args.seconds),
                "--timeout",
                str(args.deadline_ms / 1000),
                *deadline,
            )
            engine_ok = _engine_ok(url) - ok_before
            records = json.loads((Path(tmp) / "over.json").read_text())["requests"]
        del warm
        refusals = sorted(r["client_e2e_ms"] for r in records if r["status"] == 429 and r["client_e2e_ms"] is not None)
        p99 = refusals[min(len(refusals) - 1, int(0.99 * len(refusals)))] if refusals else float("nan")
        late = [r for r in records if r["outcome"] == "timeout"]
        late_started = sorted(r["client_ttft_ms"] for r in late if r["client_ttft_ms"] is not None)
        t0 = min(r["sent_unix_nano"] for r in records if r["sent_unix_nano"] is not None)
        late_at = sorted((r["sent_unix_nano"] - t0) / 1e9 for r in late if r["sent_unix_nano"] is not None)
        time.sleep(args.deadline_ms / 1000 + 1)  # what was admitted finishes or times out
        text = httpx.get(f"{url}/metrics", timeout=10).text
        kv, running, waiting = (
            metric(text, n) for n in ("kv_cache_usage_ratio", "requests_running", "requests_waiting")
        )
        ends = dict(re.findall(r'^budgetscope_engine_requests_total\{outcome="(\w+)"\} (\S+)$', text, re.M))
    finally:
        engine.terminate()
        engine.wait(30)
    served = over["ok_throughput_rps"]
    print(f"capacity (4 in flight, {args.capacity_requests} requests): {capacity:.2f} req/s ok")
    how = (
        f"a closed loop of {args.closed} ({'ignoring' if args.no_retry_after else 'honouring'} Retry-After)"
        if args.closed
        else f"{over['achieved_send_rate_rps'] / capacity:.1f}x"
    )
    print(
        f"offered {over['achieved_send_rate_rps']:.1f} req/s ({how}) for "
        f"{args.seconds:g} s with {'no' if args.no_deadline else f'a {args.deadline_ms} ms'} deadline: "
        f"served {served:.2f} req/s ok "
        f"({served / capacity:.2f} of capacity); statuses {over['status_codes']}; outcomes {over['outcomes']}; "
        f"429 answered in p99 {p99:.1f} ms ({len(refusals)} of them); the engine finished {engine_ok:.0f} ok "
        f"({engine_ok / over['duration_s']:.2f} req/s over the run's {over['duration_s']:.1f} s)"
    )
    if late:  # when in the run admission misjudged, and how long those requests waited
        ttfts = ", ".join(f"{t:.0f}" for t in late_started[:12])
        sent = ", ".join(f"{t:.1f}" for t in late_at[:12])
        print(
            f"the clients gave up on {len(late)} admitted requests ({len(late_started)} had their first token: "
            f"client TTFT {ttfts} ms); sent at {sent} s into the run, {sum(t >= 3 for t in late_at)} of them 3 s "
            f"or more in; the engine's ends (warm-up and capacity runs included): {ends}"
        )
    print(f"after: KV usage {kv:g}, running {running:g}, waiting {waiting:g}; load average {os.getloadavg()[0]:.1f}")
    broken = []
    if served < 0.8 * capacity:
        broken.append("capacity not held")
    if not refusals or not p99 < args.max_refusal_ms:
        broken.append("no fast 429s")
    if kv != 0 or running != 0 or waiting != 0:
        broken.append("KV blocks or sequences left held")
    if broken:
        sys.exit("BROKEN: " + "; ".join(broken))
    print("all held")


if __name__ == "__main__":
    main()
