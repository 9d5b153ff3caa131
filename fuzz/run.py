"""Run one fuzz target (fuzz/targets.py) under atheris's libFuzzer, or replay saved inputs through it.

    python fuzz/run.py TARGET [--seconds N | --runs N] [libFuzzer flags ...]
    python fuzz/run.py TARGET --replay FILE_OR_DIR ...
    python fuzz/run.py --list

Seeds are read from fuzz/corpus/TARGET/ (never written); what the run learns goes to build/fuzz/corpus/TARGET/,
and an input that breaks the target to build/fuzz/crashes/TARGET/ (copy it into fuzz/regressions/TARGET/ once
fixed: tests/test_fuzz_regressions.py replays it for good). A dictionary fuzz/dicts/TARGET.dict is used when
there is one. The last lines printed are libFuzzer's final statistics (runs, execs/s).

Every target runs in a child process, with a scratch folder that this parent removes once the child ends. The
C decoder targets' child has the ASan runtime preloaded (`LD_PRELOAD`, set here) and the sanitizer build of the
decoders (fuzz/build.py). docs/fuzzing.md says why.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import build
import targets

ASAN_OPTIONS = (
    "detect_leaks=0:handle_abort=1:handle_segv=1:allocator_may_return_null=1:malloc_context_size=20:symbolize=1"
)
UBSAN_OPTIONS = "print_stacktrace=1:halt_on_error=1:abort_on_error=1"
SCRATCH = targets.SCRATCH


def sanitized_env() -> dict[str, str]:
    """The environment a C decoder target runs in; raises build.BuildError when it cannot have one."""
    build.build()
    runtime = build.asan_runtime()
    if runtime is None:
        raise build.BuildError("the compiler has no ASan runtime (libasan.so)")
    env = dict(os.environ)
    # libstdc++ too: ASan wraps __cxa_throw and finds the real one only in a library loaded before it starts
    # (DuckDB's C++ exceptions, in the differential targets, otherwise abort the process)
    preload = [runtime, *filter(None, [build.cxx_runtime()])]
    env.update(
        LD_PRELOAD=":".join(preload),
        ASAN_OPTIONS=ASAN_OPTIONS,
        UBSAN_OPTIONS=UBSAN_OPTIONS,
        # every allocation through malloc, so ASan's redzones surround Python's buffers too
        PYTHONMALLOC="malloc",
        BUDGETSCOPE_FUZZ_SANITIZED="1",
    )
    spec = importlib.util.find_spec("atheris.core_with_libfuzzer")
    if spec is not None:
        env["BUDGETSCOPE_FUZZ_LIBFUZZER"] = spec.origin
    return env


def replay(check, paths: list[str]) -> int:
    files = [f for p in map(Path, paths) for f in (sorted(p.iterdir()) if p.is_dir() else [p]) if f.is_file()]
    failed = 0
    for f in files:
        try:
            check(f.read_bytes())
        except Exception:  # noqa: BLE001 - report every file, then fail
            failed += 1
            print(f"FAIL {f}\n{traceback.format_exc()}", flush=True)
    print(f"replayed {len(files)} inputs, {failed} failed", flush=True)
    return 1 if failed else 0


def fuzz(name: str, check, seconds: int | None, runs: int | None, extra: list[str], work: Path | None) -> None:
    import atheris

    work = work or ROOT / "build/fuzz/corpus" / name
    crashes = ROOT / "build/fuzz/crashes" / name
    work.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    args = [
        sys.argv[0],
        f"-artifact_prefix={crashes}/",
        "-print_final_stats=1",
        "-timeout=20",
        "-max_len=16384",
        "-rss_limit_mb=4096",
    ]
    if seconds is not None:
        args.append(f"-max_total_time={seconds}")
    if runs is not None:
        args.append(f"-runs={runs}")
    if (HERE / "dicts" / f"{name}.dict").exists():
        args.append(f"-dict={HERE / 'dicts' / f'{name}.dict'}")
    args += extra
    args += [str(work), str(HERE / "corpus" / name)]
    if name not in targets.SANITIZED:
        # Python coverage for the Python targets: the budgetscope modules are instrumented as they import
        with atheris.instrument_imports(include=["budgetscope"]):
            check(b"")  # imports what the target needs
    atheris.Setup(args, check)
    atheris.Fuzz()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", nargs="?", choices=sorted(targets.TARGETS))
    ap.add_argument("--seconds", type=int, help="stop after this long (libFuzzer -max_total_time)")
    ap.add_argument("--runs", type=int, help="stop after this many inputs")
    ap.add_argument("--replay", nargs="+", metavar="PATH", help="run these inputs (files or folders) once each")
    ap.add_argument("--corpus", type=Path, help="where the run keeps what it learns (default build/fuzz/corpus/TARGET)")
    ap.add_argument("--list", action="store_true", help="print the targets")
    opts, extra = ap.parse_known_args()
    if opts.list or not opts.target:
        print("\n".join(sorted(targets.TARGETS)))
        return 0
    if SCRATCH not in os.environ:
        # the target runs in a child: libFuzzer ends its process with exit(), past Python's atexit, so this
        # parent is what removes the child's scratch files (the query target's archive) when it ends
        env = dict(os.environ)
        if opts.target in targets.SANITIZED:
            try:
                env = sanitized_env()
            except build.BuildError as e:
                print(f"fuzz/run.py: no sanitizer build: {e}", file=sys.stderr)
                return 3
        with tempfile.TemporaryDirectory(prefix=f"budgetscope-fuzz-{opts.target}-") as scratch:
            env[SCRATCH] = scratch
            return subprocess.run([sys.executable, *sys.argv], env=env).returncode
    check = targets.TARGETS[opts.target]
    if opts.replay:
        return replay(check, opts.replay)
    fuzz(opts.target, check, opts.seconds, opts.runs, extra, opts.corpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
