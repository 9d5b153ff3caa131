"""The Prometheus text parser (budgetscope/sources/prometheus.py) on the exposition cases prometheus_client's own
parser is tested with — Prometheus 3 quoted UTF-8 names, float timestamps, spaces, tabs, commas, escapes — and
sample for sample against prometheus_client itself."""

from __future__ import annotations

import math

import pytest

from budgetscope.sources.prometheus import PrometheusError, parse

S = 1_000_000  # ns in a ms

CASES = {
    # name: (text, [(metric, labels, value, ts_ns)])
    "simple counter": ("# TYPE a counter\n# HELP a help\na 1\n", [("a", {}, 1, None)]),
    "utf8 counter": ('# TYPE "a.b" counter\n# HELP "a.b" help\n{"a.b"} 1\n', [("a.b", {}, 1, None)]),
    "prometheus 3 name and labels": (
        '{"vllm.requests.waiting", model_name="m"} 3\n',
        [("vllm.requests.waiting", {"model_name": "m"}, 3, None)],
    ),
    "quoted label name": ('{"a.b", "model.name"="m", x="y"} 3\n', [("a.b", {"model.name": "m", "x": "y"}, 3, None)]),
    "__name__ label": ('{__name__="a", x="y"} 3\n', [("a", {"x": "y"}, 3, None)]),
    "complex utf8 name": (
        '# TYPE "my.counter{} # = \\" \\n" counter\n'
        '{"my.counter{} # = \\" \\n", "awful. }}{{ # HELP EOF name"="\\n yikes } \\" value"} 1\n',
        [('my.counter{} # = " \n', {"awful. }}{{ # HELP EOF name": '\n yikes } " value'}, 1, None)],
    ),
    "gauge": ("# TYPE a gauge\n# HELP a help\na 1\n", [("a", {}, 1, None)]),
    "summary": (
        '# TYPE a summary\na_count 1\na_sum 2\na{quantile="0.5"} 0.7\n',
        [("a_count", {}, 1, None), ("a_sum", {}, 2, None), ("a", {"quantile": "0.5"}, 0.7, None)],
    ),
    "histogram": (
        '# TYPE a histogram\na_bucket{le="1"} 0\na_bucket{le="+Inf"} 3\na_count 3\na_sum 2\n',
        [
            ("a_bucket", {"le": "1"}, 0, None),
            ("a_bucket", {"le": "+Inf"}, 3, None),
            ("a_count", {}, 3, None),
            ("a_sum", {}, 2, None),
        ],
    ),
    "no metadata": ("a 1\n", [("a", {}, 1, None)]),
    "untyped": (
        '# TYPE r untyped\nr{instance="w",port="6380"} 10.0\nr{instance="w",port="6381"} 12.0\n',
        [("r", {"instance": "w", "port": "6380"}, 10, None), ("r", {"instance": "w", "port": "6381"}, 12, None)],
    ),
    "comments": ("\n# TYPE a counter\n# FOO a\n# BAR b\n# 3565 12345/4436467 x\n\na 1\n", [("a", {}, 1, None)]),
    "extra whitespace": ("# TYPE  a  counter\na  1\n", [("a", {}, 1, None)]),
    "tabs": ("#\tTYPE\ta\tcounter\na\t1\n", [("a", {}, 1, None)]),
    "curly braces in values": ('a{foo="bar", bar="b{a}z"} 1\n', [("a", {"foo": "bar", "bar": "b{a}z"}, 1, None)]),
    "infinities": (
        'a{foo="bar"} +Inf\na{foo="baz"} -Inf\n',
        [("a", {"foo": "bar"}, math.inf, None), ("a", {"foo": "baz"}, -math.inf, None)],
    ),
    "spaces": (
        'a{ foo = "bar" } 1\na\t\t{\t\tfoo\t\t=\t\t"baz"\t\t}\t\t2\na   {    foo   =  "buz"   }    3\n'
        'a\t {  \t foo\t = "biz"\t  } \t 4\na \t{\t foo   = "boz"\t}\t 5\na{foo="bez"}6\n',
        [("a", {"foo": v}, i, None) for i, v in enumerate(["bar", "baz", "buz", "biz", "boz", "bez"], 1)],
    ),
    "commas": (
        'a{foo="bar",} 1\na{foo="baz",  } 1\nb{,} 2\nc{  ,} 3\nd{,  } 4\n',
        [
            ("a", {"foo": "bar"}, 1, None),
            ("a", {"foo": "baz"}, 1, None),
            ("b", {}, 2, None),
            ("c", {}, 3, None),
            ("d", {}, 4, None),
        ],
    ),
    "empty braces": ("a{} 1\n", [("a", {}, 1, None)]),
    "empty label value": (
        'a{foo="bar"} 1\na{foo=""} 2\n',
        [("a", {"foo": "bar"}, 1, None), ("a", {"foo": ""}, 2, None)],
    ),
    "escapes": (
        'a{foo="b\\"a\\nr"} 1\na{foo="b\\\\a\\z"} 2\n',
        [("a", {"foo": 'b"a\nr'}, 1, None), ("a", {"foo": "b\\a\\z"}, 2, None)],
    ),
    "timestamps": (
        'a{foo="bar"} 1\t000\nb 2  1234567890\nb 88   1234566000   \n',
        [("a", {"foo": "bar"}, 1, 0), ("b", {}, 2, 1234567890 * S), ("b", {}, 88, 1234566000 * S)],
    ),
    "float timestamps": (
        "a 1 1700000000123.5\nb 2 1.7e12\n",
        [("a", {}, 1, 1700000000123_500_000), ("b", {}, 2, 1_700_000_000_000 * S)],
    ),
    "negative timestamp": ("a 1 -1000\n", [("a", {}, 1, -1000 * S)]),
    "vllm": (
        'vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.0\n'
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="Qwen/Qwen3-0.6B"} 0.0\n',
        [
            ("vllm:num_requests_waiting", {"engine": "0", "model_name": "Qwen/Qwen3-0.6B"}, 0, None),
            (
                "vllm:time_to_first_token_seconds_bucket",
                {"engine": "0", "le": "0.001", "model_name": "Qwen/Qwen3-0.6B"},
                0,
                None,
            ),
        ],
    ),
}

