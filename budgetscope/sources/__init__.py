"""Importers of other tools' files (AIPerf, GuideLLM, vLLM bench and offline, llama.cpp timings, Triton trace
files, Prometheus text) into OTLP spans or `server_metrics` rows, and `formats`, which names a file's format from
its first bytes. What the spans become is `budgetscope.derive`'s."""
