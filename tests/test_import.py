"""`import budgetscope` stays light: no torch, duckdb or streamlit at import time."""

from __future__ import annotations

from conftest import fresh_python


def test_import_is_light():
    code = (
        "import sys, budgetscope, budgetscope.cli; "
        "print(sorted(m for m in ('torch', 'duckdb', 'streamlit', 'pyarrow') if m in sys.modules))"
    )
    assert fresh_python(code).strip() == "[]"


def test_the_analysis_package_imports_a_module_only_when_it_is_used():
    """`ingest` and `collect` import `analysis.coverage` for their warnings: not the report's modules with it."""
    code = (
        "import sys, budgetscope.analysis.coverage; print('budgetscope.analysis.report' in sys.modules); "
        "from budgetscope.analysis import build_report, load_budgets; print(build_report.__module__, "
        "load_budgets.__module__)"
    )
    assert fresh_python(code).split() == ["False", "budgetscope.analysis.report", "budgetscope.analysis.budgets"]
