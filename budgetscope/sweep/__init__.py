"""The capacity sweep: open-loop steps at rising rates, each broken down against the budgets (docs/capacity.md)."""
