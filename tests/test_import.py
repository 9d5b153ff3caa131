"""`import budgetscope` stays light: no torch, duckdb or streamlit at import time."""

from __future__ import annotations

import subprocess
import sys


def test_import_is_light():
    code = (
        "import sys, budgetscope, budgetscope.cli; "
        "print(sorted(m for m in ('torch', 'duckdb', 'streamlit', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
