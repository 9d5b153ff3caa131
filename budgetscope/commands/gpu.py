"""`budgetscope gpu`: the GPU sampler from the command line (light: NVML is imported only when sampling)."""

from __future__ import annotations

import time

import click

from budgetscope.commands.options import period_s


@click.group()
def gpu() -> None:
    """GPU samples (HBM, memory activity, DRAM bandwidth, power, clocks) from NVML, as OTLP gauges."""


@gpu.command()
@click.option("--every", default="100ms", show_default=True, help="Sampling period (e.g. 100ms, 0.5s).")
@click.option(
    "--out",
    "out",
    default=None,
    metavar="jsonl:PATH",
    help="Append OTLP/JSON metrics exports to PATH (read by `budgetscope ingest`).",
)
@click.option("--otlp", is_flag=True, help="Export with the OTLP metric exporter (OTEL_EXPORTER_OTLP_* env).")
@click.option("--duration", default=None, help="Stop after this long (e.g. 60s); default: until Ctrl-C.")
def sample(every: str, out: str | None, otlp: bool, duration: str | None) -> None:
    """Sample every GPU until stopped (Ctrl-C, SIGTERM or --duration); each point keeps its own timestamp.
    On SIGTERM the buffered points are exported first (within $BUDGETSCOPE_FLUSH_TIMEOUT_MS), then exit 0.

    Figures NVML cannot give (MIG, no GPM before Hopper) are named on one line on stderr and not emitted:
    unknown, never zero. Without any GPU (no driver, no nvidia-ml-py, none found) that one line is printed
    and the command exits 2.

    \b
      budgetscope gpu sample --every 100ms --out jsonl:gpu.jsonl
      budgetscope ingest gpu.jsonl --archive prod/
    """
    from budgetscope.instrument.gpu import GpuSampler
    from budgetscope.instrument.process_exit import Terminated

    if bool(out) == otlp:
        raise click.UsageError("give exactly one of --out jsonl:PATH or --otlp")
    if out and not (out.startswith("jsonl:") and len(out) > 6):
        raise click.BadParameter(f"{out!r}: want jsonl:PATH", param_hint="--out")
    period = period_s(every, "every")
    stop_after = period_s(duration, "duration") if duration else None
    sampler = GpuSampler(every_s=period, sink=out or "otlp")
    if not sampler.open():
        click.echo(f"budgetscope: {sampler.unavailable}", err=True)
        raise SystemExit(2)
    if sampler.unavailable:
        click.echo(sampler.unavailable, err=True)
    gpus = ", ".join(f"{g.index}: {g.name}" for g in sampler.nvml.gpus)
    click.echo(
        f"sampling {len(sampler.nvml.gpus)} GPU(s) ({gpus}) every {period * 1e3:g} ms → {out or 'OTLP'}", err=True
    )
    sampler.start()
    t0 = time.monotonic()
    try:
        while stop_after is None or time.monotonic() - t0 < stop_after:
            time.sleep(0.2)
    except (KeyboardInterrupt, Terminated):  # SIGTERM: the handler already exported the buffered points
        pass
    sampler.stop()
    share = sampler.cpu_ns / max(1, time.monotonic_ns() - int(t0 * 1e9))
    click.echo(
        f"{sampler.num_ticks:,} ticks, {sampler.num_points:,} points; sampler CPU {100 * share:.2f}% of one core",
        err=True,
    )
