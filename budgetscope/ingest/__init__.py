"""Ingest: what turns bytes that arrived into rows of the archive.

Decoders (OTLP/JSON in C `_otlpjson.c` via `otlp_fast`, DuckDB's JSON reader via `jsonsql`, the pure-Python
reference decoders `otlp_json` / `otlp_proto`, OTLP metrics `otlp_metrics`), the one validation SQL every span
passes (`staging`), trace files read as batches (`files`), their grouping into chunks (`batches`), and the
`Lander` (`lander`) that lands them in a writer's working set and has them derived. The store that keeps the
rows is `budgetscope.archive`; the OTLP server that receives them, `budgetscope.collector`.
"""
