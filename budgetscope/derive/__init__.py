"""Derivation: spans → `requests` rows, one a request, one column a stage.

One adapter per server (`native`, `vllm`, `sglang`, `tgi`, `triton`, `llamacpp`, `llmd` for a request through
llm-d's gateway, and `client` for a client span alone) turns what that server records into server rows;
`requests.requests_sql` joins them to their client spans (`genai` says which GenAI client span stands for the
application) and computes the stage and metric columns; `instants`, `invariants` and `unread_events` check every
row once, beside the server-row contract (`server_row`). `classify` decides which adapter claims a span. Everything
here is SQL over the `spans` table (budgetscope/schema.py); it imports nothing of the archive, the ingest or
the collector.
"""
