"""Helpers shared by the benchmarks: machine description, peak memory, a free port, the package at a commit."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
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


class ThreadCPU:
    """CPU seconds of this process's threads within a `with` block, by thread name (read from /proc: Linux). Threads
    Python did not start (DuckDB's workers) are "unnamed"; numbered pool threads (`…_3`) count under one name.
    Sampled every `every_s`: a thread that ends between two samples loses what it ran since the last."""

    def __init__(self, every_s: float = 0.05):
        self._every_s, self._stop = every_s, threading.Event()
        self._last: dict[str, tuple[str, float]] = {}
        self._sampler = threading.Thread(target=self._run, name="bench-thread-cpu", daemon=True)

    def _sample(self) -> None:
        names = {str(t.native_id): t.name for t in threading.enumerate()}
        tick = os.sysconf("SC_CLK_TCK")
        for tid in os.listdir("/proc/self/task"):
            try:
                fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended since the listing
                continue
            name = names.get(tid) or self._last.get(tid, ("unnamed", 0.0))[0]
            self._last[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self._sample()

    def __enter__(self) -> ThreadCPU:
        self._sample()
        self._base = dict(self._last)
        self._sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._sampler.join()
        self._sample()

    def by_name(self) -> dict[str, float]:
        """CPU seconds by thread name, largest first (the sampler's own left out)."""
        out: dict[str, float] = {}
        for tid, (name, cpu) in self._last.items():
            name = re.sub(r"_\d+$", "", re.sub(r" \(.*\)$", "", name))
            if name != "bench-thread-cpu":
                out[name] = out.get(name, 0.0) + cpu - self._base.get(tid, (name, 0.0))[1]
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))
