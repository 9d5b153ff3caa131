"""Prometheus text exposition (a server's `/metrics`) → `server_metrics` rows, under the server's own names.

Parses the text format (version 0.0.4, which vLLM, SGLang, TGI, llama.cpp and Triton serve): `# HELP` / `# TYPE`
lines are skipped, each sample line is `name{label="value",...} value [timestamp_ms]`. Label values keep their
escapes resolved (`\\\\`, `\\"`, `\\n`). A line that is none of these is an error naming its line number.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(rf'\s*({_NAME})\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class PrometheusError(ValueError):
    """A line that is not Prometheus text exposition; the message names the line."""


@dataclass(frozen=True, slots=True)
class Sample:
    metric: str
    labels: dict[str, str]
    value: float
    ts_ns: int | None
    """The sample's own timestamp when the line gives one (ms in the text), else None."""

    @property
    def labels_json(self) -> str:
        return json.dumps(self.labels, sort_keys=True, separators=(",", ":"))


def _labels(text: str, line_no: int) -> dict[str, str]:
    out, pos = {}, 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            raise PrometheusError(f"line {line_no}: bad labels {{{text[:60]}}}")
        out[m.group(1)] = re.sub(r'\\[\\"n]', lambda e: _UNESCAPE[e.group(0)], m.group(2))
        pos = m.end()
    return out


def _value(text: str, line_no: int) -> float:
    special = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if text in special:
        return special[text]
    try:
        return float(text)
    except ValueError:
        raise PrometheusError(f"line {line_no}: bad sample value {text!r}") from None


def parse(text: str) -> list[Sample]:
    """Every sample of a `/metrics` body; raises PrometheusError naming the first bad line."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise PrometheusError(f"line {n}: not a Prometheus sample: {line[:80]!r}")
        name, labels, value, ts = m.groups()
        out.append(Sample(name, _labels(labels, n) if labels else {}, _value(value, n),
                          int(ts) * 1_000_000 if ts else None))
    return out
