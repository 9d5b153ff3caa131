"""`LoadResult`: a run's per-request records and its summary (counts, percentiles, achieved rate).

Percentiles interpolate linearly between order statistics (`stats.quantile_linear`: DuckDB's `quantile_cont`,
numpy's default, what `vllm bench serve` prints). Latency figures cover the requests that succeeded; schedule lag
covers every request that was sent. The summary also carries `vllm bench serve`'s flat keys (`mean_ttft_ms`,
`median_tpot_ms`, `p99_e2el_ms`, ...; `VLLM_BENCH_FIGURES`) so scripts written for its JSON read ours.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

import orjson

from budgetscope.loadgen.plan import Plan
from budgetscope.loadgen.records import RequestRecord
from budgetscope.stats import quantile_linear

FIGURES = {
    # name: (anchor, what)
    "schedule_lag_ms": ("scheduled -> sent", "sent - scheduled; every sent request"),
    "client_ttft_ms": ("sent", "first token - sent"),
    "client_ttft_scheduled_ms": ("scheduled", "first token - scheduled"),
    "itl_ms": ("token -> token", "each gap between token events, all requests pooled"),
    "client_tpot_ms": ("sent", "(e2e - ttft) / (output tokens - 1), as vLLM"),
    "client_e2e_ms": ("sent", "response end - sent"),
    "client_e2e_scheduled_ms": ("scheduled", "response end - scheduled"),
}
"""Each client figure with its anchor. Percentiles of all but schedule lag are over successful requests."""
QUANTILES = (0.5, 0.9, 0.99)
VLLM_BENCH_FIGURES = {"ttft": "client_ttft_ms", "tpot": "client_tpot_ms", "itl": "itl_ms", "e2el": "client_e2e_ms"}
"""`vllm bench serve`'s short name of each figure (its keys: mean_/median_/std_/p99_<name>_ms)."""


def describe(values: list[float]) -> dict:
    """count, mean, p50, p90, p99, max of the non-NaN values (None where undefined)."""
    xs = sorted(v for v in values if not math.isnan(v))
    out: dict = {"count": len(xs), "mean": _r(sum(xs) / len(xs)) if xs else None}
    for q in QUANTILES:
        out[f"p{round(q * 100)}"] = _r(quantile_linear(xs, q)) if xs else None
    out["max"] = _r(xs[-1]) if xs else None
    return out


