"""Starting Spark for budgetscope: a local session by default, or a cluster's master; one-line errors.

`session(master)` checks what it can before the JVM starts (pyspark installed, a Java to run, a master URL
Spark can parse, a standalone master that answers), so a Spark that cannot start says why in one line
instead of hanging on a master that is not there or printing a Java stack.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from budgetscope.archive.errors import ArchiveError

DEFAULT_MASTER = "local[2]"
LOCAL_DRIVER_MEMORY = "4g"
LOCAL_JAVA_OPTIONS = "-XX:+UseParallelGC"
"""The local JVM's collector: the report's generated code allocates a row a value (`explode`), and the throughput
collector took ~0.3 s (6 %) off a warm report of 1M requests against G1, Java 17's default (docs/benchmarks.md,
"Spark report: three scans for every tier")."""
QUICK_JIT = "-XX:TieredStopAtLevel=1"
"""Added for a command whose few statements each run once (`report`, `query`): the JVM compiles with its quick
compiler (C1) only. Spark generates and compiles code for every statement, and a cold report spends more in
compiling than in running: 19 % faster on a sample archive, 21 % over 400,000 requests, 9 % over 1M (2-core Intel
Xeon, docs/benchmarks.md, "2026-11-30, fifteenth session"). `derive` keeps the optimizing compiler: over 400,000
requests its statements run long enough to repay it (C1 alone was 23 % slower)."""
CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    # segments are read by their paths from the manifests: no partition columns are inferred from the folders
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.runSQLOnFiles": "false",  # no `parquet.`/path`` tables in `query`: the archive's views only
}


class SparkError(ArchiveError):
    """Spark could not start or could not run a query; one line."""


def java_problem() -> str | None:
    """Why no Java can run Spark here, or None."""
    home = os.environ.get("JAVA_HOME")
    if home:
        if not (Path(home) / "bin" / "java").is_file():
            return f"JAVA_HOME={home} has no bin/java; point it at a Java 17+ installation"
        return None
    if shutil.which("java") is None:
        return "no Java found (Spark needs Java 17+: install it or set JAVA_HOME)"
    return None


def _check_master(master: str) -> None:
    if master.startswith("local"):
        return
    if master.startswith("spark://"):
        hosts = master[len("spark://") :].split(",")
        for hp in hosts:
            host, _, port = hp.rpartition(":")
            try:
                with socket.create_connection((host or hp, int(port or 7077)), timeout=3):
                    return
            except (OSError, ValueError):
                continue
        raise SparkError(f"Spark master {master} does not answer (no connection to {', '.join(hosts)})")
    if master.startswith(("yarn", "k8s://", "mesos://")):
        return
    raise SparkError(f"--spark-master {master!r}: expected local[N], spark://HOST:PORT, yarn or k8s://URL")


def local_conf(master: str, quick_jit: bool = False) -> dict[str, str]:
    """What budgetscope sets for a local master (the driver is then the executor); a cluster keeps its own.
    `quick_jit`: QUICK_JIT too."""
    if not master.startswith("local"):
        return {}
    conf = {}
    if not os.environ.get("SPARK_DRIVER_MEMORY"):
        # Spark's 1g default is too small for exact percentiles (every distinct value of a column is held, ~50
        # bytes each); SPARK_DRIVER_MEMORY overrides
        conf["spark.driver.memory"] = LOCAL_DRIVER_MEMORY
    # BUDGETSCOPE_SPARK_JAVA_OPTIONS replaces ours ("" keeps the JVM's defaults)
    java = os.environ.get(
        "BUDGETSCOPE_SPARK_JAVA_OPTIONS", f"{LOCAL_JAVA_OPTIONS} {QUICK_JIT}" if quick_jit else LOCAL_JAVA_OPTIONS
    )
    if java:
        conf["spark.driver.extraJavaOptions"] = java
    return conf


def session(master: str | None = None, app: str = "budgetscope", quick_jit: bool = False):
    """A SparkSession on `master` (default local[2]); `quick_jit`: see QUICK_JIT (a local master only). Raises
    SparkError (one line) when it cannot start."""
    master = master or DEFAULT_MASTER
    try:
        # imported on use: pyspark 91 ms to import
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkError("the spark engine needs pyspark: pip install 'budgetscope[spark]'") from None
    problem = java_problem()
    if problem:
        raise SparkError(f"Spark cannot start: {problem}")
    _check_master(master)
    warehouse = tempfile.mkdtemp(prefix="budgetscope-spark-")  # never the working directory
    atexit.register(shutil.rmtree, warehouse, True)
    b = SparkSession.builder.master(master).appName(app)
    conf = {**CONF, **local_conf(master, quick_jit), "spark.sql.warehouse.dir": warehouse, "spark.local.dir": warehouse}
    for k, v in conf.items():
        b = b.config(k, v)
    try:
        with _quiet_stderr():
            spark = b.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        _quiet_query_errors()
    except Exception as e:  # noqa: BLE001 - py4j, pyspark and JVM errors alike: one line
        shutil.rmtree(warehouse, True)
        raise SparkError(f"Spark cannot start on {master}: {one_line(e)}") from None
    spark._budgetscope_tmp = warehouse  # stop() removes it
    return spark


def _quiet_query_errors() -> None:
    """pyspark logs every failed statement as a JSON ERROR line on stderr (its SQLQueryContextLogger) before
    raising; budgetscope says what failed itself, in one line."""
    try:
        # imported on use: pyspark 91 ms to import
        from pyspark.logger import PySparkLogger
    except ImportError:  # a pyspark before 4.0 logs no such line
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def stop(spark) -> None:
    """Stop a session that `session()` started, and remove its scratch folder."""
    try:
        spark.stop()
    finally:
        tmp = getattr(spark, "_budgetscope_tmp", None)
        if tmp:
            shutil.rmtree(tmp, True)


class _quiet_stderr:
    """The JVM inherits stderr when it starts: send its start-up chatter (log4j, native-library warnings) to
    /dev/null, keeping this process's own stderr."""

    def __enter__(self):

        try:
            sys.stderr.flush()
            self.saved = os.dup(2)
        except (OSError, ValueError):
            self.saved = None
            return self
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            os.dup2(self.saved, 2)
            os.close(self.saved)


def one_line(e: BaseException) -> str:
    """The first meaningful line of a Spark, py4j or Java error."""
    text = str(e).strip()
    for line in text.splitlines():
        line = line.strip()
        # py4j's "An error occurred while calling o123.parquet." names a JVM object; the Java error is the next line
        if not line or line.startswith(("JVM stacktrace", "at ", "Traceback", "An error occurred while calling")):
            continue
        line = line.removeprefix("py4j.protocol.Py4JJavaError: ").removeprefix(": ")
        if "An error occurred while calling" in line:
            continue
        return line[:400]
    return type(e).__name__
