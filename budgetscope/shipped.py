"""Files that ship inside the wheel beside the code: the Streamlit dashboard app, the maintained OpenTelemetry
Collector configurations and the demo's budgets.

In the repository they live where its layout puts them (`dashboards/`, `instrumentation/otel-collector/`,
`budgetscope/data/`); the wheel installs the first two as `budgetscope/dashboards/` and `budgetscope/otelcol/`
(setup.py). Each is found through importlib.resources, and in a source checkout (an editable install, or
`PYTHONPATH=.`) in the tree itself.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parent.parent
_IN_TREE = {"dashboards": _SOURCE_ROOT / "dashboards", "otelcol": _SOURCE_ROOT / "instrumentation" / "otel-collector"}

OTELCOL_CONFIGS = {
    "otelcol": "otelcol.yaml",
    "otelcol-sharded": "otelcol-sharded.yaml",
    "otelcol-slis": "otelcol-slis.yaml",
}
"""The Collector configurations `budgetscope example` prints, by name."""


class MissingFile(LookupError):
    """A file that should have shipped with budgetscope is not there (a broken install)."""


def _find(folder: str, name: str) -> Path:
    installed = Path(str(resources.files("budgetscope") / folder / name))
    for path in (installed, _IN_TREE[folder] / name):
        if path.is_file():
            return path
    raise MissingFile(
        f"{installed}: missing from this installation of budgetscope; reinstall it "
        "(pip install --force-reinstall budgetscope)"
    )


def dashboard_app() -> Path:
    """The Streamlit app's entry script (`dashboards/app.py`); its pages are beside it."""
    return _find("dashboards", "app.py")


def otelcol_config(name: str = "otelcol") -> Path:
    """A maintained Collector configuration: `otelcol` (traces and metrics to one collector),
    `otelcol-sharded` (traces load-balanced by trace id over several) or `otelcol-slis` (the live SLIs of
    `collect --budgets` pulled by the Collector's `prometheus` receiver and sent on as OTLP metrics)."""
    return _find("otelcol", OTELCOL_CONFIGS[name])


def demo_budgets() -> Path:
    """The budgets file of the demo and of the recorded archives in `sample_traces/`."""
    path = Path(str(resources.files("budgetscope") / "data" / "demo_budgets.toml"))
    if not path.is_file():
        raise MissingFile(f"{path}: missing from this installation of budgetscope; reinstall it")
    return path