class LoadResult:
    """What a run produced. `unix0`: add to a record's perf_counter reading to get Unix-epoch ns."""

    def __init__(
        self,
        plan: Plan,
        records: list[RequestRecord],
        *,
        unix0: int,
        started_unix_nano: int,
        concurrency: int | None,
        target_url: str,
        prompt_lengths: dict | None = None,
        warmup_records: list[RequestRecord] | None = None,
        warmup: str = "none",
    ) -> None:
        self.plan = plan
        self.prompt_lengths = prompt_lengths or {"exact": False, "basis": "approximate"}
        """{"exact": whether planned prompt lengths are in the target's tokens, "basis": what they count}."""
        self.records = records
        """The measured requests; warm-up requests are apart, in `warmup_records`, and in no figure."""
        self.warmup_records = warmup_records or []
        self.warmup = warmup
        self.unix0 = unix0
        self.started_unix_nano = started_unix_nano
        self.concurrency = concurrency
        self.target_url = target_url

    def figure(self, name: str) -> list[float]:
        """The values of one figure of FIGURES, in ms."""
        if name == "schedule_lag_ms":
            return [r.schedule_lag_ms for r in self.records if r.sent_ns is not None]
        ok = [r for r in self.records if r.is_ok]
        if name == "itl_ms":
            return [gap for r in ok for gap in r.itl_ms]
        attr = {
            "client_ttft_ms": "ttft_ms",
            "client_ttft_scheduled_ms": "ttft_scheduled_ms",
            "client_tpot_ms": "tpot_ms",
            "client_e2e_ms": "e2e_ms",
            "client_e2e_scheduled_ms": "e2e_scheduled_ms",
        }[name]
        return [getattr(r, attr) for r in ok]

    def summary(self) -> dict:
        """Counts by outcome and HTTP status, rates, and each figure's distribution with its anchor."""
        recs = self.records
        sent = [r.sent_ns for r in recs if r.sent_ns is not None]
        ends = [r.end_ns for r in recs if r.end_ns is not None]
        ok = [r for r in recs if r.is_ok]
        send_span = (max(sent) - min(sent)) / 1e9 if len(sent) > 1 else 0.0
        run_span = (max(ends) - min(sent)) / 1e9 if sent and ends else 0.0
        out_tokens = sum(r.output_tokens or 0 for r in ok)
        figures = {}
        for name, (anchor, what) in FIGURES.items():
            figures[name] = {"anchor": anchor, "definition": what, **describe(self.figure(name))}
        return {
            "target": self.target_url,
            "plan": self.plan.description,
            "seed": self.plan.seed,
            "requests": len(recs),
            "sent": len(sent),
            "ok": len(ok),
            "concurrency": self.concurrency,
            "mode": "closed loop" if self.plan.is_closed_loop else "open loop",
            "warmup": {"rule": self.warmup, "requests": len(self.warmup_records)},
            "outcomes": dict(collections.Counter(r.outcome for r in recs).most_common()),
            "status_codes": {
                str(k): v
                for k, v in collections.Counter(
                    r.status if r.status is not None else "none" for r in recs
                ).most_common()
            },
            "planned_rate_rps": _r(self.plan.planned_rate or self.plan.rate),
            "plan_rate_rps": _r(self.plan.rate),
            "achieved_send_rate_rps": _r((len(sent) - 1) / send_span) if send_span > 0 else None,
            "ok_throughput_rps": _r(len(ok) / run_span) if run_span > 0 else None,
            "output_tokens_per_s": _r(out_tokens / run_span) if run_span > 0 else None,
            "duration_s": _r(run_span),
            "started_unix_nano": self.started_unix_nano,
            "prompt_tokens": self.prompt_tokens(),
            "figures": figures,
            **self.vllm_bench_keys(run_span, out_tokens),
        }

    def vllm_bench_keys(self, duration_s: float, output_tokens: int) -> dict:
        """`vllm bench serve --save-result`'s flat keys over the same figures (ms, linear percentiles; std is the
        population standard deviation, as numpy's): completed, throughputs, mean/median/std/p90/p99 of each."""
        ok = [r for r in self.records if r.is_ok]
        input_tokens = sum(r.input_tokens or 0 for r in ok)
        per_s = lambda x: _r(x / duration_s) if duration_s > 0 else None
        out: dict = {
            "completed": len(ok),
            "duration": _r(duration_s),
            "total_input_tokens": input_tokens,
            "total_output_tokens": output_tokens,
            "request_throughput": per_s(len(ok)),
            "output_throughput": per_s(output_tokens),
            "total_token_throughput": per_s(input_tokens + output_tokens),
        }
        for short, name in VLLM_BENCH_FIGURES.items():
            xs = sorted(v for v in self.figure(name) if not math.isnan(v))
            mean = sum(xs) / len(xs) if xs else math.nan
            out[f"mean_{short}_ms"] = _r(mean)
            out[f"median_{short}_ms"] = _r(quantile_linear(xs, 0.5))
            out[f"std_{short}_ms"] = _r(math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))) if xs else None
            for q in (0.9, 0.99):
                out[f"p{round(q * 100)}_{short}_ms"] = _r(quantile_linear(xs, q))
        return out

    def prompt_tokens(self) -> dict:
        """Prompt lengths as planned and as the server counted them (`usage.prompt_tokens`), over sent requests.
        Without the target's tokenizer the planned lengths are approximate: the server's count is the truth."""
        sent = [r for r in self.records if r.sent_ns is not None]
        reported = [r.input_tokens for r in sent if r.input_tokens is not None]
        return {
            "exact": bool(self.prompt_lengths.get("exact")),
            "basis": self.prompt_lengths.get("basis"),
            "planned": describe([float(r.prompt_tokens) for r in sent]),
            "server_counted": describe([float(n) for n in reported]),
        }

    def to_json(self) -> dict:
        """The summary and every request (times in Unix-epoch ns, figures in ms)."""
        every = sorted(self.warmup_records + self.records, key=lambda r: r.index)
        return {"summary": self.summary(), "requests": [r.to_dict(self.unix0) for r in every]}

    def write_json(self, path: str | Path) -> None:
        """Write `to_json()` to `path`."""
        Path(path).write_bytes(orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2))

    def table(self) -> str:
        """The end-of-run summary as plain text."""
        s = self.summary()
        lines = [
            f"target   {s['target']}",
            f"plan     {s['plan']}",
            f"requests {s['requests']}  sent {s['sent']}  ok {s['ok']}  "
            + "  ".join(f"{k} {v}" for k, v in s["outcomes"].items() if k != "ok")
            + (f"  (+{len(self.warmup_records)} warm-up, in no figure)" if self.warmup_records else ""),
            f"rate     planned {_f(s['planned_rate_rps'])}/s  achieved send {_f(s['achieved_send_rate_rps'])}/s  "
            f"ok throughput {_f(s['ok_throughput_rps'])}/s  output {_f(s['output_tokens_per_s'])} tok/s  "
            f"over {_f(s['duration_s'])} s",
            _prompt_line(s["prompt_tokens"]),
            "",
            f"{'figure (ms)':<26}{'anchor':<19}{'count':>7}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}",
        ]
        for name, fig in s["figures"].items():
            lines.append(
                f"{name:<26}{fig['anchor']:<19}{fig['count']:>7}"
                + "".join(f"{_f(fig[k]):>10}" for k in ("p50", "p90", "p99", "max"))
            )
        return "\n".join(lines)


def _prompt_line(p: dict) -> str:
    planned, counted = p["planned"], p["server_counted"]
    line = (
        f"prompts  {'exact' if p['exact'] else 'APPROXIMATE'} lengths ({p['basis']}): planned p50 "
        f"{_f(planned['p50'])} max {_f(planned['max'])} tokens"
    )
    if counted["count"]:
        line += (
            f"; the server counted p50 {_f(counted['p50'])} max {_f(counted['max'])} "
            f"(usage.prompt_tokens of {counted['count']} requests)"
        )
    else:
        line += "; the server reported no usage.prompt_tokens"
    return line


def _r(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else round(x, 4)


def _f(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"
