"""One GPU session's measurements for the reference engine, in one call, each phase bounded by its own timeout.

    python3 benchmarks/gpu/session.py --out OUT [--phases env,attn,mixed,served,...] [--baseline DIR] \
        [--seconds 20] [--record-seconds 20] [--budget-s 560] [--smoke]

Phases, in the order they run (a failing phase prints its error and the next one runs; a phase starts only if
--budget-s leaves it its usual time; if the Triton attention fails in `mixed`, the later phases use sdpa):
- env: the GPU, driver, torch, triton;
- attn: benchmarks/gpu/attention_bench.py (one layer's attention: gather + SDPA, the Triton kernel, FlexAttention);
- mixed: benchmarks/gpu/step_mix.py mixed, this engine (Triton attention, profiled);
- served: `engine serve --config 1b --max-seqs 64` with the GPU sampler; `load` at 12 req/s (256/256 tokens,
  token ids), then a closed loop of 64 (saturation); the spans and samples come back as OUT/rec-served.tar.gz;
- async: the same engine at saturation (closed loop of 64) with `--async-scheduling`, then
  `--no-async-scheduling`: served output tok/s and kernels-busy % (NVML utilization over the timed window) of each;
- baseline: with --baseline, step_mix.py mixed against the engine in DIR (an older checkout's `budgetscope/`);
- decode: benchmarks/bench_gpu.py at batch 1 (copy bandwidth, tokens/s, bytes a step over step time), and the
  baseline's batch 1;
- decodeprof: benchmarks/gpu/decode_profile.py (batch-1 decode under torch.profiler, graph replay and eager:
  kernels grouped per token — GEMMs, attention, norm, rope, K/V write, activation, sampler, copies, other — beside
  the floor, the weights at copy speed), and the baseline's with --baseline;
- inproc: step_mix.py saturate, 64 sequences of 256 + 256 tokens (the in-process figure for the served one);
- record: three recordings for sample_traces/ (bandwidth-bound, KV preemptions, host-bound), each
  OUT/rec-<name>.tar.gz with the commands in its README;
- tests: the GPU step's tests (the kernels against their references, graphs against eager) on the GPU;
- sweep: benchmarks/gpu/attention_sweep.py (the attention kernel's launch configurations on a long-context decode
  step); its best configuration is exported (BUDGETSCOPE_ATTN_*) to the phases after it;
- attncmp: step_mix.py mixed and saturate, the engine with the attention's default launch configuration and then
  with the sweep's best (after `sweep`): which one the engine is faster with, decode-only/mixed step ms and tok/s;
- gemv: benchmarks/gpu/gemv_bw.py (bf16 F.linear at batch 1 on the `1b` weight shapes, against a copy);
- splitkv: batch-1 decode with the split-KV attention off, then on (`--kv-splits`, BUDGETSCOPE_ATTN_KV_SPLITS):
  decode_profile.py and bench_gpu.py at batch 1 in a process each (off by default until this measures it).

Figures go to OUT/figures.json (one entry per phase) and the console; the log of every command to OUT/log.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
FIGURES: dict = {}
WORK = Path("/tmp/budgetscope-gpu-session")  # raw files; only logs, figures and tarballs go to OUT
SMOKE = False  # --smoke: the same phases on CPU with the `tiny` model, for checking this script anywhere
DEADLINE = float("inf")  # time.monotonic() by which the session must end (--budget-s)
ATTENTION = ["triton"]  # the new engine's backend; "sdpa" once the Triton path failed in `mixed`
COST_S = {
    "env": 10,
    "tests": 90,
    "attn": 40,
    "mixed": 70,
    "baseline": 60,
    "decode": 45,
    "decodeprof": 60,
    "inproc": 45,
    "served": 100,
    "async": 120,
    "record": 60,
    "sweep": 70,
    "gemv": 20,
    "attncmp": 90,
    "splitkv": 200,
}  # a phase starts only if this much time is left (record: per recording)


def log(out: Path, text: str) -> None:
    print(text, flush=True)
    with open(out / "log.txt", "a") as f:
        f.write(text + "\n")


def left_s() -> float:
    return DEADLINE - time.monotonic()


def sh(out: Path, cmd: list[str], timeout: float, env: dict | None = None) -> str:
    """Run cmd; its output goes to the log (and the last lines to the console); returns the output."""
    timeout = max(5.0, min(timeout, left_s() - 5))
    log(out, "$ " + shlex.join(cmd))
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            cmd, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout
        )
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = _text(e.stdout) + _text(e.stderr), "timeout"
    with open(out / "log.txt", "a") as f:
        f.write(text + f"\n[rc {rc} in {time.perf_counter() - t0:.1f} s]\n")
    tail = [line for line in text.splitlines() if line.strip()][-6:]
    print(
        "\n".join("  " + line[:300] for line in tail) + f"\n  [rc {rc} in {time.perf_counter() - t0:.1f} s]", flush=True
    )
    return text


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def results(text: str) -> list[dict]:
    return [json.loads(line[len("RESULT ") :]) for line in text.splitlines() if line.startswith("RESULT ")]


def _smoke_load(args: list[str]) -> list[str]:
    """A load the `tiny` model on CPU can take: 2 requests/s, or 4 in flight."""
    out = list(args)
    for flag, value in (("--rate", "2"), ("--concurrency", "4")):
        if flag in out:
            out[out.index(flag) + 1] = value
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return True
        except Exception:
            time.sleep(0.5)
    return False


def serve_and_load(
    out: Path,
    name: str,
    serve_args: list[str],
    loads: list[list[str]],
    what: str,
    env: dict | None = None,
    ready_s: float = 180,
) -> None:
    """engine serve + gpu sample + each load in turn; the three files and a README into OUT/rec-<name>.tar.gz."""
    rec = WORK / f"rec-{name}"
    rec.mkdir(exist_ok=True)
    port = free_port()
    cli = [PY, "-m", "budgetscope"]
    if SMOKE:
        serve_args = [("tiny" if a in ("1b", "small") else a) for a in serve_args]
        loads = [_smoke_load(la) for la in loads]
    serve = (
        cli
        + [
            "engine",
            "serve",
            "--device",
            "cpu" if SMOKE else "cuda",
            "--port",
            str(port),
            "--exporter",
            f"jsonl:{rec / 'engine.jsonl'}",
        ]
        + serve_args
    )
    log(out, "$ " + shlex.join(serve))
    elog = open(rec / "engine.log", "w")
    engine = subprocess.Popen(
        serve,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=elog,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    sampler = None
    try:
        t0 = time.perf_counter()
        if not wait_ready(port, engine, ready_s):
            log(
                out,
                f"[{name}] engine not ready (rc {engine.poll()}); its log: " + (rec / "engine.log").read_text()[-2000:],
            )
            return
        log(out, f"[{name}] engine ready in {time.perf_counter() - t0:.1f} s")
        sampler = subprocess.Popen(
            cli + ["gpu", "sample", "--every", "100ms", "--out", f"jsonl:{rec / 'gpu.jsonl'}"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=open(rec / "gpu.log", "w"),
            start_new_session=True,
        )
        summaries, windows = [], []  # windows: each load's [start, end] in Unix ns
        for i, args in enumerate(loads):
            load = (
                cli
                + [
                    "load",
                    f"http://127.0.0.1:{port}",
                    "--prompt-format",
                    "token-ids",
                    "--spans",
                    f"jsonl:{rec / 'client.jsonl'}",
                    "--out",
                    str(rec / f"load{i}.json"),
                ]
                + args
            )
            t0_ns = time.time_ns()
            text = sh(out, load, timeout=240)
            windows.append([t0_ns, time.time_ns()])
            summaries.append(text.strip().splitlines()[-12:] if text.strip() else [])
        FIGURES.setdefault("served", {})[name] = {"loads": loads, "summaries": summaries, "windows_ns": windows}
    finally:
        for p in (sampler, engine):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (sampler, engine):
            if p is not None:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
        elog.close()
        (rec / "README.md").write_text(
            f"# {name}\n\n{what}\n\n    "
            + shlex.join(["budgetscope"] + serve[3:]).replace(str(rec / "engine.jsonl"), "engine.jsonl")
            + "\n    budgetscope gpu sample "
            "--every 100ms --out jsonl:gpu.jsonl\n"
            + "".join(
                "    budgetscope load URL --prompt-format token-ids --spans jsonl:client.jsonl " + shlex.join(a) + "\n"
                for a in loads
            )
            + f"\nengine exit code: {engine.returncode}\n"
        )
        with tarfile.open(out / f"rec-{name}.tar.gz", "w:gz") as tar:
            tar.add(rec, arcname=name)
        log(
            out,
            f"[{name}] engine exit {engine.returncode}; {sum(1 for _ in open(rec / 'engine.jsonl')) if (rec / 'engine.jsonl').exists() else 0} engine span lines",
        )


def baseline_env(args) -> dict:
    """The older engine first on the path (the wheels this session installed still after it)."""
    return {"PYTHONPATH": os.pathsep.join(p for p in (args.baseline, os.environ.get("PYTHONPATH", "")) if p)}


def phase_env(out, args):
    sh(out, ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem", "--format=csv"], 30)
    text = sh(
        out,
        [
            PY,
            "-c",
            "import torch, triton, platform; print('RESULT', __import__('json').dumps({'torch': "
            "torch.__version__, 'triton': triton.__version__, 'python': platform.python_version(), "
            "'gpu': torch.cuda.get_device_name(), 'cpus': __import__('os').cpu_count()}))",
        ],
        60,
    )
    FIGURES["env"] = results(text)


def phase_attn(out, args):
    script = ROOT / "benchmarks/gpu/attention_bench.py"
    FIGURES["attn"] = sh(out, [PY, str(script), "--iters", "50"], 90).strip().splitlines()[-12:]


def phase_sweep(out, args):
    """The attention kernel's launch configurations on a long-context decode step; the best one is exported
    (BUDGETSCOPE_ATTN_*) to every later phase's engine."""
    text = sh(out, [PY, str(ROOT / "benchmarks/gpu/attention_sweep.py")], 90)
    FIGURES["sweep"] = text.strip().splitlines()[-16:]
    best = [line for line in text.splitlines() if line.startswith("BEST ")]
    if best:
        fields = dict(kv.split("=", 1) for kv in best[-1].split()[1:])
        for key, env in (
            ("tile_n", "BUDGETSCOPE_ATTN_TILE_N"),
            ("num_warps", "BUDGETSCOPE_ATTN_WARPS"),
            ("num_stages", "BUDGETSCOPE_ATTN_STAGES"),
        ):
            if key in fields:
                os.environ[env] = fields[key]
        log(
            out,
            "[sweep] later phases run with "
            + " ".join(f"{k}={v}" for k, v in os.environ.items() if k.startswith("BUDGETSCOPE_ATTN_")),
        )


