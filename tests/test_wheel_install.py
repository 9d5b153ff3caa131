"""budgetscope installed the way a user installs it: the wheel built from this tree, installed non-editable into a
fresh virtual environment (core dependencies and the `dashboard` extra only: no torch, no OpenTelemetry SDK),
every command run from another directory. Pip reaches only the package registry (its cache, after the first run).

The check runs once on the oldest Python that pyproject.toml declares (`requires-python`) and once on the newest
(its last `Programming Language :: Python :: 3.x` classifier), each where it is installed (on PATH as `python3.x`,
or under pyenv); a missing one is one SKIPPED line (`test_the_declared_python_is_installed`), and with neither
installed the check runs on the interpreter running the tests. The wheel is built by each Python itself: the C
decoder makes it a wheel for that interpreter. Both take 2.5 minutes beside the rest of the suite on 2 cores with
pip's cache warm (5.5 cold); alone, 91 s (112 s before pip stopped byte-compiling what it installs, 2026-11-30).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def declared_pythons() -> tuple[str, str]:
    """The oldest and the newest Python version ("3.10", "3.13") that pyproject.toml declares."""
    text = (ROOT / "pyproject.toml").read_text()
    oldest = re.search(r'^requires-python = ">=(3\.\d+)"', text, re.M).group(1)
    newest = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text)[-1]
    return oldest, newest


def find_python(version: str) -> str | None:
    """An installed interpreter of `version` ("3.10") that runs: `python3.10` on PATH (a pyenv shim on PATH may
    name a version that is not activated, so each candidate is asked), else the newest pyenv build of it."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    patch = lambda p: int(p.parts[-3].rsplit(".", 1)[1]) if p.parts[-3].rsplit(".", 1)[1].isdigit() else -1  # noqa: E731 - a one-line helper where it is used
    builds = sorted(root.glob(f"{version}.*/bin/python"), key=patch, reverse=True)
    for cand in [shutil.which(f"python{version}"), *map(str, builds)]:
        if (
            cand
            and subprocess.run(
                [cand, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True
            ).stdout.strip()
            == version
        ):
            return cand
    return None


def _copy_sources(dest: Path) -> None:
    """The tree's source files (tracked, or new and not ignored), without tests, build outputs or environments."""
    names = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in names:
        src = ROOT / name
        if name and not name.startswith("tests/") and src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


INSTALLED = {version: find_python(version) for version in declared_pythons()}


@pytest.mark.parametrize("version", list(INSTALLED), ids=lambda v: f"py{v}")
def test_the_declared_python_is_installed(version):
    """The one line that says a declared Python is missing here, and so that the wheel check did not run on it."""
    if INSTALLED[version] is None:
        pytest.skip(
            f"Python {version} is not installed (no python{version} on PATH or under pyenv): "
            "the wheel check did not run on it"
        )


# where neither is installed, the check runs on the interpreter running the tests rather than nowhere
CHECKED = {v: found for v, found in INSTALLED.items() if found} or {"%d.%d" % sys.version_info[:2]: sys.executable}


@pytest.fixture(scope="module", params=list(CHECKED), ids=lambda v: f"py{v}")
def python(request) -> str:
    """The interpreter of one declared Python version that is installed."""
    return CHECKED[request.param]


@pytest.fixture(scope="module")
def venv(python, tmp_path_factory) -> Path:
    """A fresh virtual environment of `python` with the wheel installed (not editable) and its `dashboard` extra."""
    root = tmp_path_factory.mktemp("venv")
    env = root / "v"
    subprocess.run([python, "-m", "venv", str(env)], check=True, timeout=120)
    return env


@pytest.fixture(scope="module")
def wheel(venv, tmp_path_factory) -> Path:
    """The wheel, built by the venv's own Python from a copy of the tree (a build in place would race other runs
    over ./build), then installed in it."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    _copy_sources(src)
    py = str(venv / "bin" / "python")
    subprocess.run(
        [py, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    built = next((root / "dist").glob("budgetscope-*.whl"))
    # --no-compile: pip's byte-compiling of every module installed (streamlit, pandas, pyarrow...) took half of
    # each install (32 s of 64 for the dependencies alone); the commands below compile what they import
    r = subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-compile", f"{built}[dashboard]"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return built


@pytest.fixture
def elsewhere(tmp_path) -> Path:
    """A working directory far from the source tree."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    return d


def _env(venv: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(venv: Path, cwd: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "budgetscope"), *args],
        cwd=cwd,
        env=_env(venv),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_wheel_ships_the_app_the_collector_configs_the_budgets_and_the_license(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "budgetscope/dashboards/app.py",
        "budgetscope/dashboards/state.py",
        "budgetscope/dashboards/pages/budgets.py",
        "budgetscope/dashboards/pages/what_if.py",
        "budgetscope/otelcol/otelcol.yaml",
        "budgetscope/otelcol/otelcol-sharded.yaml",
        "budgetscope/otelcol/otelcol-slis.yaml",
        "budgetscope/data/demo_budgets.toml",
    ):
        assert shipped in names, shipped
    assert not any(n.startswith(("tests/", "dashboards/", "instrumentation/")) for n in names)
    info = next(n.rsplit("/", 2)[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert f"{info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Project-URL: Homepage, https://" in metadata and "Project-URL: Issues, https://" in metadata
    assert "Apache License" in zipfile.ZipFile(wheel).read(f"{info}/licenses/LICENSE").decode()[:200]


def test_installed_wheel_runs_every_command_from_another_directory(wheel, venv, elsewhere):
    py = str(venv / "bin" / "python")
    # not the source tree: the package is the installed copy
    where = subprocess.run(
        [py, "-c", "import budgetscope; print(budgetscope.__file__)"],
        cwd=elsewhere,
        env=_env(venv),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(venv) in where and str(ROOT) not in where

    r = _run(venv, elsewhere, "--help")
    assert r.returncode == 0 and "report" in r.stdout and "dashboard" in r.stdout, r.stderr

    r = _run(venv, elsewhere, "demo", "--offline", "--out", "demo-out")
    assert r.returncode == 0, r.stderr
    assert "dominant TTFT stage is queue" in r.stdout

    shutil.copytree(ROOT / "sample_traces" / "burst", elsewhere / "burst", dirs_exist_ok=True)
    r = _run(venv, elsewhere, "example", "budgets")
    assert r.returncode == 0 and "[tiers." in r.stdout
    (elsewhere / "budgets.toml").write_text(r.stdout)
    r = _run(venv, elsewhere, "report", "-a", "burst", "-b", "budgets.toml", "--format", "json")
    assert r.returncode == 1, r.stderr  # the burst scenario breaks its budget
    assert '"tiers"' in r.stdout

    r = _run(venv, elsewhere, "example", "otelcol")
    assert r.returncode == 0 and "otlp_grpc/budgetscope" in r.stdout


def test_installed_wheel_imports_the_instrumentation_without_torch(wheel, venv, elsewhere):
    code = (
        "import importlib.util, sys; assert importlib.util.find_spec('torch') is None; "
        "import budgetscope.instrument; assert 'torch' not in sys.modules; print('ok')"
    )
    r = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], cwd=elsewhere, env=_env(venv), capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_installed_wheel_names_the_missing_extra_in_one_line(wheel, venv, elsewhere):
    for args, extra in (
        (["engine", "serve", "--port", "0"], "engine"),
        (["demo", "--out", "d"], "engine"),
        (["load", "http://127.0.0.1:9", "--requests", "1", "--tokenizer", "t.json"], "loadgen"),
    ):
        r = _run(venv, elsewhere, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"pip install 'budgetscope[{extra}]'" in r.stderr, r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_installed_wheel_serves_the_dashboard(wheel, venv, elsewhere):
    shutil.copytree(ROOT / "sample_traces" / "burst", elsewhere / "burst", dirs_exist_ok=True)
    port = _free_port()
    proc = subprocess.Popen(
        [str(venv / "bin" / "budgetscope"), "dashboard", "-a", "burst", "--port", str(port)],
        cwd=elsewhere,
        env=_env(venv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, body = time.monotonic() + 90, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                    body = resp.read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert body == "ok", proc.stdout.read() if proc.poll() is not None else "no answer from /_stcore/health"
        # the app itself loads from the installed package (a missing page would fail here, not at the health check)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
            assert resp.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # SIGTERM reached Streamlit itself (it replaced the budgetscope process): nothing is left holding the port
    with socket.socket() as s, pytest.raises(OSError):
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