LABEL_ESCAPES = [
    ("foo", "foo"),
    ("\\foo", "\\foo"),
    ("\\\\foo", "\\foo"),
    ("foo\\\\", "foo\\"),
    ("\\\\", "\\"),
    ("\\n", "\n"),
    ("\\\\n", "\\n"),
    ("\\\\\\n", "\\\n"),
    ('\\"', '"'),
    ('\\\\\\"', '\\"'),
]

BAD = {
    "two trailing commas": 'a{foo="bar",, } 1',
    "unterminated labels": 'a{foo="bar" 1',
    "unquoted value": "a{foo=bar} 1",
    "unquoted utf8 name": "a.b 1",
    "name twice": 'a{"b"} 1',
    "label twice": 'a{x="1",x="2"} 1',
    "no value": "a",
    "no space before value": "a1",
    "bad value": "a one",
    "underscore in value": "a 1_000",
    "three fields": "a 1 2 3",
    "bad timestamp": "a 1 soon",
    "unterminated quote": '{"a.b} 1',
    "no name at all": '{x="y"} 1',
}


def _tuples(samples) -> list[tuple]:
    return [(s.metric, s.labels, s.value, s.ts_ns) for s in samples]


@pytest.mark.parametrize("name", list(CASES))
def test_exposition_cases(name):
    text, expected = CASES[name]
    assert _tuples(parse(text)) == expected


@pytest.mark.parametrize("escaped, value", LABEL_ESCAPES)
def test_label_value_escapes(escaped, value):
    assert _tuples(parse(f'a{{foo="{escaped}",bar="baz"}} 1\n')) == [("a", {"foo": value, "bar": "baz"}, 1, None)]


def test_nan():
    (s,) = parse("a NaN\n")
    assert math.isnan(s.value)


@pytest.mark.parametrize("name", list(BAD))
def test_bad_lines_name_their_line(name):
    with pytest.raises(PrometheusError, match=r"^line 2: "):
        parse("ok 1\n" + BAD[name] + "\n")


def test_same_samples_as_prometheus_client():
    """Every case, through prometheus_client's parser: the same names, labels, values and timestamps.
    prometheus_client renames a counter sample without `_total` (OpenMetrics style); budgetscope keeps the
    server's own name, so `_total` is set aside on both sides for counters."""
    parser = pytest.importorskip("prometheus_client.parser")
    for name, (text, _) in CASES.items():
        theirs = []
        for family in parser.text_string_to_metric_families(text):
            for s in family.samples:
                metric = s.name.removesuffix("_total") if family.type == "counter" else s.name
                ts = None if s.timestamp is None else round(float(s.timestamp) * 1e6)  # µs: a float holds no more
                theirs.append((metric, s.labels, s.value, ts))
        ours = [
            (
                m.removesuffix("_total") if m in _counters(text) else m,
                labels,
                v,
                None if ts is None else round(ts / 1000),
            )
            for m, labels, v, ts in _tuples(parse(text))
        ]
        assert _sorted(ours) == _sorted(theirs), name


def _counters(text: str) -> set[str]:
    out = set()
    for line in text.splitlines():
        parts = line.replace("\t", " ").split()
        if len(parts) == 4 and parts[:2] == ["#", "TYPE"] and parts[3] == "counter":
            name = parts[2].strip('"')
            out |= {name, name + "_total"}
    return out


def _sorted(samples):
    return sorted(samples, key=lambda t: (t[0], sorted(t[1].items()), repr(t[2]), repr(t[3])))
