"""`GpuSampler`: per-GPU HBM, memory activity, GPM DRAM bandwidth, power and clocks from NVML, as OTLP gauges.

    sampler = GpuSampler(every_s=0.1, sink="jsonl:gpu.jsonl")   # or sink="otlp" (OTEL_* env)
    sampler.start()            # a thread; start(mode="process") spawns a process (NVML does not survive fork)
    ...
    sampler.stop()             # flushes what is buffered

Every point carries its own Unix-epoch ns timestamp (the span clock, `time.time_ns()`), and the attributes
`gpu.uuid`, `gpu.index` (and `hw.id`, `hw.type`); `host.name` is a resource attribute. Metric names follow the
OpenTelemetry hardware semantic conventions where they exist (https://opentelemetry.io/docs/specs/semconv/hardware/gpu/);
the rest are `budgetscope.gpu.*` (see docs/gpu.md). What NVML cannot give (no driver, no GPU, MIG, no GPM) is
said once in one line (`unavailable_line()`) and never emitted: unknown, never zero.

NVML calls (nvidia-ml-py's `pynvml`): nvmlDeviceGetMemoryInfo(h, version=nvmlMemory_v2),
nvmlDeviceGetUtilizationRates, nvmlDeviceGetTotalEnergyConsumption (mJ), nvmlDeviceGetClockInfo /
nvmlDeviceGetMaxClockInfo (MHz), nvmlDeviceGetMemoryBusWidth (bits), nvmlDeviceGetMigMode,
nvmlGpmQueryDeviceSupport, nvmlGpmSampleAlloc / nvmlGpmSampleGet / nvmlGpmMetricsGet
(NVML_GPM_METRIC_DRAM_BW_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY, both 0–100).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from budgetscope.instrument import process_exit
from budgetscope.instrument.exporters import otlp_exporter

log = logging.getLogger("budgetscope.gpu")

# -- metric names (constants shared by the sampler, the archive decoder, the analysis and the tests) ------------
HBM_USED = "hw.gpu.memory.usage"  # By (OTel semconv)
HBM_LIMIT = "hw.gpu.memory.limit"  # By (OTel semconv)
GPU_UTILIZATION = "hw.gpu.utilization"  # 1 (OTel semconv; NVML "gpu" utilization: share of time a kernel ran)
POWER = "hw.power"  # W (OTel semconv hw.power), from energy-counter deltas
MEMORY_ACTIVITY = "budgetscope.gpu.memory.activity"  # 1: NVML "memory utilization" — busy time, NOT bandwidth
DRAM_BANDWIDTH = "budgetscope.gpu.dram_bandwidth.utilization"  # 1: GPM DRAM bandwidth / peak
SM_OCCUPANCY = "budgetscope.gpu.sm.occupancy"  # 1: GPM active warps / theoretical maximum
SM_CLOCK = "budgetscope.gpu.clock.sm"  # Hz
MEMORY_CLOCK = "budgetscope.gpu.clock.memory"  # Hz
PEAK_BANDWIDTH = "budgetscope.gpu.memory.peak_bandwidth"  # By/s: max memory clock × 2 (DDR) × bus width / 8

UNITS = {
    HBM_USED: "By",
    HBM_LIMIT: "By",
    GPU_UTILIZATION: "1",
    POWER: "W",
    MEMORY_ACTIVITY: "1",
    DRAM_BANDWIDTH: "1",
    SM_OCCUPANCY: "1",
    SM_CLOCK: "Hz",
    MEMORY_CLOCK: "Hz",
    PEAK_BANDWIDTH: "By/s",
}

SCOPE = "budgetscope.gpu"
DEFAULT_EVERY_S = 0.1
# nvmlDeviceGetTotalEnergyConsumption took 3.25 ms (median) on an H100 with driver 580 — ten times every other call
# of a tick together — so the energy counter is read at most once a second: power is a mean over an interval anyway.
POWER_EVERY_S = 1.0
FLUSH_EVERY_S = 1.0
INSTALL_HINT = "pip install 'budgetscope[gpu]'"


class GpuUnavailable(Exception):
    """No GPU can be sampled at all (no nvidia-ml-py, no driver, no GPU). The message is the one line."""


def peak_bandwidth_bytes_per_s(mem_clock_mhz: float, bus_width_bits: int) -> float:
    """Theoretical memory bandwidth in bytes/s: NVML's memory clock (MHz) × 2 transfers a clock × bus width / 8.

    NVML reports HBM and GDDR clocks so that this holds: H100 SXM 2619 MHz × 5120 bit → 3.35 TB/s,
    A100 40 GB 1215 MHz × 5120 bit → 1.56 TB/s."""
    return mem_clock_mhz * 1e6 * 2 * bus_width_bits / 8


def power_watts(e0_mj: int, t0_ns: int, e1_mj: int, t1_ns: int) -> float | None:
    """Mean power in W between two readings of NVML's total-energy counter (mJ); None when undefined
    (no time passed, or the counter went backwards: a driver reload)."""
    if t1_ns <= t0_ns or e1_mj < e0_mj:
        return None
    return (e1_mj - e0_mj) / 1e3 / ((t1_ns - t0_ns) / 1e9)


@dataclass(slots=True)
class Point:
    ts_ns: int
    metric: str
    value: float
    gpu_uuid: str
    gpu_index: int


@dataclass(slots=True)
class Gpu:
    """One device as the sampler sees it: what it can read, and the state carried between ticks."""

    index: int
    uuid: str
    name: str
    handle: Any
    is_mig: bool = False
    has_gpm: bool = False
    peak_bandwidth: float | None = None
    gpm_prev: Any = None
    energy_prev: tuple[int, int] | None = None  # (ts_ns, mJ)
    broken: set[str] = field(default_factory=set)  # metrics whose NVML call failed: not read again


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _import_nvml():
    try:
        # imported on use: pynvml 35 ms to import
        import pynvml
    except ImportError:
        raise GpuUnavailable(
            f"GPU sampling unavailable: nvidia-ml-py is not installed ({INSTALL_HINT}); no GPU figures are recorded"
        ) from None
    return pynvml


def _why(nv, e: Exception) -> str:
    value = getattr(e, "value", None)
    if value == getattr(nv, "NVML_ERROR_LIBRARY_NOT_FOUND", -1):
        return "the NVML library (libnvidia-ml.so) is not found: no NVIDIA driver on this machine"
    if value == getattr(nv, "NVML_ERROR_DRIVER_NOT_LOADED", -1):
        return "the NVIDIA driver is not loaded"
    if value == getattr(nv, "NVML_ERROR_NO_PERMISSION", -1):
        return "no permission to use NVML"
    return str(e) or type(e).__name__


class Nvml:
    """NVML opened once: the GPUs found and, per GPU, what cannot be read and why."""

    def __init__(self, nv=None, power_every_s: float = POWER_EVERY_S):
        self.nv = nv if nv is not None else _import_nvml()
        self.power_every_ns = int(power_every_s * 1e9)
        nv = self.nv
        try:
            nv.nvmlInit()
        except Exception as e:  # NVMLError and its subclasses; anything else from a broken install too
            raise GpuUnavailable(
                f"GPU sampling unavailable: NVML cannot start ({_why(nv, e)}); no GPU figures are recorded"
            ) from None
        self.gpus: list[Gpu] = []
        self.notes: list[str] = []
        try:
            count = nv.nvmlDeviceGetCount()
        except Exception as e:
            nv.nvmlShutdown()
            raise GpuUnavailable(f"GPU sampling unavailable: NVML cannot count GPUs ({_why(nv, e)})") from None
        if not count:
            nv.nvmlShutdown()
            raise GpuUnavailable("GPU sampling unavailable: NVML started but found no GPU; no GPU figures are recorded")
        for i in range(count):
            self.gpus.append(self._open(i))

    def _open(self, i: int) -> Gpu:
        nv = self.nv
        h = nv.nvmlDeviceGetHandleByIndex(i)
        g = Gpu(i, _text(nv.nvmlDeviceGetUUID(h)), _text(nv.nvmlDeviceGetName(h)), h)
        try:
            g.is_mig = nv.nvmlDeviceGetMigMode(h)[0] == nv.NVML_DEVICE_MIG_ENABLE
        except Exception:  # NOT_SUPPORTED: a GPU without MIG
            g.is_mig = False
        try:
            mem_mhz = nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)
            g.peak_bandwidth = peak_bandwidth_bytes_per_s(mem_mhz, nv.nvmlDeviceGetMemoryBusWidth(h))
        except Exception as e:
            self.notes.append(f"GPU {i}: peak bandwidth unknown (memory clock or bus width: {_why(nv, e)})")
        if g.is_mig:
            # NVML gives no whole-GPU utilization under MIG, and GPM would need a sample per GPU instance.
            self.notes.append(
                f"GPU {i} ({g.name}) is in MIG mode: utilization, memory activity, DRAM bandwidth "
                "and SM occupancy are unknown (NVML reports them per MIG instance, not per GPU)"
            )
            g.broken |= {GPU_UTILIZATION, MEMORY_ACTIVITY}
            return g
        try:
            g.has_gpm = bool(nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
        except Exception:  # an old driver without GPM
            g.has_gpm = False
        if g.has_gpm:
            g.gpm_prev = nv.nvmlGpmSampleGet(h, nv.nvmlGpmSampleAlloc())
        else:
            self.notes.append(
                f"GPU {i} ({g.name}): no GPM (needs Hopper or newer and a recent driver): DRAM "
                "bandwidth and SM occupancy are unknown; memory activity is busy time, not bandwidth"
            )
        return g

    def close(self) -> None:
        for g in self.gpus:
            if g.gpm_prev is not None:
                try:
                    self.nv.nvmlGpmSampleFree(g.gpm_prev)
                except Exception:  # noqa: BLE001 - best effort at shutdown
                    pass
        self.nv.nvmlShutdown()

    # -- one reading -----------------------------------------------------------------------------------------
    def read(self, g: Gpu, now_ns: Callable[[], int] = time.time_ns) -> list[Point]:
        """Every figure of one GPU now, each stamped when it was read; figures NVML refuses are left out."""
        nv, h, out = self.nv, g.handle, []

        def put(metric: str, fn: Callable[[], Any]) -> Any:
            if metric in g.broken:
                return None
            try:
                v = fn()
            except Exception as e:  # noqa: BLE001 - NVMLError_NotSupported and kin: unknown, not zero
                g.broken.add(metric)
                log.info("GPU %d: %s unknown from now on (%s)", g.index, metric, _why(nv, e))
                return None
            if v is not None:
                out.append(Point(now_ns(), metric, float(v), g.uuid, g.index))
            return v

        mem = None
        if HBM_USED not in g.broken:
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            except Exception as e:  # noqa: BLE001 - NVMLError and kin: unknown from now on, never zero
                g.broken |= {HBM_USED, HBM_LIMIT}
                log.info("GPU %d: HBM use unknown from now on (%s)", g.index, _why(nv, e))
        if mem is not None:
            put(HBM_USED, lambda: mem.used)
            put(HBM_LIMIT, lambda: mem.total)
        if GPU_UTILIZATION not in g.broken:  # one call gives both, over NVML's own sample period
            try:
                u, ts = nv.nvmlDeviceGetUtilizationRates(h), now_ns()
            except Exception as e:  # noqa: BLE001 - NVMLError and kin: unknown from now on, never zero
                g.broken |= {GPU_UTILIZATION, MEMORY_ACTIVITY}
                log.info("GPU %d: utilization unknown from now on (%s)", g.index, _why(nv, e))
            else:
                out.append(Point(ts, GPU_UTILIZATION, u.gpu / 100, g.uuid, g.index))
                out.append(Point(ts, MEMORY_ACTIVITY, u.memory / 100, g.uuid, g.index))
        put(SM_CLOCK, lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM) * 1e6)
        put(MEMORY_CLOCK, lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM) * 1e6)
        if POWER not in g.broken and (
            not self.power_every_ns or g.energy_prev is None or now_ns() - g.energy_prev[0] >= self.power_every_ns
        ):
            try:
                e1, t1 = nv.nvmlDeviceGetTotalEnergyConsumption(h), now_ns()
            except Exception as e:  # noqa: BLE001 - pre-Volta GPUs have no energy counter
                g.broken.add(POWER)
                log.info("GPU %d: power unknown (no energy counter: %s)", g.index, _why(nv, e))
            else:
                if (
                    g.energy_prev is not None
                    and (w := power_watts(g.energy_prev[1], g.energy_prev[0], e1, t1)) is not None
                ):
                    out.append(Point(t1, POWER, w, g.uuid, g.index))
                g.energy_prev = (t1, e1)
        if g.peak_bandwidth is not None:
            out.append(Point(now_ns(), PEAK_BANDWIDTH, g.peak_bandwidth, g.uuid, g.index))
        if g.has_gpm:
            out += self._gpm(g, now_ns)
        return out

    def _gpm(self, g: Gpu, now_ns: Callable[[], int]) -> list[Point]:
        """DRAM bandwidth and SM occupancy over the interval since the previous GPM sample (0–100 → 0–1)."""
        nv = self.nv
        try:
            cur = nv.nvmlGpmSampleGet(g.handle, nv.nvmlGpmSampleAlloc())
            ts = now_ns()
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = nv.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = 2
            mg.sample1, mg.sample2 = g.gpm_prev, cur
            mg.metrics[0].metricId = nv.NVML_GPM_METRIC_DRAM_BW_UTIL
            mg.metrics[1].metricId = nv.NVML_GPM_METRIC_SM_OCCUPANCY
            nv.nvmlGpmMetricsGet(mg)
        except Exception as e:  # noqa: BLE001 - GPM unsupported or failing: bandwidth unknown, the rest goes on
            g.has_gpm = False
            log.info("GPU %d: GPM stopped (%s): DRAM bandwidth unknown from now on", g.index, _why(nv, e))
            return []
        nv.nvmlGpmSampleFree(g.gpm_prev)
        g.gpm_prev = cur
        out = []
        for m, name in ((mg.metrics[0], DRAM_BANDWIDTH), (mg.metrics[1], SM_OCCUPANCY)):
            # A real H100 (driver 580) answered NaN with NVML_SUCCESS for the first interval: unknown, not emitted.
            if m.nvmlReturn == nv.NVML_SUCCESS and math.isfinite(m.value):
                out.append(Point(ts, name, m.value / 100, g.uuid, g.index))
        return out


# -- sinks: where the points go ---------------------------------------------------------------------------------
def _group(points: list[Point]) -> dict[str, list[Point]]:
    by: dict[str, list[Point]] = {}
    for p in points:
        by.setdefault(p.metric, []).append(p)
    return by


def _point_attrs(p: Point) -> dict:
    return {"gpu.uuid": p.gpu_uuid, "gpu.index": p.gpu_index, "hw.id": p.gpu_uuid, "hw.type": "gpu"}


DEFAULT_SERVICE_NAME = "budgetscope-gpu"


def service_name() -> str:
    """The resource's `service.name`: OTEL_SERVICE_NAME when set (as every OpenTelemetry SDK does), else
    budgetscope-gpu."""
    return os.environ.get("OTEL_SERVICE_NAME", "").strip() or DEFAULT_SERVICE_NAME


def otlp_json(points: list[Point], host_name: str) -> dict:
    """One OTLP/JSON `ExportMetricsServiceRequest`: a gauge per metric, a data point per reading."""

    def kv(k, v):
        return {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}

    metrics = [
        {
            "name": m,
            "unit": UNITS[m],
            "gauge": {
                "dataPoints": [
                    {
                        "timeUnixNano": str(p.ts_ns),
                        "asDouble": p.value,
                        "attributes": [kv(k, v) for k, v in _point_attrs(p).items()],
                    }
                    for p in ps
                ]
            },
        }
        for m, ps in _group(points).items()
    ]
    return {
        "resourceMetrics": [
            {
                "resource": {"attributes": [kv("host.name", host_name), kv("service.name", service_name())]},
                "scopeMetrics": [{"scope": {"name": SCOPE}, "metrics": metrics}],
            }
        ]
    }


class JsonLinesSink:
    """Appends one OTLP/JSON metrics export per flush to a file (what `budgetscope ingest` reads)."""

    def __init__(self, path: str):
        self.path = path
        self._f = open(path, "ab")

    def export(self, points: list[Point], host_name: str) -> None:
        # imported on use: orjson 28 ms to import
        import orjson

        self._f.write(orjson.dumps(otlp_json(points, host_name)) + b"\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class OtlpSink:
    """The OpenTelemetry OTLP metric exporter (http/protobuf or grpc from OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL;
    endpoint, headers, timeout from the usual OTEL_EXPORTER_OTLP_* variables), fed data points that keep their
    own timestamps (an SDK instrument would stamp them all at collection time)."""

    def __init__(self):

        self._exporter = otlp_exporter("metrics")

    def export(self, points: list[Point], host_name: str) -> Any:
        """Send the points; returns the exporter's result (FAILURE when the collector did not take them)."""
        # imported on use: the OpenTelemetry SDK 54 ms to import
        from opentelemetry.sdk.metrics.export import (
            Gauge,
            Metric,
            MetricsData,
            NumberDataPoint,
            ResourceMetrics,
            ScopeMetrics,
        )
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        metrics = [
            Metric(m, None, UNITS[m], Gauge([NumberDataPoint(_point_attrs(p), 0, p.ts_ns, p.value) for p in ps]))
            for m, ps in _group(points).items()
        ]
        data = MetricsData(
            [
                ResourceMetrics(
                    Resource({"host.name": host_name, "service.name": service_name()}),
                    [ScopeMetrics(InstrumentationScope(SCOPE), metrics, "")],
                    "",
                )
            ]
        )
        return self._exporter.export(data)

    def close(self) -> None:
        self._exporter.shutdown()


