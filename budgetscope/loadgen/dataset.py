"""Real prompts for a plan (`budgetscope load --dataset FILE`): a ShareGPT-style JSON file or JSON lines.

Accepted records (one JSON array of them, or one a line; blank and `#` lines skipped):

- ShareGPT: `{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}, ...]}`
  (`role`/`content` keys too): the first human turn is the prompt, the reply after it gives the output length;
- `{"prompt": "...", ...}` (or `text`, `input`), with the output length from `output_tokens` / `max_tokens`, or
  from the text of `completion` / `response` / `output`;
- OpenAI chat: `{"messages": [{"role": "user", "content": "..."}, ...]}`: the first user message.

Records without a prompt, or with an empty one, are skipped (counted). Lengths are real: each prompt is sent as
it is, and its length in tokens is counted with the target's tokenizer when `--tokenizer` is given, else
estimated (4 characters a token, the usual rule for English; the run summary says so and reports what the
server counted). Requests take the records in an order shuffled by the seed, from the start again when the plan
has more requests than the file has records.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import orjson

from budgetscope.loadgen.errors import LoadgenError
from budgetscope.loadgen.plan import Plan

_HUMAN = {"human", "user"}
_MODEL = {"gpt", "assistant", "model", "chatgpt", "bard"}
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class DatasetPrompt:
    prompt: str
    prompt_tokens: int
    output_tokens: int | None
    """The reply's length (or the record's own figure); None when the record gives none."""


@dataclass(slots=True)
class Dataset:
    path: str
    prompts: list[DatasetPrompt]
    skipped: int
    exact: bool
    """Lengths counted by the target's tokenizer (else estimated)."""


def _turns(turns: list, n: str) -> tuple[str | None, str | None]:
    prompt = reply = None
    for t in turns:
        if not isinstance(t, dict):
            raise LoadgenError(f"{n}: a conversation turn is not an object")
        who = str(t.get("from", t.get("role", ""))).lower()
        text = t.get("value", t.get("content"))
        if not isinstance(text, str):
            continue
        if prompt is None and who in _HUMAN:
            prompt = text
        elif prompt is not None and who in _MODEL:
            reply = text
            break
    return prompt, reply


def _record(rec, n: str) -> tuple[str | None, str | None, int | None]:
    if not isinstance(rec, dict):
        raise LoadgenError(f"{n}: a record is a JSON object, got {type(rec).__name__}")
    if isinstance(rec.get("conversations"), list):
        prompt, reply = _turns(rec["conversations"], n)
        return prompt, reply, None
    if isinstance(rec.get("messages"), list):
        prompt, reply = _turns(rec["messages"], n)
        return prompt, reply, _int(rec, ("output_tokens", "max_tokens"), n)
    prompt = next((rec[k] for k in ("prompt", "text", "input") if isinstance(rec.get(k), str)), None)
    reply = next((rec[k] for k in ("completion", "response", "output") if isinstance(rec.get(k), str)), None)
    return prompt, reply, _int(rec, ("output_tokens", "max_tokens"), n)


def _int(rec: dict, keys: tuple[str, ...], n: str) -> int | None:
    for k in keys:
        if k in rec and rec[k] is not None:
            v = rec[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise LoadgenError(f"{n}: {k} must be a positive integer, got {v!r}")
            return v
    return None


def _records(path: Path):
    """(position, record) of a JSON array file or a JSON-lines file."""
    data = path.read_bytes()
    if data.lstrip()[:1] == b"[":
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise LoadgenError(f"{path}: not JSON ({e})") from None
        for i, rec in enumerate(doc):
            yield f"{path}: record {i}", rec
        return
    for no, line in enumerate(data.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith(b"#"):
            continue
        try:
            yield f"{path}:{no}", orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise LoadgenError(f"{path}:{no}: not JSON ({e})") from None


def read_dataset(path: str | Path, tokenizer=None) -> Dataset:
    """The prompts of a dataset file, with their lengths (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise LoadgenError(f"{path}: no such dataset file")
    count = tokenizer.count if tokenizer is not None else (lambda t: max(1, round(len(t) / CHARS_PER_TOKEN)))
    prompts, skipped = [], 0
    for n, rec in _records(p):
        prompt, reply, out = _record(rec, n)
        if not prompt or not prompt.strip():
            skipped += 1
            continue
        if out is None and reply:
            out = count(reply)
        prompts.append(DatasetPrompt(prompt, count(prompt), out))
    if not prompts:
        raise LoadgenError(f"{path}: no prompts in it ({skipped} records without one)")
    return Dataset(str(path), prompts, skipped, tokenizer is not None)


def apply_dataset(plan: Plan, dataset: Dataset) -> Plan:
    """Give each planned request a prompt of the dataset (seeded order; output length from the record when it
    has one, else the plan's draw)."""
    order = list(range(len(dataset.prompts)))
    random.Random(f"{plan.seed}/dataset").shuffle(order)

    def give(requests: list) -> list:
        for req in requests:
            d = dataset.prompts[order[req.index % len(order)]]
            req.prompt, req.prompt_tokens, req.prefix_id, req.prefix_tokens = d.prompt, d.prompt_tokens, -1, 0
            if d.output_tokens is not None:
                req.output_tokens = d.output_tokens
        return requests

    give(plan.requests)
    if plan.more is not None:  # a closed loop that grows: its later requests take the dataset's prompts too
        draw = plan.more
        plan.more = lambda k: give(draw(k))
    lengths = "exact lengths" if dataset.exact else "estimated lengths"
    plan.description += f"; prompts from {dataset.path} ({len(dataset.prompts)} records, {lengths})"
    plan.meta["dataset"] = {
        "path": dataset.path,
        "records": len(dataset.prompts),
        "skipped": dataset.skipped,
        "exact_lengths": dataset.exact,
    }
    plan.meta["prompt_lengths"] = {
        "exact": dataset.exact,
        "basis": "the dataset's prompts, counted by the target's tokenizer"
        if dataset.exact
        else f"the dataset's prompts, estimated at {CHARS_PER_TOKEN} characters a token (give --tokenizer for "
        "exact lengths)",
    }
    return plan