ATTN_VARS = ("BUDGETSCOPE_ATTN_TILE_N", "BUDGETSCOPE_ATTN_WARPS", "BUDGETSCOPE_ATTN_STAGES")


def phase_attncmp(out, args):
    """The engine with the attention's built-in launch configuration, then with the one `sweep` exported: the
    mixed-step figures (decode-only and mixed step ms) and saturated output tok/s of each, in one process each."""
    swept = {k: os.environ[k] for k in ATTN_VARS if os.environ.get(k)}
    if not swept:
        log(out, "[attncmp] no swept configuration (run `sweep` first): nothing to compare")
        return
    step_mix = str(ROOT / "benchmarks/gpu/step_mix.py")
    seconds = "3" if SMOKE else "8"
    config = ["--config", "tiny"] if SMOKE else []
    for name, env in (("default", {k: "" for k in ATTN_VARS}), ("swept", swept)):
        got = results(sh(out, [PY, step_mix, "mixed", "--attention", ATTENTION[0], "--steps", "200"] + config, 90, env))
        got += results(
            sh(
                out,
                [PY, step_mix, "saturate", "--attention", ATTENTION[0], "--seconds", seconds, "--warmup", "3"] + config,
                60,
                env,
            )
        )
        FIGURES.setdefault("attncmp", {})[name] = {"env": env, "results": got}


