"""The C extension and the files that live outside `budgetscope/` but ship inside the wheel; the rest of the
package's metadata is in pyproject.toml."""

from setuptools import Extension, find_packages, setup

setup(
    # `dashboards/` (the Streamlit app) and the maintained Collector configuration stay where the repository
    # layout puts them and install as `budgetscope/dashboards/` and `budgetscope/otelcol/`, where
    # `budgetscope.shipped` finds them through importlib.resources (docs/design.md, "Packaging").
    packages=[
        *find_packages(include=["budgetscope", "budgetscope.*"]),
        "budgetscope.dashboards",
        "budgetscope.otelcol",
    ],
    package_dir={"budgetscope.dashboards": "dashboards", "budgetscope.otelcol": "instrumentation/otel-collector"},
    package_data={
        "budgetscope": ["data/*.toml"],
        "budgetscope.dashboards": ["pages/*.py"],
        "budgetscope.otelcol": ["*.yaml"],
    },
    ext_modules=[
        # The OTLP/JSON and OTLP protobuf decoders of the ingest fast path (_otlpproto.c is included by
        # _otlpjson.c: one module). Optional: without a compiler the package still installs and ingests through
        # the slower paths; tests/test_otlp_fast.py fails loudly when it is missing.
        Extension(
            "budgetscope.ingest._otlpjson",
            ["budgetscope/ingest/_otlpjson.c"],
            optional=True,
            depends=["budgetscope/ingest/_otlpproto.c"],
            extra_compile_args=["-O2"],
        ),
    ],
)
