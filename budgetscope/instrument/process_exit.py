"""Export what a process still holds when it stops: at interpreter exit, and on SIGTERM.

SIGTERM is how Kubernetes, systemd and `docker stop` end a process. Python's default for it kills the process
at once: no `finally`, no `atexit`, so the spans of the last requests, still queued for export, were lost.
Every exporting object (`Instrumentation`, `ClientTracer`, `GpuSampler`) registers here; the first one made on
the main thread installs one SIGTERM handler for all of them. On SIGTERM it:

- with no handler of the host before it (SIG_DFL): shuts every exporter down (exports what is queued),
  then raises `Terminated` (a `SystemExit` with code 0) in the main thread, so the host's `finally` blocks
  and `atexit` still run and the process exits 0;
- with a handler the host installed before it: flushes every exporter (what finished so far goes out; they
  keep exporting what finishes later) and then calls that handler, which decides how and with which code
  the process ends;
- where the host ignores SIGTERM (SIG_IGN), or installed its handler from C: installs nothing.

A server that drains on SIGTERM (uvicorn: it takes the signal during `run`, finishes the open requests, puts
the previous handler back and raises the signal again) reaches the handler after its last request finished.

Bounded: the whole flush takes at most `BUDGETSCOPE_FLUSH_TIMEOUT_MS` (default 5000 ms). An exporter that
cannot finish (collector gone) is given up at the deadline, and one line on stderr (logger
`budgetscope.instrument.process_exit`, warning) says how many spans were dropped.

Python runs signal handlers on the main thread only, and lets only the main thread install them: an exporter
first made on another thread installs nothing (it is still flushed at exit, and on SIGTERM once any exporter
made on the main thread, or `install_sigterm_handler()` called there, has installed the handler).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import time
import weakref
from typing import Any

TIMEOUT_ENV = "BUDGETSCOPE_FLUSH_TIMEOUT_MS"
DEFAULT_TIMEOUT_MS = 5000

_log = logging.getLogger(__name__)
_live: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()
_state = {"atexit": False, "previous": None, "terminating": False}


class Terminated(SystemExit):
    """Raised in the main thread once SIGTERM's flush is done (code 0); a command may catch it to say so."""

    def __init__(self) -> None:
        super().__init__(0)


def register(owner: Any) -> None:
    """Flush `owner` at exit and on SIGTERM. `owner.shutdown(timeout_s)` exports what it holds and returns what it
    could not ("" when nothing); `owner.flush(timeout_s)`, when it has one, exports without stopping."""
    with _lock:
        _live.add(owner)
        if not _state["atexit"]:
            atexit.register(_at_exit)
            _state["atexit"] = True
    install_sigterm_handler()


def install_sigterm_handler() -> bool:
    """Install the SIGTERM handler (the main thread only; elsewhere a no-op). True when it is in place.

    Call it from the main thread when your exporters are made on another one. A handler already installed is
    kept and called after the flush; SIG_IGN and handlers installed from C are left alone (False)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm:
        return True
    if current is None or current == signal.SIG_IGN:
        return False
    _state["previous"] = current
    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def timeout_s() -> float:
    """The bound of one flush on SIGTERM or at exit, in seconds (`BUDGETSCOPE_FLUSH_TIMEOUT_MS`, default 5 s)."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        ms = float(raw) if raw else DEFAULT_TIMEOUT_MS
    except ValueError:
        _log.warning("budgetscope: %s=%r is not a number of ms; using %d", TIMEOUT_ENV, raw, DEFAULT_TIMEOUT_MS)
        ms = DEFAULT_TIMEOUT_MS
    return max(ms, 0.0) / 1000


def _on_sigterm(signum: int, frame: Any) -> None:
    previous = _state["previous"]
    host_handler = callable(previous)
    if not _state["terminating"]:
        _state["terminating"] = not host_handler
        _flush_all(stop=not host_handler, why="SIGTERM")
    elif not host_handler:  # a second SIGTERM while the first one flushes: stop now, as SIG_DFL would
        os._exit(128 + signum)
    if host_handler:
        previous(signum, frame)
        return
    raise Terminated()


def _at_exit() -> None:
    _flush_all(stop=True, why="exit")


def _flush_all(*, stop: bool, why: str) -> None:
    """Shut down (`stop`) or flush every live exporter, all within one deadline; one warning line per shortfall."""
    bound = timeout_s()
    deadline = time.monotonic() + bound
    for owner in list(_live):
        left = max(0.0, deadline - time.monotonic())
        try:
            if stop:
                lost = owner.shutdown(left)
            elif hasattr(owner, "flush"):
                lost = "" if owner.flush(left) else "some spans are still being exported"
            else:
                lost = ""
        except Exception:  # noqa: BLE001 - one broken exporter must not keep the others from flushing
            _log.exception("budgetscope: flushing %s on %s failed", type(owner).__name__, why)
            continue
        if lost:
            _log.warning(
                "budgetscope: on %s, %s gave up after %.3g s (%s): %s",
                why,
                type(owner).__name__,
                bound,
                TIMEOUT_ENV,
                lost,
            )
