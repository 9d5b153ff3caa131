"""`budgetscope sweep`: the CLI face of the capacity sweep (registered in budgetscope/commands/)."""

from __future__ import annotations

import json

import click

from budgetscope.commands.options import UsageError, format_option


@click.command("sweep")
@click.argument("url")
@click.option("--budgets", "-b", required=True, type=click.Path(), help="Budgets TOML with at least one tier.")
@click.option(
    "--archive",
    "-a",
    required=True,
    type=click.Path(),
    help="Folder archive the sweep's collector writes (created if missing; an existing one is added to).",
)
@click.option("--rates", help="Offered rates, requests/s, increasing: 1,2,4,6,8,12.")
@click.option(
    "--concurrency",
    "concurrencies",
    help="Closed-loop steps instead of rates: requests in flight, increasing: 1,2,4,8.",
)
@click.option(
    "--search",
    is_flag=True,
    help="Find each tier's capacity: double from --start-rate until a rate breaks every budget, then bisect.",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    help="Seconds of each step (open-loop arrivals, or closed-loop sends).",
)
@click.option(
    "--repeats",
    "--runs",
    "runs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs of each rate (or concurrency); with 2 or more, the capacity each repeat finds alone and a 95% interval.",
)
@click.option("--warmup", help="Warm-up of each step, left out of its figures: N (requests) or Ns (seconds).")
@click.option(
    "--start-rate",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="--search: the first rate.",
)
@click.option(
    "--max-rate",
    type=click.FloatRange(min=0, min_open=True),
    default=256.0,
    show_default=True,
    help="--search: never above this rate.",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.1,
    show_default=True,
    help="--search: stop when each capacity is bracketed within this share of the rate.",
)
@click.option(
    "--max-steps", type=click.IntRange(min=1), default=12, show_default=True, help="--search: at most this many rates."
)
@click.option(
    "--attainment",
    "target_attainment",
    type=click.FloatRange(0, 1),
    default=None,
    help="A tier keeps its budgets at a rate when its report keeps them and at least this share of its "
    "requests meet every SLO (default: the tier's percentile / 100).",
)
@click.option("--arrivals", default="poisson", show_default=True, help="poisson | gamma:cv=C | constant.")
@click.option("--prompt-tokens", default="128", show_default=True, help="Prompt length, as `budgetscope load`.")
@click.option("--output-tokens", default="64", show_default=True, help="max_tokens, as `budgetscope load`.")
@click.option("--tiers", help="Tier mix, e.g. interactive=0.8,batch=0.2 (default: the budgets' tiers, equally).")
@click.option("--prompt-format", type=click.Choice(["text", "token-ids"]), default="text", show_default=True)
@click.option(
    "--tokenizer",
    type=click.Path(),
    help="The target model's tokenizer.json (or its folder), as `budgetscope load`: exact prompt lengths.",
)
@click.option(
    "--dataset",
    type=click.Path(),
    help="Real prompts from a ShareGPT-style JSON or JSON-lines file, as `budgetscope load`.",
)
@click.option(
    "--plots",
    "plots_dir",
    type=click.Path(file_okay=False),
    help="Also write each tier's capacity chart as a self-contained HTML file in this folder (needs the "
    "'dashboard' extra's plotly).",
)
@click.option("--api", type=click.Choice(["auto", "completions", "chat"]), default="auto", show_default=True)
@click.option("--model", help="Model name for the body (default: the first of GET /v1/models).")
@click.option("--header", "-H", "headers", multiple=True, help="Extra request header 'Name: value' (repeatable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the plans (step i uses seed + i).")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Per-request client timeout, seconds; also sent as the request's deadline.",
)
@click.option(
    "--deadline/--no-deadline",
    default=True,
    show_default=True,
    help="Send --timeout as x-budgetscope-deadline-ms (the reference engine's deadline header).",
)
@click.option(
    "--otlp-port",
    type=click.IntRange(0, 65535),
    default=4318,
    show_default=True,
    help="OTLP/HTTP port of the sweep's collector on 127.0.0.1 (0: a free one); servers exporting here "
    "join their stages.",
)
@click.option(
    "--otlp-grpc-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Also receive OTLP/gRPC on this port (vLLM's exporter default is gRPC :4317).",
)
@click.option(
    "--settle",
    type=click.FloatRange(min=1),
    default=20.0,
    show_default=True,
    help="At most this many seconds after a step for its spans to land.",
)
@click.option(
    "--scrape/--no-scrape",
    default=True,
    show_default=True,
    help="Scrape the target's /metrics once a second during each step (saturation signals).",
)
@format_option("table", "json")
def sweep(
    url,
    budgets,
    archive,
    rates,
    concurrencies,
    search,
    duration,
    runs,
    warmup,
    start_rate,
    max_rate,
    tolerance,
    max_steps,
    target_attainment,
    arrivals,
    prompt_tokens,
    output_tokens,
    tiers,
    prompt_format,
    tokenizer,
    dataset,
    plots_dir,
    api,
    model,
    headers,
    seed,
    timeout,
    deadline,
    otlp_port,
    otlp_grpc_port,
    settle,
    scrape,
    fmt,
) -> None:
    """Find the rate (or concurrency) at which each tier's budgets break, and which stage makes the cliff.

    Each step is an open-loop run of the load generator at one offered rate (with --concurrency: a closed loop
    of that many requests in flight); its client spans go into the
    archive through the sweep's own collector, tagged with the run, step and rate, and a server exporting to
    that collector joins its stages. Per rate: attainment, pXX TTFT/TPOT/E2E, each stage's share of the tail
    (the attribution of `report`) and the server's saturation signals. Then each tier's capacity, the knee,
    and the stage that takes over past it. Exit 0 when the sweep ran, 2 on bad input (archive unchanged).
    SIGTERM stops it: the client spans of the finished requests are landed first, then exit 0.

    \b
      budgetscope sweep http://127.0.0.1:8000 --budgets budgets.toml --rates 1,2,4,6,8,12 --duration 60 --archive cap/
      budgetscope sweep http://127.0.0.1:8000 --budgets budgets.toml --search --repeats 3 --archive cap/
      budgetscope sweep http://127.0.0.1:8000 --budgets budgets.toml --concurrency 1,2,4,8 --warmup 5s \\
          --dataset sharegpt.json --tokenizer MODEL_DIR --plots cap-plots/ --archive cap/
    """
    from budgetscope.analysis.budgets import BudgetError, load_budgets
    from budgetscope.analysis.capacity_render import render_text
    from budgetscope.extras import MissingExtra, require
    from budgetscope.instrument.process_exit import Terminated
    from budgetscope.loadgen import Distribution, LoadgenError, Mix, Workload
    from budgetscope.loadgen.options import parse_header
    from budgetscope.loadgen.warmup import Warmup
    from budgetscope.sweep.runner import Sweep, SweepConfig, SweepError, parse_concurrencies, parse_rates

    try:
        if sum(map(bool, (rates, concurrencies, search))) != 1:
            raise SweepError("give --rates R1,R2,…, --concurrency C1,C2,… or --search (one of them)")
        if plots_dir:
            require("dashboard", "sweep --plots", modules=("plotly",))
        rate_list = parse_rates(rates) if rates else None
        levels = parse_concurrencies(concurrencies) if concurrencies else None
        if levels and arrivals != "poisson":
            raise SweepError("--arrivals shapes open-loop rates; a --concurrency sweep has no arrival process")
        tok, data = _prompts_source(tokenizer, dataset)
        b = load_budgets(budgets)
        mix = tiers or ",".join(f"{tb.name}=1" for tb in b.tiers)
        workload = Workload(Distribution.parse(prompt_tokens), Distribution.parse(output_tokens), Mix.parse(mix))
        extra = dict(parse_header(h) for h in headers)
        config = SweepConfig(
            url=url,
            archive=archive,
            budgets=b,
            rates=rate_list,
            concurrencies=levels,
            search=search,
            start_rate=start_rate,
            max_rate=max_rate,
            tolerance=tolerance,
            max_steps=max_steps,
            runs=runs,
            duration_s=duration,
            arrivals=arrivals,
            workload=workload,
            seed=seed,
            timeout_s=timeout,
            send_deadline=deadline,
            api=api,
            model=model,
            headers=extra,
            token_ids=prompt_format == "token-ids",
            otlp_port=otlp_port,
            otlp_grpc_port=otlp_grpc_port,
            settle_s=settle,
            scrape_metrics=scrape,
            target_attainment=target_attainment,
            warmup=Warmup.parse(warmup),
            tokenizer=tok,
            dataset=data,
        )
        from budgetscope.loadgen import Arrivals

        Arrivals.parse(arrivals, 1.0)  # a bad spec fails here, before anything is sent
        res = Sweep(config, say=lambda line: click.echo(line, err=True)).run()
    except (SweepError, BudgetError, LoadgenError, ValueError, MissingExtra) as e:
        raise UsageError(str(e)) from None
    except Terminated:  # SIGTERM: the client spans were flushed, the collector landed them on the way out
        click.echo(f"budgetscope sweep: stopped by SIGTERM; the steps run so far are in {archive}", err=True)
        return
    if plots_dir:
        from budgetscope.analysis.capacity_charts import write_html

        for path in write_html(res, plots_dir):
            click.echo(f"budgetscope sweep: wrote {path}", err=True)
    if fmt == "json":
        click.echo(json.dumps(_clean(res), indent=2, allow_nan=False, default=str))
    else:
        click.echo(render_text(res), nl=False)


def _prompts_source(tokenizer: str | None, dataset: str | None):
    """The tokenizer and dataset of --tokenizer/--dataset (None where not given), read before anything is sent."""
    tok = data = None
    if tokenizer:
        from budgetscope.loadgen.tokenizer import TargetTokenizer

        tok = TargetTokenizer(tokenizer)
    if dataset:
        from budgetscope.loadgen.dataset import read_dataset

        data = read_dataset(dataset, tok)
    return tok, data


def _clean(x):
    """NaN and infinities as null (the JSON has no such numbers), tuples as lists."""
    if isinstance(x, float):
        return x if x == x and abs(x) != float("inf") else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x
