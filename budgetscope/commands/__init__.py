"""The `budgetscope` command: a thin face on the library, one module a command. Errors are one line on stderr
and exit 2 (`options.UsageError`).

Every command's module loads only when the command runs (or `--help` lists it), so that `budgetscope report`
never imports torch, servers or gRPC. `budgetscope --help` loads every one of them, so each imports the library
inside its function, when it runs: measured on 2 shared cores, `--help` takes 0.8 s, while importing DuckDB and
pyarrow alone takes 2.0-2.3 s.
"""

from __future__ import annotations

from importlib import import_module

import click

from budgetscope import __version__
from budgetscope.commands.options import UsageError

COMMANDS = {
    "collect": "collect:collect",
    "collect-router": "collect:collect_router",
    "convert": "convert:convert",
    "dashboard": "dashboard:dashboard",
    "demo": "demo:demo",
    "derive": "derive:derive",
    "engine": "engine:engine",
    "example": "example:example",
    "expire": "expire:expire",
    "gpu": "gpu:gpu",
    "import": "import_:import_",
    "ingest": "ingest:ingest",
    "load": "load:load",
    "postmortem": "postmortem:postmortem",
    "query": "query:query",
    "report": "report:report",
    "rules": "rules:rules",
    "scrape": "scrape:scrape",
    "sweep": "sweep:sweep",
}
"""Command name → `module:attribute` in this package."""


class _LazyGroup(click.Group):
    def list_commands(self, ctx) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return super().get_command(ctx, name)
        module, attr = target.split(":")
        return getattr(import_module(f"{__name__}.{module}"), attr)

    def invoke(self, ctx):
        """A command whose optional extra is not installed says which one to install, in one line."""
        from budgetscope.extras import MissingExtra, extra_for

        try:
            return super().invoke(ctx)
        except MissingExtra as e:
            raise UsageError(str(e)) from None
        except ModuleNotFoundError as e:
            extra = extra_for(e)
            if extra is None:
                raise
            raise UsageError(str(MissingExtra(extra, ctx.invoked_subcommand or "this command", e.name))) from None


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="budgetscope")
def main() -> None:
    """budgetscope: where the time of your slowest LLM requests went, against declared latency budgets.

    \b
      budgetscope ingest traces.jsonl --archive prod/
      budgetscope report --archive prod/ --budgets budgets.toml
      budgetscope query --archive prod/ "SELECT tier, count(*) FROM requests GROUP BY 1"
    """
