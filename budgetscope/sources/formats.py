"""Which known file format a file is, from its first bytes: so that a file given to the wrong command (or the
wrong `import --from`) gets one line naming what it is and the command that reads it.

Read from the head of the file only (`HEAD_BYTES`): the first JSON line when it parses, else the keys near the
start that each tool writes first (GuideLLM's `metadata.guidellm_version`, vLLM bench's `date` / `model_id`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HEAD_BYTES = 1 << 16
NAMES = {
    "otlp": "an OTLP trace export",
    "aiperf": "an AIPerf profile_export.jsonl",
    "aiperf-raw": "an AIPerf raw export (profile_export_raw.jsonl)",
    "aiperf-summary": "an AIPerf run summary (profile_export_aiperf.json)",
    "guidellm": "a GuideLLM benchmarks.json",
    "vllm-bench": "a vllm bench serve result",
    "vllm-metrics": "vLLM RequestOutput.metrics lines",
    "triton": "a Triton trace file",
    "prometheus": "Prometheus /metrics text",
}
"""Each recognised format → how a message names it. All but `otlp`, `aiperf-raw` and `aiperf-summary` (both read
with the `profile_export.jsonl` beside them) are `budgetscope import --from` kinds."""

IMPORT_KINDS = ("vllm-bench", "aiperf", "guidellm", "vllm-metrics", "triton", "prometheus")
"""The kinds `budgetscope import --from` takes (sources/import_files.py)."""
JOINED = ("aiperf", "guidellm")
"""Kinds whose records carry the server's request id: joined to its server spans (sources/joins.py)."""


def recognise(path: str | Path) -> str | None:
    """The format of the file at `path` (a key of NAMES), or None when it is none of them (or unreadable)."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return None
    return recognise_head(head)


def recognise_head(head: bytes) -> str | None:
    """The format of a file that starts with `head` (a key of NAMES), or None."""
    text = head.lstrip().decode("utf-8", "replace")
    if text.startswith("# HELP") or text.startswith("# TYPE"):
        return "prometheus"
    first = text.split("\n", 1)[0]
    try:
        obj = json.loads(first)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        return _by_keys(obj.keys())
    if text.startswith("["):
        return "triton" if re.search(r'"timestamps"\s*:', text) and re.search(r'"id"\s*:', text) else None
    if text.startswith("{"):
        keys = set(re.findall(r'"([A-Za-z_]+)"\s*:', text[:4096]))
        return "guidellm" if "guidellm_version" in keys else _by_keys(keys)
    return None


def _by_keys(keys) -> str | None:
    keys = set(keys)
    if "resourceSpans" in keys:
        return "otlp"
    if "aiperf_version" in keys:  # the run's summary, `profile_export_aiperf.json` (AIPerf 0.13: its second key)
        return "aiperf-summary"
    if {"metadata", "metrics"} <= keys:
        return "aiperf"
    if {"metadata", "start_perf_ns", "responses"} <= keys:
        return "aiperf-raw"
    if "benchmarks" in keys or "guidellm_version" in keys:
        return "guidellm"
    if {"start_times", "ttfts"} <= keys or {"date", "model_id"} <= keys:
        return "vllm-bench"
    if "metrics" in keys:
        return "vllm-metrics"
    return None


def wrong_format(path: str | Path, wanted: str) -> str | None:
    """One line saying what the file at `path` is and which command reads it, when it is a known format other
    than `wanted` (an import kind, or `otlp` for `budgetscope ingest`); else None."""
    found = recognise(path)
    if found is None or found == wanted:
        return None
    how = {
        "otlp": "`budgetscope ingest`",
        "aiperf-raw": "`budgetscope import --from aiperf` of the profile_export.jsonl beside it",
        "aiperf-summary": "`budgetscope import --from aiperf` of the profile_export.jsonl beside it (the "
        "per-request records; the summary is read from beside them for the run's model)",
    }.get(found, f"`budgetscope import --from {found}`")
    return f"{path}: this is {NAMES[found]}, not {NAMES[wanted]}: read it with {how}"
