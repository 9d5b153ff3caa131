"""Build the C decoders (`budgetscope/ingest/_otlpjson.c`, which includes `_otlpproto.c`) a second time, with
AddressSanitizer, UBSan and coverage for the fuzzer, into `build/fuzz/` — never over the installed extension
that the rest of the suite imports.

    python fuzz/build.py        # prints the path of the built module

The module keeps its name (`_otlpjson`, so its init function matches) and is loaded by path
(`load_sanitized`). It needs the ASan runtime loaded first in the process: run it under
`LD_PRELOAD=$(gcc -print-file-name=libasan.so)` (fuzz/run.py does that for itself).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "budgetscope/ingest/_otlpjson.c", ROOT / "budgetscope/ingest/_otlpproto.c"]
SHIM = ROOT / "fuzz/covshim.c"
OUT = ROOT / "build/fuzz"

# -fno-sanitize-recover: a UBSan finding aborts the run (libFuzzer saves the input) instead of printing and
# going on. -O1 keeps ASan's reports readable and is what libFuzzer's docs use.
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1"]
COVERAGE = ["-fsanitize-coverage=trace-pc,trace-cmp"]


class BuildError(RuntimeError):
    """No C compiler, or one without the sanitizers."""


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def asan_runtime() -> str | None:
    """The ASan runtime the build links against, to preload into a Python host; None when there is none."""
    cc = compiler()
    if not cc:
        return None
    out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return out if out and os.path.isabs(out) and os.path.exists(out) else None


def cxx_runtime() -> str | None:
    """libstdc++, preloaded with the ASan runtime (see fuzz/run.py)."""
    cc = compiler()
    out = (
        subprocess.run([cc, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True).stdout.strip()
        if cc
        else ""
    )
    return out if out and os.path.isabs(out) and os.path.exists(out) else None


def module_path() -> Path:
    return OUT / ("_otlpjson" + sysconfig.get_config_var("EXT_SUFFIX"))


def _fingerprint(cc: str) -> str:
    h = hashlib.sha256()
    for p in [*SOURCES, SHIM, Path(__file__)]:
        h.update(p.read_bytes())
    h.update(" ".join([cc, *SANITIZE, *COVERAGE]).encode())
    return h.hexdigest()[:16]


def unavailable() -> str | None:
    """Why the sanitizer build of the C decoders cannot be had here (None: it is built and ready)."""
    try:
        build()
    except BuildError as e:
        return f"no sanitizer build of the C decoders: {e}"
    if asan_runtime() is None:
        return "no sanitizer build of the C decoders: the compiler has no ASan runtime"
    return None


def build(force: bool = False) -> Path:
    """Compile (when a source changed since the last build) and return the module's path."""
    cc = compiler()
    if not cc:
        raise BuildError("no C compiler (gcc) on PATH")
    target, stamp = module_path(), OUT / "fingerprint"
    fp = _fingerprint(cc)
    if not force and target.exists() and stamp.exists() and stamp.read_text() == fp:
        return target
    OUT.mkdir(parents=True, exist_ok=True)
    include = sysconfig.get_paths()["include"]
    objs = [OUT / "_otlpjson.o", OUT / "covshim.o"]
    steps = [
        [cc, "-c", "-fPIC", *SANITIZE, *COVERAGE, f"-I{include}", str(SOURCES[0]), "-o", str(objs[0])],
        # the shim itself is not instrumented: its hooks would call themselves
        [cc, "-c", "-fPIC", "-O2", "-fvisibility=hidden", str(SHIM), "-o", str(objs[1])],
        [cc, "-shared", *SANITIZE, *map(str, objs), "-ldl", "-o", str(target)],
    ]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise BuildError(f"{' '.join(cmd[:3])} ...: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    stamp.write_text(fp)
    return target


def load_sanitized():
    """Import the sanitizer build (the process must have the ASan runtime preloaded)."""
    spec = importlib.util.spec_from_file_location("_otlpjson", module_path())
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


if __name__ == "__main__":
    try:
        print(build(force="--force" in sys.argv))
    except BuildError as e:
        sys.exit(f"fuzz/build.py: {e}")
