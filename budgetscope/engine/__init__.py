"""The reference inference engine: a Llama-style model on paged KV blocks behind a token-budget scheduler.

Importing this package stays light (no torch): the heavy names load on first use.

    from budgetscope.engine import EngineConfig, LLMEngine, SamplingParams
    engine = LLMEngine(EngineConfig(model="tiny"))
    outputs = engine.generate(["hello"], SamplingParams(max_tokens=8))
"""

from importlib import import_module

_LAZY = {
    "EngineConfig": "budgetscope.engine.engine_config",
    "ModelConfig": "budgetscope.engine.model_config",
    "SamplingParams": "budgetscope.engine.sampling_params",
    "LLMEngine": "budgetscope.engine.llm_engine",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'budgetscope.engine' has no attribute {name!r}")
