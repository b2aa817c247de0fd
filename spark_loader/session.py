"""A SparkSession configured for pbtree jobs: quiet, no UI, workers on this interpreter."""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from pbtree.errors import PbtreeError
from pbtree.outputs import hidden_dir, sweep
from spark_loader import classdata
from spark_loader.timings import Timings

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


class SparkError(PbtreeError):
    """Spark could not start or run a job: no usable Java, a bad master URL, a Python
    worker or the JVM that died; the message names the cause in one line."""


#: the oldest Java the installed Spark (4.x) runs on
JAVA_MIN = 17
#: master URLs Spark knows: local[...], local-cluster[...], yarn, and SCHEME://...
_MASTER = re.compile(r"^(local(\[[^\]]+\])?|local-cluster\[[^\]]+\]|yarn|[a-z][a-z0-9+.-]*://.+)$")
#: the line of a failed job's Java exception that says why, by the first pattern found
_CAUSES = (
    re.compile(r"(Python worker exited unexpectedly \(crashed\)[^\n]*)"),
    re.compile(r"(Python worker failed to connect back[^\n]*)"),
    re.compile(r"(java\.lang\.OutOfMemoryError[^\n]*)"),
    re.compile(r"Caused by: ([^\n]+)"),
)
#: seconds a lost connection to the JVM waits for the JVM to be seen to have exited (a
#: killed JVM's memory is freed before it is: seconds on a loaded machine)
EXIT_WAIT = 30
#: Spark's hidden column of each row's file and place in it
METADATA = "_metadata"
#: the JVM's standard output and error, in the scratch directory
JVM_LOG = "jvm.log"
#: the gateway process ``start`` launched (until SparkContext holds it)
_LAUNCHED: dict[str, subprocess.Popen] = {}


#: without it Spark refuses a Parquet file with a nanosecond timestamp column; with it, it
#: reads them as integers (nanoseconds since the epoch)
NANOS_AS_LONG = "spark.sql.legacy.parquet.nanosAsLong"
#: Spark tells column names apart regardless of case unless told to; pbtree's attribute
#: names are case-sensitive (``price`` and ``Price`` are two)
CASE_SENSITIVE = "spark.sql.caseSensitive"
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
def running(master: str | None, conf: dict[str, str], app: str, timings: Timings,
            scratch: str | None = None) -> Iterator:
    """A SparkSession for the block: the active one if any, else a new one stopped after,
    whose JVM has exited by the end of the block. ``scratch`` is a directory for the JVM's
    output and Spark's own scratch files (``spark-*``, ``blockmgr-*``). Failures of Spark
    itself come out as one-line SparkErrors."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    archive = None if active else classdata.archive_path()
    dumping = archive is not None and not os.path.exists(archive)
    with timings.stage("spark start"), spark_failures(scratch):
        spark = active or start(master, conf, app, dump_classes=True, scratch=scratch)
    failed = True
    try:
        with spark_failures(scratch), _stop_once():
            yield spark
        failed = False
    finally:
        if active is None:
            _stop(spark, failed)
            with timings.stage("class archive") if dumping else nullcontext():
                _exit_jvm()
            if dumping:
                classdata.adopt(archive)


def _stop(spark, failed: bool) -> None:
    """Stop a session this process started; after a failure (Ctrl-C, a JVM that died),
    stopping is best effort and must not hide the failure, nor add PySpark's warning that
    the JVM the failure took down did not stop cleanly."""
    with warnings.catch_warnings():
        if failed:
            warnings.filterwarnings("ignore", message="Unable to cleanly shutdown Spark JVM")
        try:
            spark.stop()
        except Exception:
            if not failed:
                raise


@contextmanager
def _stop_once() -> Iterator[None]:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt once, and are ignored after it while the
    job is torn down (PySpark's own handler calls into the JVM from inside the call it
    interrupts, which fails and prints tracebacks)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM)

    def stop(signum, frame) -> None:
        for number in signals:
            signal.signal(number, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = {number: signal.signal(number, stop) for number in signals}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def spark_failures(scratch: str | None) -> Iterator[None]:
    """Turn a failure of Spark itself into a SparkError naming its cause in one line: the
    JVM that exited (and the last error it printed), a job that failed for a reason
    outside pbtree's code (a Python worker that crashed)."""
    from py4j.protocol import Py4JError, Py4JJavaError
    from pyspark.errors import PySparkRuntimeError

    try:
        yield
    except Py4JJavaError as exc:
        raise SparkError(_job_cause(str(exc.java_exception))) from None
    except (Py4JError, ConnectionError, PySparkRuntimeError):
        exited = _jvm_exit()
        if exited is None:
            raise
        said = _jvm_said(scratch)
        raise SparkError(f"the Spark JVM {exited}{': ' + said if said else ''}") from None


