"""Run every benchmark in turn and print its figures (`make bench`). Record them in docs/benchmarks.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
BENCHES = [
    "bench_instrument.py",
    "bench_ingest.py",
    "bench_collector.py",
    "bench_slis.py",
    "bench_formats.py",
    "bench_report.py",
    "bench_engine.py",
    "bench_loadgen.py",
    "bench_dashboard.py",
]

if __name__ == "__main__":
    failed = []
    for name in BENCHES:
        if not (HERE / name).exists():
            continue
        print(f"\n===== {name}", flush=True)
        if subprocess.run([sys.executable, str(HERE / name)]).returncode:
            failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")
