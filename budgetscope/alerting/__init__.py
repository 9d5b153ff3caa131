"""Prometheus and Grafana over the live SLIs of `collect --budgets`: recording and alerting rules
(`budgetscope rules`), their promtool unit tests, and a Grafana dashboard (`budgetscope example grafana`).
docs/alerting.md says how budgets become SLOs, error budgets and burn-rate alerts."""
