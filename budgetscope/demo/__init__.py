"""`budgetscope demo`: the offline demo (synthetic traces) and the live scenarios (engine, collector, load)."""
