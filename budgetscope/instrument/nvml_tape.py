"""Record what a real NVML answered, and replay it: real GPU readings through the sampler on a machine without one.

    tape = NvmlTape.record(pynvml, ticks=20, every_s=0.1)   # on a GPU machine, while it works
    tape.save("nvml_h100.json")
    nv = NvmlTape.load("nvml_h100.json").replay()           # anywhere: a pynvml stand-in answering as recorded
    Nvml(nv).read(gpu, now_ns=tape.clock())                 # the same Points the GPU machine produced

The recorder wraps the real `pynvml`: every `nvml*` call goes through, and its answer is written down in order —
plain numbers and strings as they are, NVML structs as their fields, opaque handles as a token, an NVMLError as
its code. `nvmlGpmMetricsGet` fills the struct it is given, so the filled metrics are what is written. The
replayer answers each function's calls in the recorded order and raises NVMLError (with `.value`) where the
recording did. The sampler's clock is taped too, so that power (an energy delta over a time delta) replays exactly.
"""

from __future__ import annotations

import ctypes
import json
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from budgetscope.instrument.gpu import Nvml

_HANDLE = {"handle": True}


def _plain(value: Any) -> Any:
    """A JSON-able picture of an NVML answer."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, ctypes.Structure):
        return {name: _plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes.Array):
        return [_plain(v) for v in value]
    if isinstance(value, types.SimpleNamespace):  # a stand-in's struct (the tests' fake NVML)
        return {k: _plain(v) for k, v in vars(value).items()}
    return dict(_HANDLE)  # a device handle, a GPM sample: opaque


class NVMLError(Exception):
    """Raised by the replay where the recorded call failed; `.value` is NVML's return code."""

    def __init__(self, value: int, message: str = ""):
        super().__init__(message or f"NVML error {value}")
        self.value = value


@dataclass
class NvmlTape:
    calls: list[dict] = field(default_factory=list)  # {"fn", "result" or "error" + "message", "us": call time}
    constants: dict[str, int] = field(default_factory=dict)
    clock_ns: list[int] = field(default_factory=list)
    points: list[dict] = field(default_factory=list)  # what the sampler made of it on the recording machine
    about: dict = field(default_factory=dict)  # card, driver, NVML and nvidia-ml-py versions, date

    # -- recording ---------------------------------------------------------------------------------------------
    @classmethod
    def record(
        cls, nv, ticks: int = 20, every_s: float = 0.1, about: dict | None = None, power_every_s: float = 0.0
    ) -> NvmlTape:
        """Open NVML through a recorder, read every GPU `ticks` times, every `every_s`; keep calls and points.
        `power_every_s` 0: the energy counter too on every tick (the tape then holds every call)."""
        tape = cls(about={**(about or {}), "power_every_s": power_every_s})
        proxy = _Recorder(nv, tape)
        nvml = Nvml(proxy, power_every_s)
        try:
            for k in range(ticks):
                for g in nvml.gpus:
                    for p in nvml.read(g, now_ns=tape._tick_clock):
                        tape.points.append(
                            {
                                "ts_ns": p.ts_ns,
                                "metric": p.metric,
                                "value": p.value,
                                "gpu_uuid": p.gpu_uuid,
                                "gpu_index": p.gpu_index,
                            }
                        )
                if k + 1 < ticks:
                    time.sleep(every_s)
        finally:
            nvml.close()
        for name in dir(nv):
            if name.startswith("NVML_") or name in ("nvmlMemory_v2",):
                value = getattr(nv, name)
                if isinstance(value, int):
                    tape.constants[name] = value
        return tape

    def _tick_clock(self) -> int:
        t = time.time_ns()
        self.clock_ns.append(t)
        return t

    # -- files -------------------------------------------------------------------------------------------------
    def save(self, path: str) -> None:
        doc = {
            "about": self.about,
            "constants": self.constants,
            "calls": self.calls,
            "clock_ns": self.clock_ns,
            "points": self.points,
        }
        with open(path, "w") as f:
            json.dump(doc, f, indent=None, separators=(",", ":"))
            f.write("\n")

    @classmethod
    def load(cls, path: str) -> NvmlTape:
        with open(path) as f:
            doc = json.load(f)
        return cls(doc["calls"], doc["constants"], doc["clock_ns"], doc["points"], doc.get("about", {}))

    # -- replay ------------------------------------------------------------------------------------------------
    def replay(self):
        """A pynvml stand-in answering every call as recorded."""
        return _Replayer(self)

    def clock(self) -> Callable[[], int]:
        """The sampler's clock as recorded: pass as `Nvml.read(g, now_ns=...)`."""
        it = iter(self.clock_ns)
        return lambda: next(it)