def make_sink(spec: str):
    """`jsonl:PATH` or `otlp`; ValueError otherwise."""
    if spec.startswith("jsonl:") and len(spec) > 6:
        return JsonLinesSink(spec[6:])
    if spec == "otlp":
        return OtlpSink()
    raise ValueError(f"unknown GPU sample sink {spec!r}; valid: jsonl:<path>, otlp")


# -- the sampler ------------------------------------------------------------------------------------------------
class GpuSampler:
    """Reads every GPU every `every_s` seconds and exports the points every `flush_every_s`.

    `sink`: a spec (`jsonl:PATH`, `otlp`) or an object with `export(points, host_name)` and `close()`.
    `nvml`: a pynvml-like module (tests pass a fake); default the real `pynvml`.
    """

    def __init__(
        self,
        every_s: float = DEFAULT_EVERY_S,
        sink: Any = "otlp",
        nvml: Any = None,
        host_name: str | None = None,
        flush_every_s: float = FLUSH_EVERY_S,
        power_every_s: float = POWER_EVERY_S,
    ):
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0, got {every_s}")
        self.every_s = every_s
        self.flush_every_s = flush_every_s
        self.power_every_s = power_every_s
        self.sink_spec = sink
        self.host_name = host_name or socket.gethostname()
        self._nv_module = nvml
        self.nvml: Nvml | None = None
        self.unavailable: str | None = None  # the one line, once known
        self.num_ticks = 0
        self.num_points = 0
        self.cpu_ns = 0  # CPU time of the sampling thread (thread mode): its own cost
        self.wall_ns = 0
        self.lost_points = 0  # points whose export failed
        self._in_flight = 0  # points of the export running now
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def open(self) -> bool:
        """Open NVML; False (and `unavailable` set) when no GPU can be sampled at all."""
        try:
            self.nvml = Nvml(self._nv_module, self.power_every_s)
        except GpuUnavailable as e:
            self.unavailable = str(e)
            return False
        if self.nvml.notes:
            self.unavailable = "GPU figures unknown: " + "; ".join(self.nvml.notes)
        return True

    def start(self, mode: str = "thread") -> bool:
        """Start sampling in a daemon thread or a spawned process; False when there is nothing to sample."""
        if mode == "process":
            return self._start_process()
        if mode != "thread":
            raise ValueError(f"mode must be 'thread' or 'process', got {mode!r}")
        if self.nvml is None and not self.open():
            return False
        self._sink = make_sink(self.sink_spec) if isinstance(self.sink_spec, str) else self.sink_spec
        self._thread = threading.Thread(target=self.run, name="budgetscope-gpu-sampler", daemon=True)
        self._thread.start()

        process_exit.register(self)  # the buffered points go out at exit and on SIGTERM
        return True

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop, flush, close NVML (or the child process)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._process is not None:
            self._process_stop.set()
            self._process.join(timeout_s)

    def shutdown(self, timeout_s: float = 10.0) -> str:
        """`stop()` within `timeout_s`; returns what could not be exported ("" when every point went out)."""
        lost_before = self.lost_points
        self.stop(timeout_s)
        lost = self.lost_points - lost_before
        if self._thread is not None and self._thread.is_alive():
            lost += self._in_flight
        return f"{lost:,} GPU points not exported" if lost else ""

    def run(self, max_ticks: int | None = None) -> None:
        """The loop (blocking): tick on a fixed schedule (no drift), flush every `flush_every_s`."""
        if self.nvml is None and not self.open():
            return
        sink = getattr(self, "_sink", None) or (
            make_sink(self.sink_spec) if isinstance(self.sink_spec, str) else self.sink_spec
        )
        self._sink = sink
        buf: list[Point] = []
        t0 = time.perf_counter()
        next_flush = t0 + self.flush_every_s
        k = 0
        try:
            while not self._stop.is_set() and (max_ticks is None or k < max_ticks):
                c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                for g in self.nvml.gpus:
                    buf += self.nvml.read(g)
                self.num_ticks += 1
                if time.perf_counter() >= next_flush and buf:
                    self._flush(buf)
                    buf = []
                    next_flush += self.flush_every_s
                self.cpu_ns += time.thread_time_ns() - c0
                self.wall_ns += time.perf_counter_ns() - w0
                k += 1
                delay = t0 + k * self.every_s - time.perf_counter()
                if delay < 0:  # fell behind (a slow NVML call): skip the missed ticks, never burst
                    k += int(-delay // self.every_s) + 1
                    delay = t0 + k * self.every_s - time.perf_counter()
                self._stop.wait(max(0.0, delay))
        finally:
            if buf:
                self._flush(buf)
            sink.close()
            self.nvml.close()

    def _flush(self, buf: list[Point]) -> None:
        self.num_points += len(buf)
        self._in_flight = len(buf)
        try:
            result = self._sink.export(buf, self.host_name)
            if getattr(result, "name", "SUCCESS") != "SUCCESS":  # the OTLP exporter reports, never raises
                raise OSError(f"the exporter answered {result.name}")
        except Exception as e:  # noqa: BLE001 - a failed export loses those points, never the sampler
            log.warning("GPU sample export failed (%d points lost): %s", len(buf), e)
            self.lost_points += len(buf)
        self._in_flight = 0

    # -- process mode ----------------------------------------------------------------------------------------
    def _start_process(self) -> bool:
        # imported on use: multiprocessing 37 ms to import
        import multiprocessing as mp

        if not isinstance(self.sink_spec, str):
            raise ValueError("process mode needs a sink spec string (jsonl:PATH or otlp)")
        ctx = mp.get_context("spawn")  # NVML state does not survive fork
        self._process_stop = ctx.Event()
        ready = ctx.Queue()
        self._process = ctx.Process(
            target=_child,
            name="budgetscope-gpu-sampler",
            daemon=True,
            args=(self.every_s, self.sink_spec, self.host_name, self.flush_every_s, self._process_stop, ready),
        )
        self._process.start()
        ok, self.unavailable = ready.get(timeout=60)
        if not ok:
            self._process.join(10)
            self._process = None
        return ok


def _child(every_s, sink_spec, host_name, flush_every_s, stop, ready) -> None:
    s = GpuSampler(every_s, sink_spec, host_name=host_name, flush_every_s=flush_every_s)
    ok = s.open()
    ready.put((ok, s.unavailable))
    if not ok:
        return
    threading.Thread(target=lambda: (stop.wait(), s._stop.set()), daemon=True).start()
    s.run()


__all__ = [
    "GpuSampler",
    "GpuUnavailable",
    "Nvml",
    "Point",
    "peak_bandwidth_bytes_per_s",
    "power_watts",
    "otlp_json",
    "UNITS",
]
