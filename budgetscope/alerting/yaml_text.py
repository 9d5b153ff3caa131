"""YAML text of plain data (dicts, lists, strings, numbers, booleans), for the Prometheus files `budgetscope rules`
writes: block style, every string double-quoted as JSON writes it (a valid YAML double-quoted scalar), so that
PromQL and Go templates need no other escaping. No dependency: PyYAML is not one of budgetscope's."""

from __future__ import annotations

import json


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v), ensure_ascii=False)


def _lines(v, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(v, dict):
        if not v:
            return [pad + "{}"]
        out = []
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                out.append(f"{pad}{_scalar(k) if not str(k).isidentifier() else k}:")
                out += _lines(x, indent + 2)
            else:
                out.append(f"{pad}{_scalar(k) if not str(k).isidentifier() else k}: {_inline(x)}")
        return out
    if isinstance(v, list):
        if not v:
            return [pad + "[]"]
        out = []
        for x in v:
            sub = _lines(x, indent + 2)
            out.append(f"{pad}- {sub[0].lstrip()}")
            out += sub[1:]
        return out
    return [pad + _scalar(v)]


def _inline(v) -> str:
    if isinstance(v, dict):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return _scalar(v)


def dump(doc, header: str = "") -> str:
    """`doc` as YAML; `header` (lines) as comments above it."""
    comments = [f"# {line}".rstrip() for line in header.splitlines()]
    return "\n".join([*comments, *_lines(doc, 0)]) + "\n"