class _Recorder:
    """Forwards to the real pynvml and writes every nvml* call's answer on the tape."""

    def __init__(self, nv, tape: NvmlTape):
        self._nv, self._tape = nv, tape

    def __getattr__(self, name: str):
        value = getattr(self._nv, name)
        if not (name.startswith("nvml") and callable(value)):
            return value
        tape = self._tape

        def call(*args, **kwargs):
            t0 = time.perf_counter_ns()
            try:
                result = value(*args, **kwargs)
            except Exception as e:
                tape.calls.append(
                    {
                        "fn": name,
                        "error": getattr(e, "value", -1),
                        "message": str(e),
                        "us": (time.perf_counter_ns() - t0) // 1000,
                    }
                )
                raise
            us = (time.perf_counter_ns() - t0) // 1000
            if name == "nvmlGpmMetricsGet":  # the answer is the struct it filled
                mg = args[0]
                entry = {
                    "fn": name,
                    "result": [
                        {"metricId": m.metricId, "value": m.value, "nvmlReturn": m.nvmlReturn}
                        for m in list(mg.metrics)[: mg.numMetrics]
                    ],
                    "us": us,
                }
            else:
                entry = {"fn": name, "result": _plain(result), "us": us}
            tape.calls.append(entry)
            return result

        return call


class _Replayer:
    """Answers nvml* calls from the tape, each function's calls in recorded order."""

    NVMLError = NVMLError

    def __init__(self, tape: NvmlTape):
        self._queues: dict[str, list[dict]] = {}
        for c in tape.calls:
            self._queues.setdefault(c["fn"], []).append(c)
        self._next: dict[str, int] = {}
        for name, value in tape.constants.items():
            setattr(self, name, value)

    @staticmethod
    def c_nvmlGpmMetricsGet_t():
        return types.SimpleNamespace(
            version=0,
            numMetrics=0,
            sample1=None,
            sample2=None,
            metrics=[types.SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(210)],
        )

    def __getattr__(self, name: str):
        if not name.startswith("nvml"):
            raise AttributeError(name)
        queue = self._queues.get(name)
        if queue is None:
            raise AttributeError(f"{name} was never called on the recording machine")

        def call(*args, **kwargs):
            k = self._next.get(name, 0)
            if k >= len(queue):
                raise RuntimeError(f"NVML tape: {name} called more often ({k + 1}) than recorded ({len(queue)})")
            self._next[name] = k + 1
            entry = queue[k]
            if "error" in entry:
                raise NVMLError(entry["error"], entry.get("message", ""))
            result = entry["result"]
            if name == "nvmlGpmMetricsGet":
                mg = args[0]
                for slot, m in zip(mg.metrics, result):
                    slot.metricId, slot.value, slot.nvmlReturn = m["metricId"], m["value"], m["nvmlReturn"]
                return mg
            return _revive(result)

        return call


def _revive(value: Any) -> Any:
    if isinstance(value, dict):
        if value == _HANDLE:
            return object()
        return types.SimpleNamespace(**{k: _revive(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_revive(v) for v in value]
    return value


__all__ = ["NvmlTape", "NVMLError"]
