"""A SparkSession configured for pbtree jobs: quiet, no UI, workers on this interpreter."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.parquet as pq

from pbtree.errors import PbtreeError
from spark_loader import classdata
from spark_loader.progress import Timings

_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = off
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = off
logger.writer.name = org.apache.spark.sql.execution.datasources.FileFormatWriter
logger.writer.level = off
"""


class SparkConfError(PbtreeError):
    """A --spark-conf option is not of the form key=value."""


class InputError(PbtreeError):
    """The input Parquet cannot be read."""


class TaskError(PbtreeError):
    """A Spark task failed with a pbtree error; the message is that error's."""


#: the column of a rejects file saying why its row was rejected
REASON = "reason"
_TASK_ERROR = re.compile(r"^(?:pbtree|spark_loader|storage)\.[\w.]*?(\w+Error): (.*)$", re.M)


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    """``key=value`` strings (the repeatable --spark-conf option) as a dict."""
    conf = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SparkConfError(f"--spark-conf {pair!r}: expected key=value")
        conf[key.strip()] = value
    return conf


def _driver_memory() -> str:
    """A quarter of physical memory, between 1 and 8 GiB (the driver is the executor locally)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    return f"{max(1, min(8, total // 4 >> 30))}g"


def _log_config() -> str:
    """Path of a log4j2 file that lets only errors through (written once per machine)."""
    path = os.path.join(tempfile.gettempdir(), "pbtree-log4j2-v4.properties")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(prefix=".pbtree-log4j2-", dir=os.path.dirname(path))
        with os.fdopen(fd, "w") as out:
            out.write(_LOG4J)
        os.replace(tmp, path)
    return path


@contextmanager
def running(master: str | None, conf: dict[str, str], app: str, timings: Timings) -> Iterator:
    """A SparkSession for the block: the active one if any, else a new one stopped after."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    archive = None if active else classdata.archive_path()
    dumping = archive is not None and not os.path.exists(archive)
    with timings.stage("spark start"):
        spark = active or start(master, conf, app, dump_classes=True)
    try:
        yield spark
    finally:
        if active is None:
            spark.stop()
        if dumping:
            with timings.stage("class archive"):
                _exit_jvm()
                classdata.adopt(archive)


def _exit_jvm() -> None:
    """End the stopped session's JVM and wait for it (it writes its class archive on exit)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    proc.stdin.close()  # the gateway JVM exits when its stdin closes
    proc.wait(timeout=300)
    gateway.close()
    SparkContext._gateway = SparkContext._jvm = None


def start(master: str | None, conf: dict[str, str], app: str, dump_classes: bool = False):
    """Start a SparkSession; ``conf`` overrides pbtree's defaults.

    The driver maps the machine's class-data archive (``classdata``); ``dump_classes`` lets
    it write that archive when there is none, which the caller adopts after the JVM exits.
    """
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas")
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # C1 only: a build's JVM work (read, hash, one shuffle) is short, and skipping the
    # optimising compiler saves seconds of start-up and warm-up on a small machine; an
    # embedded (local) JVM also gets the serial collector, which leaves the few cores to
    # the Python tasks instead of to parallel GC threads
    log = f"-Dlog4j2.configurationFile=file:{_log_config()} -XX:TieredStopAtLevel=1"
    if (master or "local[*]").startswith("local"):
        log += " -XX:+UseSerialGC -XX:-UsePerfData"
    classes = classdata.options(classdata.archive_path(), dump_classes)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": _driver_memory(),
        "spark.driver.extraJavaOptions": f"{log} {classes}".rstrip(),
        "spark.executor.extraJavaOptions": log,
        "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
        "spark.sql.execution.pyspark.udf.faulthandler.enabled": "true",
    } | conf
    builder = SparkSession.builder.master(master or "local[*]").appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def read_parquet(spark, path: str):
    """The DataFrame of a Parquet file, directory or glob; InputError when there is none."""
    from pyspark.errors import AnalysisException

    try:
        return spark.read.parquet(path)
    except AnalysisException as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: cannot read the input as Parquet ({message})") from None


@contextmanager
def task_errors() -> Iterator[None]:
    """Turn a task's pbtree exception, reported inside a Python traceback, into a TaskError."""
    from pyspark.errors import PythonException

    try:
        yield
    except PythonException as exc:
        found = _TASK_ERROR.findall(str(exc))
        if not found:
            raise
        name, message = found[-1]
        raise TaskError(f"{message} ({name} in a Spark task)") from None


def safe_columns(df):
    """``df`` with its columns renamed c0, c1, ... (mapInArrow cannot take names with dots)."""
    from pyspark.sql import functions as F

    quoted = [F.col("`" + name.replace("`", "``") + "`") for name in df.columns]
    return df.select([col.alias(f"c{n}") for n, col in enumerate(quoted)])


def write_part(table: pa.Table, directory: str, name: str, tmp: str) -> None:
    """Write ``table`` to Parquet file ``name`` in ``directory`` under a hidden name of this
    task attempt (``tmp``), then rename it: readers of the directory skip hidden files, and a
    retried or speculative attempt replaces the part whole, never leaving half of one."""
    hidden = os.path.join(directory, f".{name}{tmp}")
    pq.write_table(table, hidden)
    os.replace(hidden, os.path.join(directory, name))


def close_rejects(directory: str, schema: pa.Schema) -> None:
    """Finish a rejects directory after its job: drop the hidden parts of attempts that died
    half-way, and write an empty table of ``schema`` when no row was rejected."""
    for name in os.listdir(directory):
        if name.startswith("."):
            os.remove(os.path.join(directory, name))
    if not os.listdir(directory):
        pq.write_table(schema.empty_table(), os.path.join(directory, "part-00000.parquet"))
