"""A sandboxed query in a process of its own (`budgetscope query`, the dashboard's SQL page): whatever the query
does to that process — a crash inside DuckDB, memory DuckDB does not count, a statement that will not stop — ends
that process, and the caller (the command, the dashboard's server and every other user's page) carries on with a
one-line error.

The child (`python -m budgetscope.query_process`) reads its request from stdin, caps its own data segment
(RLIMIT_DATA: the query's memory limit plus HEADROOM_MB and THREAD_MB a core, for Python, DuckDB's own structures
and its threads' stacks) before DuckDB is loaded, runs `query.stream_query` and writes the result as frames on
what was its stdout (its fd 1 then points at stderr, so that nothing else can write into them). The parent stops
it KILL_GRACE_S after its timeout if DuckDB's own interrupt has not, and removes its spill directory whatever way
it ended.
"""

from __future__ import annotations

import os
import pickle
import queue
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from budgetscope.query import QueryResult, out_of_memory, stream_query
from budgetscope.query_check import QueryError
from budgetscope.query_limits import QueryLimits

HEADROOM_MB = 384
"""The child's memory beyond DuckDB's limit: the interpreter and DuckDB (~120 MiB), a chunk of rows as objects and
pickled, allocations DuckDB does not count."""
THREAD_MB = 10
"""Per core: DuckDB runs a thread a core, each with an 8 MiB stack."""
KILL_GRACE_S = 5.0
"""After its timeout, how long a query has to stop by DuckDB's interrupt before its process is killed."""
READER_THREAD = "budgetscope-query-reader"
_HEADER = struct.Struct("<cQ")  # a frame: its kind, the length of its pickled payload


def run_isolated(archive: str | os.PathLike, sql: str, limits: QueryLimits) -> QueryResult:
    """`query.run_query` in a child process: the same result or QueryError (one line), also when the child
    crashed, ran out of memory or was killed at its timeout."""
    work = Path(tempfile.mkdtemp(prefix="budgetscope-query-"))
    try:
        with open(work / "stderr", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "budgetscope.query_process"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                close_fds=True,
            )
        try:
            return _collect(proc, archive, sql, limits, work)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _collect(proc: subprocess.Popen, archive, sql: str, limits: QueryLimits, work: Path) -> QueryResult:
    request = {"archive": str(archive), "sql": sql, "limits": limits, "spill_dir": str(work / "spill")}
    try:
        proc.stdin.write(pickle.dumps(request))
        proc.stdin.close()
    except BrokenPipeError:  # it died at start: said below
        pass
    frames: queue.Queue = queue.Queue(maxsize=4)  # the reader waits on a slow consumer: rows held stay few
    done = threading.Event()  # this side stopped listening: the reader ends too, holding nothing
    threading.Thread(target=_read_frames, args=(proc.stdout, frames, done), name=READER_THREAD, daemon=True).start()
    try:
        return _listen(proc, frames, limits, work)
    finally:
        done.set()


def _listen(proc: subprocess.Popen, frames: queue.Queue, limits: QueryLimits, work: Path) -> QueryResult:
    res = QueryResult([], [], [])
    deadline = None
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            frame = frames.get(timeout=wait)
        except queue.Empty:
            proc.kill()
            raise QueryError(f"the query ran past its {limits.timeout_s:g} s limit and was stopped") from None
        if frame is None:
            break
        kind, value = frame
        if kind == b"S" and limits.timeout_s:  # its own clock started: DuckDB's interrupt comes first
            deadline = time.monotonic() + limits.timeout_s + KILL_GRACE_S
        elif kind == b"C":
            res.columns, res.types = value
        elif kind == b"R":
            res.rows.extend(value)
        elif kind == b"E":
            res.truncated, res.oversize = value
            return res
        elif kind == b"X":
            raise QueryError(value)
    proc.wait()
    raise QueryError(_died(proc.returncode, work / "stderr", limits))


def _read_frames(stream, frames: queue.Queue, done: threading.Event) -> None:
    def put(item) -> bool:
        while not done.is_set():
            try:
                frames.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        while head := stream.read(_HEADER.size):
            if len(head) < _HEADER.size:
                break
            kind, size = _HEADER.unpack(head)
            payload = stream.read(size)
            if len(payload) < size or not put((kind, pickle.loads(payload))):
                break
    except (OSError, ValueError, pickle.UnpicklingError):
        pass
    finally:
        put(None)


def _died(code: int, stderr: Path, limits: QueryLimits) -> str:
    """What a child that ended without its last frame says, in one line."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if name == "SIGKILL":  # the kernel's OOM killer, or a person
            return (
                "the query's process was killed (SIGKILL: the system ran short of memory, or someone stopped it); "
                "nothing else was affected"
            )
        return (
            f"DuckDB crashed on this query ({name}) and its process ended; nothing else was affected "
            "(simplify the statement)"
        )
    try:
        lines = [ln for ln in stderr.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    last = lines[-1][:300] if lines else "no message"
    if "MemoryError" in last:
        return out_of_memory(limits)
    return f"the query's process failed (exit {code}): {last}"


# -- the child ----------------------------------------------------------------------------------------------------
def _limit_memory(limits: QueryLimits) -> None:
    """Cap this process's data segment (heap and anonymous maps, thread stacks included) before DuckDB loads."""
    try:
        # imported on use: Unix only, and the child only
        import resource
    except ImportError:  # not on this platform: DuckDB's own limit still applies
        return
    cap = (limits.memory_mb + HEADROOM_MB + THREAD_MB * (os.cpu_count() or 1)) * 2**20
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    except (ValueError, OSError):
        pass


def _child() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes to stderr, never into the frames

    def send(kind: bytes, payload: bytes) -> None:
        out.write(_HEADER.pack(kind, len(payload)))
        out.write(payload)
        out.flush()

    req = pickle.load(sys.stdin.buffer)
    limits: QueryLimits = req["limits"]
    _limit_memory(limits)  # before DuckDB loads (in stream_query): its allocations count under the cap
    dump = pickle.dumps
    try:
        send(b"S", dump(None))
        for kind, value in stream_query(req["archive"], req["sql"], limits, req["spill_dir"]):
            if kind == "columns":
                send(b"C", dump(value))
            elif kind == "rows":
                send(b"R", value[1])  # already pickled, to measure it
            else:
                send(b"E", dump(value))
    except QueryError as e:
        send(b"X", dump(str(e)))
    except MemoryError:
        send(b"X", dump(out_of_memory(limits)))
    except Exception as e:  # noqa: BLE001 - an archive error or a bug: one line to the caller all the same
        send(b"X", dump(str(e).splitlines()[0] if str(e) else type(e).__name__))
    out.close()


if __name__ == "__main__":
    _child()