def phase_gemv(out, args):
    FIGURES["gemv"] = sh(out, [PY, str(ROOT / "benchmarks/gpu/gemv_bw.py")], 60).strip().splitlines()[-7:]


def phase_tests(out, args):
    text = sh(
        out,
        [
            PY,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "tests/test_paged_attention.py",
            "tests/test_fused_norm.py",
            "tests/test_fused_decode.py",
            "tests/test_engine_triton.py",
            "tests/test_engine_cuda_graphs.py",
            "tests/test_engine_step.py",
            "tests/test_engine_async.py",
        ],
        150,
    )
    FIGURES["tests"] = text.strip().splitlines()[-3:]


def phase_mixed(out, args):
    step_mix = str(ROOT / "benchmarks/gpu/step_mix.py")
    got = results(
        sh(out, [PY, step_mix, "mixed", "--attention", "triton", "--steps", "300", "--profile-steps", "100"], 150)
    )
    if not got:  # the Triton path failed here: measure the rest of the engine (process split, graphs) on sdpa
        ATTENTION[0] = "sdpa"
        log(out, "[mixed] the Triton path failed: later phases use --attention sdpa")
        got = results(sh(out, [PY, step_mix, "mixed", "--attention", "sdpa", "--steps", "300"], 120))
    FIGURES["mixed"] = got


