"""`budgetscope engine`: the reference engine's own command group, kept beside the engine it serves."""

from budgetscope.engine.command import engine

__all__ = ["engine"]
