"""The OTLP collector: gRPC and HTTP receivers, a byte-bounded queue, and the one writer thread that lands
groups of export requests in a `budgetscope.archive.Archive`. `budgetscope collect` is `budgetscope.commands.collect`.

    from budgetscope.collector import Collector
"""

from budgetscope._lazy import lazy_exports

_EXPORTS = {"Collector": "server", "CollectorError": "server", "CollectorStats": "writer"}

__getattr__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = list(_EXPORTS)
