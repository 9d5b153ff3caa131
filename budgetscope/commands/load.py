"""`budgetscope load`: the CLI face of the load generator (registered in budgetscope/commands/)."""

from __future__ import annotations

import sys
import time

import click
import orjson

from budgetscope.commands.options import UsageError, format_option
from budgetscope.loadgen.errors import LoadgenError


class _Progress:
    """One live status line on stderr, only when stderr is a terminal."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.enabled = sys.stderr.isatty()
        self.start = time.monotonic()

    def __call__(self, runner) -> None:
        click.echo(
            f"\r  {time.monotonic() - self.start:6.1f} s  sent {runner.num_sent}/{self.total}  "
            f"in flight {runner.in_flight}  done {runner.num_finished}  errors {runner.num_errors}   ",
            err=True,
            nl=False,
        )

    def close(self) -> None:
        if self.enabled:
            click.echo("", err=True)


@click.command("load")
@click.argument("url")
@click.option(
    "--rate",
    type=float,
    help="Mean arrival rate, requests/s (not with --replay). Without it, --concurrency N runs a closed loop.",
)
@click.option("--arrivals", default="poisson", show_default=True, help="poisson | gamma:cv=C | constant.")
@click.option("--requests", "num_requests", type=int, help="Number of requests in the plan.")
@click.option("--duration", type=float, help="Plan length in seconds (arrivals due before it).")
@click.option(
    "--replay", type=click.Path(), help="Replay a JSON-lines trace (timestamp/offset, lengths, tier, tenant)."
)
@click.option("--time-scale", type=float, default=1.0, show_default=True, help="Replay speed-up factor.")
@click.option(
    "--prompt-tokens",
    default="128",
    show_default=True,
    help="Prompt length: N | uniform:LO,HI | lognormal:median=M,sigma=S[,max=B].",
)
@click.option("--output-tokens", default="64", show_default=True, help="max_tokens, same forms as --prompt-tokens.")
@click.option("--tiers", help="Tier mix, e.g. interactive=0.8,batch=0.2 (sent as header and body field).")
@click.option("--tenants", help="Tenant mix, e.g. acme=3,globex=1.")
@click.option("--shared-prefix", help="fraction=F,count=K,tokens=T: F of requests start with one of K prefixes.")
@click.option(
    "--prompt-format",
    type=click.Choice(["text", "token-ids"]),
    default="text",
    show_default=True,
    help="Synthetic words (~1 BPE token each; exact with --tokenizer) or exact token ids (completions API only).",
)
@click.option(
    "--tokenizer",
    type=click.Path(),
    help="The target model's tokenizer.json (or a folder holding one): "
    "prompts of exactly --prompt-tokens tokens, real dataset lengths.",
)
@click.option(
    "--dataset",
    type=click.Path(),
    help="Send real prompts from a ShareGPT-style JSON or a JSON-lines file, "
    "with their own lengths (arrivals from --rate).",
)
@click.option("--api", type=click.Choice(["auto", "completions", "chat"]), default="auto", show_default=True)
@click.option("--model", help="Model name for the body (default: the first of GET /v1/models, if any).")
@click.option(
    "--concurrency",
    type=int,
    help="With --rate: a cap on requests in flight (held-back requests show as "
    "schedule lag). Without: a closed loop of N requests in flight, each "
    "finish starting the next (after a 429's Retry-After).",
)
@click.option(
    "--warmup",
    help="Warm-up left out of every figure: N (the first N requests) or Ns (the first N "
    "seconds); counted within --requests/--duration.",
)
@click.option(
    "--retry-after/--no-retry-after",
    "honour_retry_after",
    default=True,
    show_default=True,
    help="Closed loop: after a 429/503 with Retry-After, that slot waits as told (at most 60 s) before its "
    "next request.",
)
@click.option(
    "--deadline/--no-deadline",
    "send_deadline",
    default=True,
    show_default=True,
    help="Send --timeout as x-budgetscope-deadline-ms, so the reference engine refuses at once (429, "
    "Retry-After) what it cannot start before the client gives up.",
)
@click.option("--connections", type=int, help="Keep-alive connections opened before the start.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the plan (arrivals, lengths, prompts).")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Per-request timeout, seconds.")
@click.option(
    "--ignore-eos/--no-ignore-eos",
    default=True,
    show_default=True,
    help="Ask the server to generate exactly max_tokens.",
)
@click.option(
    "--body-hints/--no-body-hints",
    default=True,
    show_default=True,
    help="Send ignore_eos and budgetscope_tier/_tenant in the body (headers are always sent).",
)
@click.option(
    "--stream/--no-stream",
    default=True,
    show_default=True,
    help="Ask for SSE streams; --no-stream gets one JSON response (client TTFT unknown), which is when "
    "TGI sends its x-*-time headers.",
)
@click.option(
    "--header",
    "-H",
    "headers",
    multiple=True,
    help="Extra request header 'Name: value' (repeatable). OPENAI_API_KEY, when set, is sent as "
    "'Authorization: Bearer …' unless a header gives Authorization.",
)
@click.option(
    "--spans",
    help="Client span exporter: otlp | jsonl:<path> | console | none "
    "(default: OTEL_TRACES_EXPORTER; unset: otlp when OTEL_EXPORTER_OTLP_ENDPOINT is set, "
    "else none).",
)
@click.option("--service-name", default="budgetscope-loadgen", show_default=True, help="service.name of client spans.")
@click.option(
    "--out",
    "out_path",
    type=click.Path(),
    help="Write per-request records and the summary as JSON, or the records as CSV when the name ends in .csv.",
)
@format_option(
    "table",
    "json",
    "csv",
    help="On stdout: the summary (table; json, which also has vllm bench's flat keys mean_ttft_ms, "
    "p99_tpot_ms, ...) or one CSV row a request (csv).",
)
@click.option("--dry-run", is_flag=True, help="Draw the plan, print what it holds, send nothing.")
def load(
    url,
    rate,
    arrivals,
    num_requests,
    duration,
    replay,
    time_scale,
    prompt_tokens,
    output_tokens,
    tiers,
    tenants,
    shared_prefix,
    prompt_format,
    tokenizer,
    dataset,
    api,
    model,
    concurrency,
    warmup,
    honour_retry_after,
    send_deadline,
    connections,
    seed,
    timeout,
    ignore_eos,
    body_hints,
    stream,
    headers,
    spans,
    service_name,
    out_path,
    fmt,
    dry_run,
) -> None:
    """Send an open-loop load to an OpenAI-compatible endpoint and report client TTFT, ITL, E2E and schedule lag.

    Requests are sent when the plan says, whatever the server does; schedule lag (sent - scheduled) shows
    any delay on the client side, including the --concurrency cap. With --concurrency and no --rate the
    load is a closed loop instead: N requests in flight, the next sent as one finishes. Each request carries
    a W3C traceparent whose parent is its `llm.client.request` span, so server spans join the client's trace.
    SIGTERM stops the run: the client spans of the finished requests are exported first, then exit 0.

    \b
      budgetscope load http://127.0.0.1:8000 --rate 20 --duration 60 --out results.json
      budgetscope load http://127.0.0.1:8000/v1/chat/completions --rate 5 --arrivals gamma:cv=3 \\
          --requests 500 --prompt-tokens lognormal:median=512,sigma=0.6 --tiers interactive=0.8,batch=0.2 \\
          --shared-prefix fraction=0.5,count=4,tokens=256 --spans jsonl:client.jsonl
      budgetscope load http://127.0.0.1:8000 --replay trace.jsonl --time-scale 2
      budgetscope load http://127.0.0.1:8000 --concurrency 8 --duration 60 --warmup 10s --out records.csv
      budgetscope load http://127.0.0.1:8000 --rate 10 --requests 200 --dataset sharegpt.json --tokenizer MODEL_DIR
      OPENAI_API_KEY=sk-… budgetscope load https://api.example.com/v1 --rate 1 --requests 20 --model m
    """
    from budgetscope.extras import MissingExtra
    from budgetscope.instrument.client import ClientTracer
    from budgetscope.instrument.process_exit import Terminated
    from budgetscope.loadgen import Distribution, Mix, Prompts, SharedPrefix, Target, Workload, run_load
    from budgetscope.loadgen.options import check_out_path, load_plan, plan_lines, request_headers, write_out
    from budgetscope.loadgen.warmup import Warmup

    try:
        tok = None
        if tokenizer:
            from budgetscope.loadgen.tokenizer import TargetTokenizer

            tok = TargetTokenizer(tokenizer)
        workload = Workload(
            Distribution.parse(prompt_tokens),
            Distribution.parse(output_tokens),
            Mix.parse(tiers),
            Mix.parse(tenants),
            SharedPrefix.parse(shared_prefix),
        )
        plan = load_plan(
            workload,
            rate=rate,
            arrivals=arrivals,
            num_requests=num_requests,
            duration_s=duration,
            replay=replay,
            time_scale=time_scale,
            concurrency=concurrency,
            seed=seed,
            dataset=dataset,
            tokenizer=tok,
        )
        warm = Warmup.parse(warmup)
        check_out_path(out_path)
        target = Target(
            url,
            api=api,
            model=model,
            ignore_eos=ignore_eos,
            body_hints=body_hints,
            headers=request_headers(headers, send_deadline=send_deadline, timeout_s=timeout),
            stream=stream,
        )
        if prompt_format == "token-ids" and target.api == "chat":
            raise LoadgenError("--prompt-format token-ids needs the completions API")
        if dry_run:
            click.echo("\n".join(plan_lines(plan)))
            return
        tracer = ClientTracer(service_name=service_name, exporter=spans)
        try:
            probed = target.probe()
        except LoadgenError:
            tracer.shutdown()
            raise
        target.model = model or probed
    except (LoadgenError, ValueError, TypeError, ImportError, MissingExtra) as err:
        raise UsageError(str(err)) from None
    size = f"{duration:g} s" if plan.more is not None else f"{len(plan)} requests"
    click.echo(f"budgetscope load: {size} to {target.url} - {plan.description}", err=True)
    progress = _Progress(len(plan))
    try:
        result = run_load(
            plan,
            target,
            concurrency=concurrency,
            connections=connections,
            tracer=tracer,
            timeout_s=timeout,
            prompts=Prompts(seed, token_ids=prompt_format == "token-ids", tokenizer=tok),
            on_progress=progress if progress.enabled else None,
            warmup=warm,
            duration_s=duration if plan.is_closed_loop else None,
            honour_retry_after=honour_retry_after,
        )
    except LoadgenError as err:
        raise UsageError(str(err)) from None
    except Terminated:  # SIGTERM: the handler exported the spans of every finished request
        click.echo("budgetscope load: stopped by SIGTERM", err=True)
        return
    finally:
        progress.close()
        tracer.shutdown()
    if tracer.dropped_requests:
        click.echo(f"budgetscope: {tracer.dropped_requests} client spans dropped (export queue full)", err=True)
    if out_path:
        write_out(result, out_path)
    if fmt == "csv":
        from budgetscope.loadgen.records_csv import write_csv

        write_csv(result, sys.stdout)
    elif fmt == "json":
        click.echo(orjson.dumps(result.summary(), option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(result.table())
