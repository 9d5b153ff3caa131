"""What ships beside the code (the dashboard app, the Collector configs, the budgets), found through
importlib.resources; and a command whose optional extra is missing says which one to install, in one line.
The installed-wheel check is tests/test_wheel_install.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from click.testing import CliRunner

from budgetscope import shipped
from budgetscope.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_shipped_files_are_found_in_the_source_tree():
    assert shipped.dashboard_app() == ROOT / "dashboards" / "app.py"
    assert shipped.otelcol_config() == ROOT / "instrumentation" / "otel-collector" / "otelcol.yaml"
    assert shipped.otelcol_config("otelcol-sharded").name == "otelcol-sharded.yaml"
    assert shipped.demo_budgets().read_text() == (ROOT / "sample_traces" / "budgets.toml").read_text()


def test_installed_copy_wins_over_the_tree(monkeypatch, tmp_path):
    """In a wheel the files sit in the package (budgetscope/dashboards/, budgetscope/otelcol/); that is where
    importlib.resources looks first."""
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "dashboards" / "app.py").write_text("# installed\n")
    monkeypatch.setattr(shipped.resources, "files", lambda package: tmp_path)
    assert shipped.dashboard_app() == tmp_path / "dashboards" / "app.py"


def test_a_file_missing_everywhere_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(shipped.resources, "files", lambda package: tmp_path)
    monkeypatch.setitem(shipped._IN_TREE, "dashboards", tmp_path / "nowhere")
    r = CliRunner().invoke(main, ["dashboard", "-a", str(ROOT / "sample_traces" / "burst")])
    assert r.exit_code == 2
    assert "missing from this installation of budgetscope; reinstall it" in r.output
    assert "source tree" not in r.output


def test_setup_maps_the_documented_folders_into_the_package():
    text = (ROOT / "setup.py").read_text()
    assert '"budgetscope.dashboards": "dashboards"' in text
    assert '"budgetscope.otelcol": "instrumentation/otel-collector"' in text


def test_license_and_project_urls():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(meta["urls"])
    assert all(u.startswith("https://") for u in meta["urls"].values())


@pytest.mark.parametrize(
    "name, needle",
    [
        ("otelcol", "otlp_grpc/budgetscope"),
        ("otelcol-sharded", "loadbalancing"),
        ("otelcol-slis", "prometheus/budgetscope"),
        ("budgets", "[tiers."),
    ],
)
def test_example_prints_a_shipped_file(name, needle):
    r = CliRunner().invoke(main, ["example", name])
    assert r.exit_code == 0 and needle in r.output
    r = CliRunner().invoke(main, ["example", name, "--path"])
    assert r.exit_code == 0 and Path(r.output.strip()).is_file()


# -- a missing extra ------------------------------------------------------------------------------------------------
def _without(modules: list[str], *args: str) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh interpreter where `modules` cannot be imported (as if not installed)."""
    code = (
        f"import sys\nfor m in {modules!r}: sys.modules[m] = None\n"
        "from budgetscope.cli import main\nmain(prog_name='budgetscope')"
    )
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def _one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    return r.stderr


def test_engine_serve_without_torch_names_the_engine_extra():
    err = _one_line(_without(["torch"], "engine", "serve", "--port", "0"))
    assert err == (
        "budgetscope: engine needs the 'engine' extra (torch is not installed): pip install 'budgetscope[engine]'\n"
    )


def test_live_demo_without_torch_names_the_engine_extra(tmp_path):
    err = _one_line(_without(["torch"], "demo", "--out", str(tmp_path)))
    assert err == (
        "budgetscope: the live demo needs the 'engine' extra (torch is not installed): "
        "pip install 'budgetscope[engine]' (or run `budgetscope demo --offline`)\n"
    )
    assert not any(tmp_path.iterdir())  # nothing was started


def test_dashboard_and_postmortem_without_the_dashboard_extra():
    archive = str(ROOT / "sample_traces" / "burst")
    err = _one_line(_without(["streamlit"], "dashboard", "-a", archive))
    assert "the dashboard needs the 'dashboard' extra (streamlit is not installed)" in err
    err = _one_line(_without(["plotly"], "postmortem", "-a", archive, "--from", "0", "--to", "1", "--out", "x.html"))
    assert "pip install 'budgetscope[dashboard]'" in err


def test_an_unrelated_missing_module_is_not_blamed_on_an_extra():
    from budgetscope.extras import extra_for

    assert extra_for(ModuleNotFoundError("no", name="torch.cuda")) == "engine"
    assert extra_for(ModuleNotFoundError("no", name="opentelemetry.sdk.trace")) == "instrument"
    assert extra_for(ModuleNotFoundError("no", name="torchvision")) is None
    assert extra_for(ModuleNotFoundError("no", name="somethingelse")) is None


def test_python_310_gets_tomli_and_nothing_imports_tomllib_unguarded():
    """`requires-python >=3.10`, and tomllib is 3.11+: 3.10 reads TOML through tomli (the wheel check runs
    `report`, `demo --offline` and the dashboard on 3.10 itself)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["requires-python"] == ">=3.10"
    assert "tomli>=2.0; python_version < '3.11'" in meta["dependencies"]
    for path in [*(ROOT / "budgetscope").rglob("*.py"), *(ROOT / "dashboards").rglob("*.py")]:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() == "import tomllib":
                assert lines[i - 1].strip() == "if sys.version_info >= (3, 11):", path
