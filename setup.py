"""Only the C extension lives here; everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[
    # The OTLP/JSON and OTLP protobuf decoders of the ingest fast path (_otlpproto.c is included by
    # _otlpjson.c: one module). Optional: without a compiler the package still installs and ingests through
    # the slower paths; tests/test_otlp_fast.py fails loudly when it is missing.
    Extension("budgetscope.ingest._otlpjson", ["budgetscope/ingest/_otlpjson.c"], optional=True,
              depends=["budgetscope/ingest/_otlpproto.c"], extra_compile_args=["-O2"]),
])