def phase_baseline(out, args):
    if args.baseline:
        FIGURES["mixed_baseline"] = results(
            sh(
                out,
                [PY, str(ROOT / "benchmarks/gpu/step_mix.py"), "mixed", "--steps", "300"],
                120,
                env=baseline_env(args),
            )
        )


def phase_decode(out, args):
    bench = str(ROOT / "benchmarks/bench_gpu.py")
    sh(
        out,
        [
            PY,
            bench,
            "--out",
            str(WORK / "bench"),
            "--batches",
            "1",
            "--modes",
            "graphs",
            "--no-tape",
            "--no-sampler-cost",
            "--seconds",
            "3",
            "--attention",
            ATTENTION[0],
        ],
        120,
    )
    path = WORK / "bench" / "gpu_figures.json"
    if path.exists():
        f = json.loads(path.read_text())
        FIGURES["decode"] = {
            "copy_bytes_per_s": f.get("copy_bytes_per_s"),
            "decode": f.get("decode"),
            "step_phases_ms": f.get("step_phases_ms"),
        }
    if args.baseline and left_s() > COST_S["decode"] + 60:
        base_bench = str(Path(args.baseline) / "benchmarks/bench_gpu.py")
        sh(
            out,
            [
                PY,
                base_bench,
                "--out",
                str(WORK / "base"),
                "--batches",
                "1",
                "--modes",
                "graphs",
                "--no-tape",
                "--no-sampler-cost",
                "--seconds",
                "3",
            ],
            100,
            env=baseline_env(args),
        )
        path = WORK / "base" / "gpu_figures.json"
        if path.exists():
            FIGURES["decode_baseline"] = json.loads(path.read_text()).get("decode")


