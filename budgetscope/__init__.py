"""budgetscope: where the time of the slowest LLM requests went, against declared latency budgets.

Importing the package stays light: no torch, duckdb or streamlit at import time.
"""

__version__ = "0.1.0"

STAGES = ("network", "gateway", "frontend", "queue", "prefill", "kv_handoff", "decode", "postprocess", "unaccounted")
"""The stage vocabulary of docs/design.md, in the order a request lives through them (`gateway` and `kv_handoff`
only where a gateway, or P/D disaggregation, traced them: llm-d)."""

SERVER_STAGES = ("frontend", "queue", "prefill", "decode", "postprocess")
"""The stages a server measures itself (network is derived, unaccounted is the remainder)."""

__all__ = ["STAGES", "SERVER_STAGES", "__version__"]
