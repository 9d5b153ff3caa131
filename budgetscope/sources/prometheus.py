"""Prometheus text exposition (a server's `/metrics`) → `server_metrics` rows, under the server's own names.

Parses the text format (version 0.0.4, which vLLM, SGLang, TGI, llama.cpp and Triton serve, and its Prometheus 3
extension): `# HELP` / `# TYPE` and other `#` lines are skipped; each sample line is
`name{label="value",...} value [timestamp]`. As in Prometheus 3 (and prometheus_client), a metric or label name
that is not a legacy name is quoted, the metric name then inside the braces: `{"vllm.requests.waiting",
"model.name"="m"} 3`. Spaces and tabs may surround every token; a trailing comma in the braces is allowed.
Values are floats (`+Inf`, `-Inf`, `NaN`); the timestamp is in ms since the epoch, integer or fractional. Label
values and quoted names have their escapes resolved (`\\\\`, `\\"`, `\\n`; any other backslash stays). A line that
is none of these is an error naming its line number. tests/test_prometheus_text.py checks it against
prometheus_client's parser and its exposition test cases.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE = re.compile(r'\\[\\"n]')
_WS = " \t"
_FIELDS = re.compile("[ \t]+")


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


class _Line:
    """A cursor over one sample line."""

    def __init__(self, text: str, line_no: int):
        self.text, self.pos, self.line_no = text, 0, line_no

    def fail(self, why: str = "") -> PrometheusError:
        return PrometheusError(
            f"line {self.line_no}: not a Prometheus sample: {self.text[:80]!r}" + (f" ({why})" if why else "")
        )

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _WS:
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def name(self, pattern: re.Pattern) -> str | None:
        m = pattern.match(self.text, self.pos)
        if not m:
            return None
        self.pos = m.end()
        return m.group(0)

    def quoted(self) -> str:
        """The string starting at the opening quote under the cursor, escapes resolved."""
        start = self.pos + 1
        i = start
        while i < len(self.text):
            c = self.text[i]
            if c == "\\":
                i += 2
                continue
            if c == '"':
                self.pos = i + 1
                return _ESCAPE.sub(lambda e: _UNESCAPE[e.group(0)], self.text[start:i])
            i += 1
        raise self.fail("unterminated quoted string")


def _braces(cur: _Line) -> tuple[str | None, dict[str, str]]:
    """The metric name quoted inside the braces (or None) and the labels; the cursor is after the `{`."""
    name, labels, after_comma = None, {}, True
    while True:
        cur.skip_ws()
        c = cur.peek()
        if c == "}":
            cur.pos += 1
            return name, labels
        if c == ",":
            if after_comma and (labels or name is not None):
                raise cur.fail("two commas in the labels")
            cur.pos += 1
            after_comma = True
            continue
        if not after_comma:
            raise cur.fail("expected , or } after a label")
        if c == '"':
            term, quoted = cur.quoted(), True
        else:
            term, quoted = cur.name(_LABEL_NAME), False
            if term is None:
                raise cur.fail("bad labels")
        cur.skip_ws()
        if cur.peek() == "=":
            cur.pos += 1
            cur.skip_ws()
            if cur.peek() != '"':
                raise cur.fail(f"label {term!r} has no quoted value")
            value = cur.quoted()
            if term in labels:
                raise cur.fail(f"label {term!r} given twice")
            if term == "__name__":
                if name is not None:
                    raise cur.fail("the metric name given twice")
                name = value
            else:
                labels[term] = value
        elif quoted:
            if name is not None:
                raise cur.fail("the metric name given twice")
            name = term
        else:
            raise cur.fail(f"label {term!r} has no value")
        after_comma = False


def _number(text: str) -> float:
    if "_" in text:  # Python's float() takes 1_000; Prometheus does not
        raise ValueError(text)
    special = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    return special[text] if text in special else float(text)


def _sample(line: str, line_no: int) -> Sample:
    cur = _Line(line, line_no)
    name = None if line.startswith("{") else cur.name(_NAME)
    if name is None and not line.startswith("{"):
        raise cur.fail()
    cur.skip_ws()
    labels: dict[str, str] = {}
    if cur.peek() == "{":
        cur.pos += 1
        inner, labels = _braces(cur)
        if inner is not None and name is not None:
            raise cur.fail("the metric name given twice")
        name = name or inner
        if not name:
            raise cur.fail("no metric name")
    elif cur.pos == len(line) or line[cur.pos - 1] not in _WS:
        raise cur.fail()
    rest = _FIELDS.split(line[cur.pos :].strip(_WS))
    if not 1 <= len(rest) <= 2:
        raise cur.fail()
    try:
        value = _number(rest[0])
    except ValueError:
        raise PrometheusError(f"line {line_no}: bad sample value {rest[0]!r}") from None
    ts_ns = None
    if len(rest) == 2:
        try:
            # exact for fractional ms too: a float has no ns left at 1.7e18
            ts_ns = int(rest[1]) * 1_000_000 if rest[1].lstrip("-").isdigit() else int(Decimal(rest[1]) * 1_000_000)
        except (ValueError, OverflowError, ArithmeticError):
            raise PrometheusError(f"line {line_no}: bad timestamp {rest[1]!r}") from None
    return Sample(name, labels, value, ts_ns)


def parse(text: str) -> list[Sample]:
    """Every sample of a `/metrics` body; raises PrometheusError naming the first bad line."""
    out = []
    # Lines end at \n alone (a \r before it is dropped): str.splitlines() also splits at \v, \f, \x85 and
    # U+2028, which are text inside a quoted label value (found by fuzz/targets.py prometheus).
    for n, line in enumerate(text.split("\n"), 1):
        line = line.strip(" \t\r")
        if line and not line.startswith("#"):
            out.append(_sample(line, n))
    return out
