"""Helpers shared by the benchmarks: machine description, peak memory, a free port, the package at a commit."""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository this benchmark runs from (its package is "this tree")."""


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()}, Python {platform.python_version()}"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """SIGTERM (a server drains and flushes its spans), then SIGKILL if it is still there after `timeout_s`."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()


_EXTENSION_SOURCES = ("budgetscope/ingest/_otlpjson.c", "budgetscope/ingest/_otlpproto.c")


@contextlib.contextmanager
def base_tree(commit: str, extension: bool = True):
    """The repository as it was at `commit`, extracted with `git archive` into a temporary folder (yielded: put it
    first on PYTHONPATH to import its package), its C extension built there, or copied from this tree when the C
    sources are the same at both (`extension` false: neither, for a caller that needs its SQL text alone)."""
    with tempfile.TemporaryDirectory(prefix="bs-base-") as d:
        tar = subprocess.run(["git", "archive", commit], capture_output=True, check=True, cwd=ROOT).stdout
        subprocess.run(["tar", "-x", "-C", d], input=tar, check=True)
        if not extension:
            yield Path(d)
            return
        same = subprocess.run(["git", "diff", "--quiet", commit, "--", *_EXTENSION_SOURCES], cwd=ROOT).returncode == 0
        built = sorted((ROOT / "budgetscope" / "ingest").glob("_otlpjson*.so"))
        if same and built:
            for so in built:
                shutil.copy2(so, Path(d) / "budgetscope" / "ingest" / so.name)
        else:
            subprocess.run(
                [sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=d, check=True, capture_output=True
            )
        yield Path(d)


def foreign_modules(root: Path) -> list[str]:
    """The `budgetscope` modules this process imported from outside `root`: an editable install resolves a module
    that an older tree lacks from the checkout, and a base run would then run part of this tree's code."""
    return sorted(
        name
        for name, m in list(sys.modules.items())
        if name.startswith("budgetscope") and getattr(m, "__file__", None) and not m.__file__.startswith(str(root))
    )