def _job_cause(text: str) -> str:
    """One line saying why a Spark call failed, from its Java exception's text."""
    for pattern in _CAUSES:
        found = pattern.search(text)
        if found:
            return f"Spark job failed: {found.group(1).strip()}"
    lines = text.strip().splitlines()
    first = lines[0] if lines else "unknown cause"
    return "Spark failed: " + re.sub(r"^(?:[a-z0-9_]+[.])+(?=[A-Z])", "", first)


def _jvm_exit() -> str | None:
    """How the session's JVM ended (``died (killed by SIGKILL)``, ``exited with status
    1``), or None while it runs. A JVM that dies closes its connections a moment before
    it can be seen to have exited: it is given that moment."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None) or _LAUNCHED.get("proc")
    if proc is None:
        return None
    try:
        code = proc.wait(timeout=EXIT_WAIT)
    except subprocess.TimeoutExpired:
        return None
    if code < 0:
        try:
            return f"died (killed by {signal.Signals(-code).name})"
        except ValueError:
            return f"died (killed by signal {-code})"
    return f"exited with status {code}"


def _jvm_said(scratch: str | None) -> str:
    """The last error line the JVM printed to its log in ``scratch``, if any."""
    if scratch is None:
        return ""
    try:
        with open(os.path.join(scratch, JVM_LOG), errors="replace") as log:
            lines = [line.strip() for line in log if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if re.search(r"Error|Exception|error:", line)
              and not line.startswith("at ")]
    return errors[-1][:300] if errors else ""


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
    _LAUNCHED.clear()


def java_command() -> str:
    """The java command Spark will run, checked: JAVA_HOME's if set, else the PATH's, of
    Java ``JAVA_MIN`` or newer; a SparkError names what is wrong."""
    home = os.environ.get("JAVA_HOME")
    java = classdata.java_path()
    if home and (java is None or not os.access(java, os.X_OK)):
        raise SparkError(f"JAVA_HOME is {home}, which holds no bin/java: set it to a Java "
                         f"{JAVA_MIN}+ installation, or unset it to use the java on the PATH")
    if java is None:
        raise SparkError(f"no Java found: Spark needs Java {JAVA_MIN} or newer; install "
                         f"it, or set JAVA_HOME to its directory")
    version = _java_version(java)
    if version is not None and version < JAVA_MIN:
        raise SparkError(f"Java {version} ({os.path.realpath(java)}) is too old: Spark needs "
                         f"Java {JAVA_MIN} or newer (set JAVA_HOME to one)")
    return java


def _java_version(java: str) -> int | None:
    """The major version of ``java``: from its installation's ``release`` file, else from
    ``java -version``; None when neither says."""
    release = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(java))), "release")
    try:
        with open(release, errors="replace") as src:
            text = src.read()
    except OSError:
        try:
            text = subprocess.run([java, "-version"], capture_output=True, text=True,
                                  timeout=60).stderr
        except (OSError, subprocess.SubprocessError):
            return None
    found = re.search(r'(?:JAVA_VERSION=|version )"(\d+)(?:\.(\d+))?', text)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # 1.8 is Java 8


def check_master(master: str | None) -> None:
    """Refuse a --master that is no Spark master URL before starting the JVM."""
    if master is not None and not _MASTER.match(master):
        raise SparkError(f"--master {master!r} is not a Spark master URL (local[*], local[N], "
                         f"spark://HOST:PORT, yarn, k8s://https://HOST:PORT)")


def start(master: str | None, conf: dict[str, str], app: str, dump_classes: bool = False,
          scratch: str | None = None):
    """Start a SparkSession; ``conf`` overrides pbtree's defaults.

    The driver maps the machine's class-data archive (``classdata``); ``dump_classes`` lets
    it write that archive when there is none, which the caller adopts after the JVM exits.
    With ``scratch``, the JVM's output goes to a log there instead of the terminal, and
    Spark's scratch files under it.
    """
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas")
    from pyspark import SparkConf, SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    check_master(master)
    java_command()

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
    if scratch is not None:
        os.makedirs(os.path.join(scratch, "tmp"), exist_ok=True)
        log += f" -Djava.io.tmpdir={os.path.join(scratch, 'tmp')}"
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": _driver_memory(),
        "spark.driver.extraJavaOptions": f"{log} {classes}".rstrip(),
        "spark.executor.extraJavaOptions": log,
        "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
        "spark.sql.execution.pyspark.udf.faulthandler.enabled": "true",
    }
    if scratch is not None:
        settings["spark.local.dir"] = scratch
    settings |= conf
    if scratch is not None and SparkContext._gateway is None:
        launch = SparkConf(loadDefaults=False).setAll(list(settings.items()))
        launch.setMaster(master or "local[*]").setAppName(app)
        with open(os.path.join(scratch, JVM_LOG), "ab") as log_file:
            try:
                gateway = launch_gateway(launch, {"stdout": log_file, "stderr": log_file})
            except PySparkRuntimeError:
                said = _jvm_said(scratch) or "it printed no error"
                raise SparkError(f"the Spark JVM exited while starting: {said}") from None
        _LAUNCHED["proc"] = gateway.proc
        SparkContext._ensure_initialized(gateway=gateway)
    builder = SparkSession.builder.master(master or "local[*]").appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def scratch_beside(output: str) -> Iterator[str]:
    """A scratch directory for a job's JVM beside its ``output`` (swept, like staging
    directories, by the next job when a killed one left it), removed after the block, and
    so are the directories above it made for it if the job left them empty (it failed)."""
    target = os.path.abspath(output)
    made = []  # the missing directories above the output, innermost first
    above = os.path.dirname(target)
    while not os.path.exists(above):
        made.append(above)
        above = os.path.dirname(above)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    sweep(os.path.dirname(target))
    path = hidden_dir(target, "scratch")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        for directory in made:
            try:
                os.rmdir(directory)  # only when empty: a finished job's output is inside
            except OSError:
                break


def input_path(uri: str) -> str:
    """A file Spark names by URI (``file:///a%20b``) as its local path (``/a b``), which
    pyarrow opens and people read; a URI of another scheme as it is."""
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def file_fields(file: str) -> list[pa.Field]:
    """The columns of an input file (a local path, or a URI as Spark gives it) as its
    Parquet schema types them, where Spark reads some as another type; none when it is not
    local (``s3a://``: pyarrow would need that file system's client, so Spark's types
    stand)."""
    path = input_path(file)
    if "://" in path:
        return []
    try:
        return list(pq.read_schema(path))
    except (pa.ArrowException, OSError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise InputError(f"{path}: not a Parquet file ({reason})") from None


def input_fields(files: list[str], *, every_type: bool = False) -> list[pa.Field]:
    """The columns of the input ``files`` as ``file_fields`` types them, each from the
    first file in path order that has it (the files of one input may have different
    columns: Spark reads them by their merged schema). An InputError names the first two
    files that type a column differently where one of the types is read as integers
    (``read_as_integers``), uint64 too: Spark would merge them unnoticed, and read the
    values as one of them; with ``every_type``, wherever the types differ."""
    found: dict[str, tuple[str, pa.Field]] = {}
    for path in sorted(map(input_path, files)):
        for column in file_fields(path):
            first, seen = found.setdefault(column.name, (path, column))
            kinds = (seen.type, column.type)
            if kinds[0] != kinds[1] and (every_type or any(
                    read_as_integers(kind) or kind == pa.uint64() for kind in kinds)):
                raise InputError(f"column {column.name!r} is {kinds[0]} in {first} and "
                                 f"{kinds[1]} in {path}: Spark reads the files of one "
                                 f"input by one schema; give them one type")
    return [column for _, column in found.values()]


@contextmanager
def typed_alike(files: list[str]) -> Iterator[None]:
    """A job reading ``files``: when it fails and two of them type a column differently
    (Spark reads all by one schema and fails on the other type, naming neither), an
    InputError naming both files, the column and its types instead."""
    try:
        yield
    except Exception:
        input_fields(files, every_type=True)
        raise


def _local_files(path: str) -> list[str]:
    """The files a local input path names as Spark reads them: a file, a glob's matches,
    or a directory's files, those Spark skips (named from ``_`` or ``.``) left out."""
    local = input_path(path)
    if "://" in local:
        return []
    if not os.path.isdir(local):
        return glob.glob(local)
    found = []
    for top, dirs, names in os.walk(local):
        dirs[:] = [name for name in dirs if not name.startswith(("_", "."))]
        found += [os.path.join(top, name) for name in names if not name.startswith(("_", "."))]
    return found


def read_as_integers(kind: pa.DataType) -> bool:
    """Whether values of Arrow type ``kind`` hold nanosecond timestamps or durations, alone
    or inside structs and lists: Spark has no type for them and reads them as integers
    (nanosecond timestamps by ``NANOS_AS_LONG``, durations as their count of units)."""
    if pa.types.is_timestamp(kind):
        return kind.unit == "ns"
    if pa.types.is_duration(kind):
        return True
    if pa.types.is_struct(kind):
        return any(read_as_integers(f.type) for f in kind)
    return is_list(kind) and read_as_integers(kind.value_type)


def is_list(kind: pa.DataType) -> bool:
    """Whether Arrow type ``kind`` is a list of any of its three kinds."""
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or \
        pa.types.is_fixed_size_list(kind)


def read_parquet(spark, path: str):
    """The DataFrame of a Parquet file, directory or glob, by the schema of all its files
    merged (a column only some files have is null in the others' rows), its column names
    told apart by case as pbtree's attributes are; InputError when there is none."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    spark.conf.set(CASE_SENSITIVE, "true")
    try:
        df = spark.read.option("mergeSchema", "true").parquet(path)
    except (CapturedException, Py4JJavaError) as exc:  # AnalysisException; an Arithmetic-
        # Exception for a type Spark cannot hold (a decimal of more than 38 digits); a
        # SparkException for files that type a column differently: worded while the JVM lives
        input_fields(_local_files(path), every_type=True)
        text = str(exc.java_exception if isinstance(exc, Py4JJavaError) else exc)
        message = text.splitlines()[0] if text else type(exc).__name__
        raise InputError(f"{path}: cannot read the input as Parquet ({message})") from None
    hiding = [column for column in df.columns if column.lower() == METADATA]
    if hiding:
        raise InputError(f"{path}: column {hiding[0]!r} hides Spark's {METADATA} column, by "
                         f"which pbtree locates each row in its file; rename it")
    return df


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


def unused(name: str, columns: list[str]) -> str:
    """``name``, with underscores added until none of ``columns`` has it, in any case (a
    session that tells names apart regardless of case would confuse them)."""
    taken = {column.lower() for column in columns}
    while name.lower() in taken:
        name += "_"
    return name
