"""The optional extras of pyproject.toml, and the one-line message a command gives when its extra is missing."""

from __future__ import annotations

from importlib.util import find_spec

EXTRA_OF_MODULE = {
    # engine
    "torch": "engine",
    "numpy": "engine",
    "tokenizers": "engine",
    "safetensors": "engine",
    "starlette": "engine",
    "uvicorn": "engine",
    "httpx": "engine",
    "msgpack": "engine",
    # instrument (the engine extra includes it)
    "opentelemetry.sdk": "instrument",
    "opentelemetry.exporter": "instrument",
    # the rest
    "streamlit": "dashboard",
    "plotly": "dashboard",
    "pynvml": "gpu",
    "polars": "polars",
    "pyspark": "spark",
    "sqlglot": "spark",
}
"""Top-level module (or dotted prefix) → the extra that installs it."""

MODULES_OF_EXTRA = {
    "engine": (
        "torch",
        "numpy",
        "tokenizers",
        "safetensors",
        "starlette",
        "uvicorn",
        "httpx",
        "msgpack",
        "opentelemetry.sdk",
    ),
    "dashboard": ("streamlit", "plotly"),
    "gpu": ("pynvml",),
    "polars": ("polars",),
    "spark": ("pyspark", "sqlglot"),
}


class MissingExtra(ImportError):
    """A command needs an optional extra that is not installed. str() is the one line to print."""

    def __init__(self, extra: str, what: str, module: str, hint: str = ""):
        self.extra, self.module = extra, module
        super().__init__(
            f"{what} needs the '{extra}' extra ({module} is not installed): "
            f"pip install 'budgetscope[{extra}]'" + (f" ({hint})" if hint else "")
        )


def _present(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None in sys.modules
        return False


def require(extra: str, what: str, hint: str = "", modules: tuple[str, ...] = ()) -> None:
    """Raise MissingExtra when a module of `extra` (or only those of `modules`) cannot be imported; `what`
    names the command."""
    for module in modules or MODULES_OF_EXTRA[extra]:
        if not _present(module):
            raise MissingExtra(extra, what, module, hint)


def extra_for(error: ModuleNotFoundError) -> str | None:
    """The extra that provides the module an ImportError could not find, or None when none does."""
    name = error.name or ""
    for module, extra in EXTRA_OF_MODULE.items():
        if name == module or name.startswith(module + "."):
            return extra
    return None
