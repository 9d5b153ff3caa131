"""Only the C extension lives here; everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[
    # The OTLP/JSON decoder of the ingest fast path. Optional: without a compiler the package still installs
    # and ingests through the DuckDB path (slower); tests/test_otlp_fast.py fails loudly when it is missing.
    Extension("budgetscope.ingest._otlpjson", ["budgetscope/ingest/_otlpjson.c"], optional=True,
              extra_compile_args=["-O2"]),
])