def phase_decodeprof(out, args):
    """Per-kernel time and count a token of batch-1 decode, graph replay and eager (one RESULT per pass)."""
    cmd = [PY, str(ROOT / "benchmarks/gpu/decode_profile.py"), "--attention", ATTENTION[0]]
    if SMOKE:
        cmd += ["--config", "tiny", "--device", "cpu", "--steps", "5", "--eager-steps", "5"]
    FIGURES["decodeprof"] = results(sh(out, cmd, 150))
    if args.baseline and left_s() > COST_S["decodeprof"] + 60:  # the same profile of the older engine
        FIGURES["decodeprof_baseline"] = results(sh(out, cmd, 150, env=baseline_env(args)))


def phase_inproc(out, args):
    FIGURES["inproc"] = results(
        sh(
            out,
            [
                PY,
                str(ROOT / "benchmarks/gpu/step_mix.py"),
                "saturate",
                "--attention",
                ATTENTION[0],
                "--max-seqs",
                "64",
                "--seconds",
                "15",
            ],
            100,
        )
    )


def phase_served(out, args):
    s = str(args.seconds)
    serve_and_load(
        out,
        "served",
        ["--config", "1b", "--max-seqs", "64", "--attention", ATTENTION[0]],
        [
            ["--rate", "12", "--duration", s, "--prompt-tokens", "256", "--output-tokens", "256"],
            [
                "--concurrency",
                "64",
                "--duration",
                s,
                "--warmup",
                "5s",
                "--prompt-tokens",
                "256",
                "--output-tokens",
                "256",
            ],
        ],
        "The `1b` engine on one GPU: 12 requests/s of 256 prompt / 256 output tokens, then a closed loop "
        "of 64 (saturation).",
    )


def saturation_load(seconds: float, warmup_s: int) -> list[str]:
    """`load` arguments of a closed loop of 64 streams, 256 prompt / 256 output tokens (--smoke: 64 / 32, which the
    `tiny` model on a CPU finishes within a short window)."""
    prompt, output = ("64", "32") if SMOKE else ("256", "256")
    lengths = ["--prompt-tokens", prompt, "--output-tokens", output]
    return ["--concurrency", "64", "--warmup", f"{warmup_s}s", "--duration", str(seconds)] + lengths


