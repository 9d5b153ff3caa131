"""`budgetscope engine serve`: the reference engine behind an OpenAI-compatible server.

Nothing heavy at import: torch, starlette and uvicorn load inside the command.
"""

from __future__ import annotations

import logging

import click

CONFIG_NAMES = ("tiny", "small", "medium", "1b")


@click.group()
def engine():
    """The reference inference engine (PyTorch): paged KV, prefix cache, token-budget scheduler."""


@engine.command()
@click.option(
    "--config",
    "model",
    type=click.Choice(CONFIG_NAMES),
    default="tiny",
    show_default=True,
    help="Named random-weight model config (ignored with --checkpoint).",
)
@click.option(
    "--checkpoint",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Hugging Face-format folder: config.json, *.safetensors, tokenizer.json.",
)
@click.option("--served-model-name", default=None, help="Model name the API answers to.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--api-key",
    envvar="BUDGETSCOPE_API_KEY",
    default=None,
    help="Require 'Authorization: Bearer KEY' on /v1/* (as vllm serve --api-key); default "
    "$BUDGETSCOPE_API_KEY. /health and /metrics stay open.",
)
@click.option("--max-batched-tokens", type=int, default=512, show_default=True, help="Token budget of one step.")
@click.option("--max-seqs", type=int, default=32, show_default=True, help="Running sequences at once.")
@click.option("--kv-blocks", type=int, default=0, help="KV blocks in the cache (0: sized from --max-seqs).")
@click.option("--block-size", type=int, default=16, show_default=True, help="Tokens per KV block.")
@click.option("--max-model-len", type=int, default=2048, show_default=True, help="Prompt + output tokens.")
@click.option(
    "--max-waiting",
    type=int,
    default=256,
    show_default=True,
    help="Waiting-queue bound; beyond it requests get 429 (0: unbounded).",
)
@click.option("--max-prompt-tokens", type=int, default=0, help="Longer prompts get 400 (0: max-model-len - 1).")
@click.option("--max-output-tokens", type=int, default=0, help="Larger max_tokens get 400 (0: max-model-len - 1).")
@click.option("--request-timeout", type=float, default=0.0, help="Default per-request deadline, seconds (0: none).")
@click.option(
    "--deadline-admission/--no-deadline-admission",
    default=True,
    show_default=True,
    help="429 at once (with Retry-After) for a request with a deadline that the measured service rate "
    "says cannot start in time.",
)
@click.option("--no-chunked-prefill", is_flag=True, help="Schedule each prompt whole.")
@click.option("--no-prefix-caching", is_flag=True, help="Never reuse KV blocks across requests.")
@click.option(
    "--tier-priority",
    multiple=True,
    metavar="TIER=N",
    help="Scheduling priority of a tier, lower first (default interactive=0 default=1 batch=2).",
)
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:1 … (auto: cuda if present).")
@click.option(
    "--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), default="auto", show_default=True
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights.")
@click.option(
    "--threads",
    type=int,
    default=0,
    help="torch CPU threads (0: one fewer than the cores in the engine process, at least 1; all with "
    "--engine-in-process).",
)
@click.option(
    "--enforce-eager",
    is_flag=True,
    help="No CUDA graphs: run decode steps kernel by kernel (graphs are used on CUDA only).",
)
@click.option(
    "--compile",
    "compile_",
    is_flag=True,
    help="torch.compile the CUDA-graph decode step (fewer, fused kernels; a minute or more at start).",
)
@click.option(
    "--attention",
    type=click.Choice(["auto", "triton", "sdpa"]),
    default="auto",
    show_default=True,
    help="Attention: triton (one paged kernel a layer for every step; CUDA graphs for every step), sdpa "
    "(PyTorch gather + SDPA; graphs for decode-only steps). auto: triton on CUDA when it imports "
    "and without --compile, sdpa otherwise.",
)
@click.option(
    "--async-scheduling/--no-async-scheduling",
    default=None,
    help="Schedule and launch step N+1 before step N's sampled tokens are read back (their ids are read on the "
    "device), as vLLM V1 does. Default: on with a CUDA device in the engine process; off on a CPU and with "
    "--engine-in-process.",
)
@click.option(
    "--engine-in-process",
    is_flag=True,
    help="Step the engine on a thread of the server's process (the layout before the engine process; for "
    "comparison and debugging). Default: the engine runs in its own process.",
)
@click.option(
    "--instrument/--no-instrument",
    default=True,
    show_default=True,
    help="Emit budgetscope stage spans (exporter from OTEL_* variables or --exporter).",
)
@click.option("--exporter", default=None, help='Span exporter: "otlp", "console", "jsonl:PATH" (default: OTEL_*).')
@click.option("--log-level", default="info", show_default=True)
def serve(
    model,
    checkpoint,
    served_model_name,
    host,
    port,
    api_key,
    max_batched_tokens,
    max_seqs,
    kv_blocks,
    block_size,
    max_model_len,
    max_waiting,
    max_prompt_tokens,
    max_output_tokens,
    request_timeout,
    deadline_admission,
    no_chunked_prefill,
    no_prefix_caching,
    tier_priority,
    device,
    dtype,
    seed,
    threads,
    enforce_eager,
    compile_,
    attention,
    async_scheduling,
    engine_in_process,
    instrument,
    exporter,
    log_level,
):
    """Serve /v1/completions and /v1/chat/completions (OpenAI-compatible, SSE streaming), /v1/models,
    /health and /metrics. The engine (scheduler and model) runs in its own process; this one does HTTP, SSE,
    detokenization and span export. SIGTERM or Ctrl-C: the open requests finish, their spans are exported
    (within $BUDGETSCOPE_FLUSH_TIMEOUT_MS), both processes stop, and the server exits 0. If the engine process
    dies, requests in flight end with an error, later ones get 503, and the server exits 1.

    \b
    Example:
      budgetscope engine serve --config tiny --port 8000 --exporter jsonl:spans.jsonl
      BUDGETSCOPE_API_KEY=sk-... budgetscope engine serve --host 0.0.0.0   # beyond this machine
    """
    # `budgetscope --help` loads this module: the library loads when the command runs (budgetscope/commands/)
    from budgetscope.auth import exposure_warning
    from budgetscope.extras import require

    require("engine", "engine")  # here: with the engine in its own process, this one never imports torch itself
    # imported on use: uvicorn 467 ms, multiprocessing 37 ms, msgpack 26 ms to import
    from budgetscope.engine.core_client import EngineCoreError
    from budgetscope.engine.engine_config import DEFAULT_TIER_PRIORITIES, EngineConfig
    from budgetscope.engine.frontend import Frontend
    from budgetscope.engine.server import serve as run_server
    from budgetscope.engine.telemetry import Telemetry

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    priorities = dict(DEFAULT_TIER_PRIORITIES)
    for item in tier_priority:
        tier, sep, value = item.partition("=")
        if not sep or not value.lstrip("-").isdigit():
            raise click.BadParameter(f"{item!r} is not TIER=N", param_hint="--tier-priority")
        priorities[tier] = int(value)
    try:
        config = EngineConfig(
            model=model,
            checkpoint=checkpoint,
            served_model_name=served_model_name,
            seed=seed,
            device=device,
            dtype=dtype,
            max_model_len=max_model_len,
            block_size=block_size,
            num_kv_blocks=kv_blocks,
            max_num_batched_tokens=max_batched_tokens,
            max_num_seqs=max_seqs,
            enable_chunked_prefill=not no_chunked_prefill,
            enable_prefix_caching=not no_prefix_caching,
            max_waiting=max_waiting,
            max_prompt_tokens=max_prompt_tokens,
            max_output_tokens=max_output_tokens,
            request_timeout_s=request_timeout,
            deadline_admission=deadline_admission,
            tier_priorities=priorities,
            num_threads=threads,
            enforce_eager=enforce_eager,
            compile=compile_,
            attention_backend=attention,
            async_scheduling=async_scheduling,
        )
        telemetry = Telemetry.create(enabled=instrument, exporter=exporter)
        if engine_in_process:
            # imported on use: torch 5376 ms to import
            from budgetscope.engine.llm_engine import LLMEngine

            llm = LLMEngine(config, telemetry)
        else:  # the model loads in the engine process, when the server starts
            llm = Frontend(config, telemetry)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"budgetscope engine: {llm.model_name} on http://{host}:{port}", err=True)
    if instrument and not telemetry.is_exporting:
        click.echo(
            "budgetscope engine: spans go nowhere (set OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER "
            "or --exporter)",
            err=True,
        )
    if warning := exposure_warning(host, bool(api_key), False, "set --api-key or $BUDGETSCOPE_API_KEY"):
        click.echo(f"budgetscope engine: {warning}", err=True)
    try:
        run_server(llm, host=host, port=port, log_level=log_level.lower(), api_key=api_key or None)
    except EngineCoreError as exc:
        click.echo(f"budgetscope engine: {exc}", err=True)
        raise SystemExit(1) from None
