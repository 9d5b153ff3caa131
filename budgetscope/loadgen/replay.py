"""Replay a timestamped trace: one JSON object a line, each a request with when it arrived.

    {"timestamp": 1718000000.125, "prompt_tokens": 512, "output_tokens": 128, "tier": "interactive", "tenant": "a"}
    {"offset_ms": 40.5, "input_tokens": 90, "max_tokens": 32, "prompt": "explicit text is used as is"}

Time: `timestamp` (Unix seconds; or ISO-8601) or `offset_s` / `offset_ms` (from the trace start). Lines may
come in any order; the plan is sorted by time and starts at the earliest. Lengths: `prompt_tokens`
(or `input_tokens`) and `output_tokens` (or `max_tokens`); `prompt` (text) replaces the synthetic prompt.
Optional: `tier`, `tenant`, `prefix_id` (with the workload's shared prefixes). Blank lines and lines
starting with `#` are skipped.
"""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

import orjson

from budgetscope.loadgen.errors import LoadgenError
from budgetscope.loadgen.plan import Plan, PlannedRequest
from budgetscope.loadgen.workload import Workload


def read_replay(path: str | Path, workload: Workload | None = None, *, seed: int = 0, time_scale: float = 1.0) -> Plan:
    """A plan from a replay file. `time_scale` > 1 replays faster (gaps divided by it).

    Missing lengths are drawn from `workload` (default: its defaults). A malformed line raises
    LoadgenError naming the file and the line.
    """
    if time_scale <= 0:
        raise LoadgenError(f"time scale must be > 0, got {time_scale:g}")
    workload = workload or Workload()
    path = Path(path)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as err:
        raise LoadgenError(f"cannot read replay file {path}: {err.strerror}") from None
    rng = random.Random(f"{seed}/replay")
    rows: list[tuple[float, PlannedRequest]] = []
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        try:
            rows.append(_row(orjson.loads(line), workload, rng))
        except orjson.JSONDecodeError as err:
            raise LoadgenError(f"{path}:{lineno}: not valid JSON ({err.args[0].split(':')[0]})") from None
        except (ValueError, TypeError) as err:
            raise LoadgenError(f"{path}:{lineno}: {err}") from None
    if not rows:
        raise LoadgenError(f"{path}: no requests in the replay file")
    rows.sort(key=lambda row: row[0])
    t0 = rows[0][0]
    requests = []
    for index, (t, req) in enumerate(rows):
        req.index = index
        req.offset_ns = round((t - t0) / time_scale * 1e9)
        requests.append(req)
    return Plan(
        requests,
        seed,
        f"replay of {path.name} ({len(requests)} requests, x{time_scale:g})",
        meta={"replay": str(path), "time_scale": time_scale},
    )


def _row(obj, workload: Workload, rng: random.Random) -> tuple[float, PlannedRequest]:
    if not isinstance(obj, dict):
        raise ValueError("each line must be a JSON object")
    t = _time(obj)
    prompt = obj.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise ValueError("prompt must be a string")
    prompt_tokens = _count(obj, "prompt_tokens", "input_tokens")
    if prompt_tokens is None:
        prompt_tokens = len(prompt.split()) if prompt else workload.prompt_tokens.sample(rng)
    output_tokens = _count(obj, "output_tokens", "max_tokens")
    if output_tokens is None:
        output_tokens = workload.output_tokens.sample(rng)
    prefix_id, prefix_tokens = -1, 0
    if obj.get("prefix_id") is not None:
        sp = workload.shared_prefix
        if sp is None:
            raise ValueError("prefix_id needs a shared prefix in the workload (--shared-prefix)")
        prefix_id, prefix_tokens = _int(obj["prefix_id"], "prefix_id") % sp.count, sp.tokens
    tier, tenant = obj.get("tier"), obj.get("tenant")
    for name, value in (("tier", tier), ("tenant", tenant)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a string")
    req = PlannedRequest(
        index=0,
        offset_ns=0,
        prompt_tokens=prompt_tokens + prefix_tokens,
        output_tokens=output_tokens,
        tier=tier if tier is not None else workload.tiers.sample(rng),
        tenant=tenant if tenant is not None else workload.tenants.sample(rng),
        prefix_id=prefix_id,
        prefix_tokens=prefix_tokens,
        seed=rng.getrandbits(63),
        prompt=prompt,
    )
    return t, req


def _time(obj: dict) -> float:
    if "timestamp" in obj:
        value = obj["timestamp"]
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                raise ValueError(f"timestamp {value!r} is neither a number nor ISO-8601") from None
        return _number(value, "timestamp")
    if "offset_s" in obj:
        return _number(obj["offset_s"], "offset_s")
    if "offset_ms" in obj:
        return _number(obj["offset_ms"], "offset_ms") / 1000
    raise ValueError("no time: give timestamp, offset_s or offset_ms")


def _count(obj: dict, *keys: str) -> int | None:
    for key in keys:
        if obj.get(key) is not None:
            value = _int(obj[key], key)
            if value < 1:
                raise ValueError(f"{key} must be >= 1, got {value}")
            return value
    return None


def _int(value, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    return int(value)


def _number(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)