def kernels_busy(gpu_jsonl: Path, start_ns: int, end_ns: int) -> dict:
    """NVML utilization (share of time a kernel ran) over [start_ns, end_ns] from `gpu sample`'s OTLP/JSON lines:
    mean and median in %, and the number of samples; unknown (None, with why) without samples."""
    values = []
    if gpu_jsonl.exists():
        for line in gpu_jsonl.read_text().splitlines():
            for rm in json.loads(line).get("resourceMetrics", []):
                for sm in rm.get("scopeMetrics", []):
                    for m in sm.get("metrics", []):
                        if m.get("name") != "hw.gpu.utilization":
                            continue
                        values += [
                            float(p["asDouble"])
                            for p in m["gauge"]["dataPoints"]
                            if start_ns <= int(p["timeUnixNano"]) <= end_ns
                        ]
    if not values:
        return {"kernels_busy_pct": None, "why": "no GPU utilization samples in the window"}
    values.sort()
    return {
        "kernels_busy_pct": round(100 * sum(values) / len(values), 1),
        "kernels_busy_median_pct": round(100 * values[len(values) // 2], 1),
        "samples": len(values),
    }


def phase_async(out, args):
    """Async scheduling on, then off: the same engine at saturation, served output tok/s and kernels-busy % each."""
    warmup_s = 1 if SMOKE else 5
    for flag, name in (("--async-scheduling", "async-on"), ("--no-async-scheduling", "async-off")):
        serve_and_load(
            out,
            name,
            ["--config", "1b", "--max-seqs", "64", "--attention", ATTENTION[0], flag],
            [saturation_load(args.seconds, warmup_s)],
            f"The `1b` engine behind a closed loop of 64 streams (256 prompt / 256 output tokens), `{flag}`.",
        )
        rec, served = WORK / f"rec-{name}", FIGURES.get("served", {}).get(name)
        if served is None or not (rec / "load0.json").exists():
            FIGURES.setdefault("async", {})[name] = {"error": "the engine or the load did not run (see log.txt)"}
            continue
        summary = json.loads((rec / "load0.json").read_text())["summary"]
        start_ns, end_ns = served["windows_ns"][0]
        FIGURES.setdefault("async", {})[name] = {
            "output_tokens_per_s": summary.get("output_tokens_per_s"),
            "ok": summary.get("ok"),
            **kernels_busy(rec / "gpu.jsonl", start_ns + warmup_s * 10**9, end_ns),
        }
    log(out, "[async] " + json.dumps(FIGURES.get("async")))


RECORDINGS = {
    "bandwidth-bound": (
        [
            "--config",
            "1b",
            "--max-seqs",
            "256",
            "--max-batched-tokens",
            "4096",
            "--max-model-len",
            "4096",
            "--kv-blocks",
            str(256 * 4096 // 16 + 64),
        ],
        [
            "--rate",
            "32",
            "--prompt-tokens",
            "56",  # after the 2,944-token shared prefix: 3,000 tokens a prompt
            "--output-tokens",
            "768",
            "--shared-prefix",
            "fraction=1,count=64,tokens=2944",
        ],
        "Long contexts and a large batch: up to 256 sequences decode over 3,000–3,800-token contexts, so a decode "
        "step reads tens of GB of K/V beside 2 GB of weights. Every prompt starts with one of 64 shared 2,944-token "
        "prefixes (system prompts, documents), so prefill is mostly prefix-cache hits and decode fills the steps: "
        "the 64 prefixes' K/V (386 MB a layer) is far larger than the 60 MB L2, so each sequence's reads still go "
        "to DRAM. The decode tail should be DRAM-bandwidth-bound.",
    ),
    "kv-preemption": (
        ["--config", "1b", "--max-seqs", "16", "--kv-blocks", "96"],
        ["--rate", "6", "--prompt-tokens", "64", "--output-tokens", "choice:48=0.7,400=0.3"],
        "Long outputs into a KV cache too small for them (96 blocks of 16 tokens, 16 sequences): sequences are "
        "preempted and recomputed.",
    ),
    "host-bound": (
        ["--config", "small", "--max-seqs", "64"],
        ["--rate", "40", "--prompt-tokens", "128", "--output-tokens", "128"],
        "A small model (25.7 M parameters) on a big GPU: a step's kernels take microseconds and the host's work "
        "(scheduling, Python, launches) sets the pace: host-bound.",
    ),
}


def phase_record(out, args):
    for name, (serve_args, load, what) in RECORDINGS.items():
        if args.recordings and name not in args.recordings.split(","):
            continue
        if left_s() < COST_S["record"]:
            log(out, f"[record] no time left for {name}")
            continue
        serve_and_load(
            out,
            name,
            serve_args + ["--attention", ATTENTION[0]],
            [load + ["--duration", str(args.record_seconds)]],
            what,
            ready_s=min(120, left_s() - 30),
        )


SPLIT_VAR = "BUDGETSCOPE_ATTN_KV_SPLITS"


def phase_splitkv(out, args):
    """Batch-1 decode with the split-KV attention off, then on (BUDGETSCOPE_ATTN_KV_SPLITS=--kv-splits), a process
    each: the per-kernel profile (decode_profile.py: the attention group's µs a token beside the others) and the
    batch-1 figure (bench_gpu.py: tok/s, share of copy bandwidth). The engine's default stays off until this says on
    is faster. --smoke: the `tiny` engine with the Triton kernels in Triton's CPU interpreter (so the split kernel
    runs, at most 2 splits), the profile only (bench_gpu.py needs CUDA)."""
    attention, extra, splits = ATTENTION[0], {}, args.kv_splits
    profile = [PY, str(ROOT / "benchmarks/gpu/decode_profile.py")]
    if SMOKE:  # the interpreter runs each program in Python: two runs, one profiled step
        attention, extra, splits = "triton", {"TRITON_INTERPRET": "1"}, min(args.kv_splits, 2)
        profile += ["--config", "tiny", "--device", "cpu", "--steps", "1", "--eager-steps", "1"]
        profile += ["--prompt-tokens", "16", "--warmup-steps", "1"]
    for name, value in (("off", ""), ("on", str(splits))):
        env = {**extra, SPLIT_VAR: value}
        got: dict = {"env": {SPLIT_VAR: value}}
        got["profile"] = results(sh(out, profile + ["--attention", attention], 150, env))
        if SMOKE:
            got["decode"] = {"why_none": "bench_gpu.py needs CUDA"}
        else:
            bench_out = WORK / f"splitkv-{name}"
            sh(
                out,
                [PY, str(ROOT / "benchmarks/bench_gpu.py"), "--out", str(bench_out), "--batches", "1"]
                + ["--modes", "graphs", "--no-tape", "--no-sampler-cost", "--seconds", "3", "--attention", attention],
                120,
                env,
            )
            path = bench_out / "gpu_figures.json"
            got["decode"] = json.loads(path.read_text()).get("decode") if path.exists() else None
            got["copy_bytes_per_s"] = json.loads(path.read_text()).get("copy_bytes_per_s") if path.exists() else None
        FIGURES.setdefault("splitkv", {})[name] = got
        attention_us = [
            (r.get("pass"), (r.get("groups") or {}).get("attention")) for r in got["profile"] if isinstance(r, dict)
        ]
        log(out, f"[splitkv] {name}: attention a token {attention_us}; decode {got.get('decode')}")


PHASES = {
    "env": phase_env,
    "attn": phase_attn,
    "mixed": phase_mixed,
    "served": phase_served,
    "async": phase_async,
    "baseline": phase_baseline,
    "decode": phase_decode,
    "decodeprof": phase_decodeprof,
    "inproc": phase_inproc,
    "record": phase_record,
    "tests": phase_tests,
    "sweep": phase_sweep,
    "gemv": phase_gemv,
    "attncmp": phase_attncmp,
    "splitkv": phase_splitkv,
}  # in the order of what matters most when time runs out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--baseline", default=None, help="a folder holding an older budgetscope/ to compare with")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each served load")
    ap.add_argument("--record-seconds", type=float, default=20.0, help="length of each recording's load")
    ap.add_argument("--recordings", default=None, help="comma-separated names of RECORDINGS (default: all)")
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="end the session within this many seconds")
    ap.add_argument("--kv-splits", type=int, default=32, help="splitkv: BUDGETSCOPE_ATTN_KV_SPLITS of the `on` run")
    ap.add_argument("--smoke", action="store_true", help="CPU, `tiny` model: check this script without a GPU")
    args = ap.parse_args()
    global SMOKE, DEADLINE
    SMOKE = args.smoke
    if SMOKE:
        ATTENTION[0] = "sdpa"  # Triton runs on CPU only under its interpreter
    DEADLINE = time.monotonic() + args.budget_s
    shutil.rmtree(WORK, ignore_errors=True)  # the jsonl exporters append: start from nothing
    WORK.mkdir(parents=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.baseline:
        args.baseline = str(Path(args.baseline).resolve())
    for name in args.phases.split(","):
        if left_s() < COST_S[name]:
            log(out, f"== {name} skipped: {left_s():.0f} s left")
            continue
        t0 = time.perf_counter()
        log(out, f"== {name}")
        try:
            PHASES[name](out, args)
        except Exception as e:  # one phase's failure must not cost the others
            log(out, f"[{name}] failed: {type(e).__name__}: {e}")
        log(out, f"== {name} done in {time.perf_counter() - t0:.0f} s")
        (out / "figures.json").write_text(json.dumps(FIGURES, indent=1, default=str))
    print(json.dumps(FIGURES, default=str)[-6000:], flush=True)


if __name__ == "__main__":
    main()
