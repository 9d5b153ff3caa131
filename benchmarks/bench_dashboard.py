"""Dashboard latency on a large archive: the first render (cold process, Budgets page) and a filter change,
timed with Streamlit's AppTest (the whole script run: analysis, caching and layout; no browser paint).

    python benchmarks/bench_dashboard.py [--archive bench-out/report-1000000.duckdb]

The 1,000,000-request archive is built by benchmarks/bench_report.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from budgetscope.synthetic import BUDGETS
from common import machine

ROOT = Path(__file__).resolve().parent.parent


def timed(at) -> float:
    t = time.perf_counter_ns()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return (time.perf_counter_ns() - t) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archive", default=str(ROOT / "bench-out" / "report-1000000.duckdb"))
    args = ap.parse_args()
    budgets = ROOT / "bench-out" / "dashboard-budgets.toml"
    budgets.parent.mkdir(exist_ok=True)
    budgets.write_text(BUDGETS)
    os.environ["BUDGETSCOPE_ARCHIVE"] = str(Path(args.archive).resolve())
    os.environ["BUDGETSCOPE_BUDGETS"] = str(budgets)
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "dashboards" / "app.py"), default_timeout=120)
    first = timed(at)
    n = next(m.value for m in at.metric if m.label == "Requests")
    tenants = at.multiselect(key="f_tenant").options
    at.multiselect(key="f_tenant").set_value([tenants[0]])
    change = timed(at)
    at.multiselect(key="f_tenant").set_value([])
    back = timed(at)
    at.switch_page("pages/timeline.py")
    timeline = timed(at)
    print(machine())
    print(f"archive {args.archive}: {n} requests in the first tier")
    print(f"first render (Budgets page, cold):         {first:.2f} s")
    print(f"filter change (tenant = {tenants[0]}):          {change:.2f} s")
    print(f"filter change back (cached):               {back:.2f} s")
    print(f"Timeline page (first visit):               {timeline:.2f} s")


if __name__ == "__main__":
    main()
