"""``pbtree match-batch``: match a Parquet file of events against an index in Spark tasks.

Each task opens the index read-only (once per Python worker) and matches its Arrow
batches through ``Index.match_many``; the output has one row per (event, subscription).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

import pbtree
from pbtree.errors import PbtreeError, plural
from pbtree.layouts import subscription_id_type, unheld
from pbtree.manifest import MANIFEST
from pbtree.outputs import Staging, check_outputs
from spark_loader.session import (
    METADATA,
    NANOS_AS_LONG,
    InputError,
    input_fields,
    input_path,
    is_list,
    read_as_integers,
    read_parquet,
    safe_columns,
    task_errors,
    typed_alike,
    unused,
)
from spark_loader.timings import Timings

EVENT_ID, SUBSCRIPTION_ID = "event_id", "subscription_id"
ROW_NUMBER = "__pbtree_row"
#: per worker process: index path -> (its manifest's identity, the index opened read-only)
_OPEN: dict[str, tuple[tuple[int, int], pbtree.Index]] = {}


@dataclass
class MatchResult:
    """Counts and stage timings of a finished match-batch job."""

    events: int = 0
    matches: int = 0
    timings: Timings = field(default_factory=Timings)

    def summary(self) -> str:
        rate = self.events / max(self.timings.total(), 1e-9)
        return (f"{plural(self.events, 'event')} matched, {plural(self.matches, 'match')} "
                f"written; {self.timings.line()} ({rate:,.0f} events/s)")


def _open(path: str) -> pbtree.Index:
    """The index at ``path``, opened read-only once per worker process, and again when the
    path holds another index since (rebuilt: its manifest is a new file), whose old files
    the open one would go on reading."""
    try:
        stat = os.stat(os.path.join(path, MANIFEST))
        identity = (stat.st_ino, stat.st_mtime_ns)
    except FileNotFoundError:
        identity = (0, 0)  # pbtree.open says what is wrong
    opened = _OPEN.get(path)
    if opened is not None and opened[0] == identity:
        return opened[1]
    if opened is not None:
        del _OPEN[path]
        opened[1].close()
    index = pbtree.open(path, readonly=True)
    _OPEN[path] = (identity, index)
    return index


def _as_read(value: object, kind: pa.DataType) -> object:
    """A value Spark read as an integer (``read_as_integers``) from a column of the file's
    type ``kind``, as the Python API reads the file: a nanosecond timestamp as seconds
    since the epoch (the double nearest to it), a duration as no value, inside structs and
    lists too."""
    if value is None or pa.types.is_duration(kind):
        return None
    if pa.types.is_timestamp(kind):
        return value / 1_000_000_000 if kind.unit == "ns" else value
    if pa.types.is_struct(kind):
        return {**value, **{f.name: _as_read(value.get(f.name), f.type) for f in kind}}
    if is_list(kind):
        return [_as_read(v, kind.value_type) for v in value]
    return value


def _match_task(index_path: str, names: list[str], event_col: str, id_type: pa.DataType,
                events_seen, integers: Mapping[str, pa.DataType] | None = None,
                row: str = ROW_NUMBER):
    """The job's mapInArrow function: event batches -> (event id, subscription id) rows;
    ``events_seen`` is the accumulator counting the events matched. No row is a bad event:
    a value no predicate can compare is absent (``pbtree.values``), a null too. ``integers``
    are the columns Spark gives as integers (``read_as_integers``), with their types in
    the files; ``row`` is the column of row numbers the job added, if any (a label the
    events hold is matched too)."""
    integers = integers or {}

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index = _open(index_path)
        for batch in batches:
            batch = batch.rename_columns(names)
            event_ids = batch.column(event_col)
            attrs = [name for name in names if name != row]
            columns = [[_as_read(v, integers[name]) for v in _values(batch, name, event_ids)]
                       if name in integers else _values(batch, name, event_ids)
                       for name in attrs]
            events = [dict(zip(attrs, values, strict=True))
                      for values in zip(*columns, strict=True)] if attrs else \
                [{} for _ in range(batch.num_rows)]
            found = index.match_many(events)
            rows = [n for n, ids in enumerate(found) for _ in ids]
            subs = [i for ids in found for i in ids]
            if pa.types.is_string(id_type):
                subs = [str(i) for i in subs]
            try:
                sub_ids = pa.array(subs, id_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # the type was fixed before the job
                raise PbtreeError(f"{index_path}: a subscription with a string id was added "
                                  f"while the job ran; run it again") from None
            events_seen.add(batch.num_rows)
            yield pa.RecordBatch.from_arrays(
                [event_ids.take(pa.array(rows, pa.int64())), sub_ids], [EVENT_ID, SUBSCRIPTION_ID])

    return run


def _values(batch: pa.RecordBatch, name: str, event_ids: pa.Array) -> list:
    """The column ``name`` of ``batch`` as Python values; a PbtreeError naming the event
    and the column of a value Python cannot hold (bytes that are no UTF-8, a date past
    year 9999), as ``pbtree match`` names it."""
    column = batch.column(name)
    try:
        return column.to_pylist()
    except (OverflowError, ValueError):
        for n, scalar in enumerate(column):
            try:
                scalar.as_py()
            except (OverflowError, ValueError) as exc:
                raise PbtreeError(f"{_event(event_ids, n)}: column {name!r}: "
                                  f"{unheld(column.type, exc)}") from None
        raise


def _event(event_ids: pa.Array, n: int) -> str:
    """Event ``n`` of a batch, by its label as an error names it."""
    try:
        return f"event {event_ids[n].as_py()!r}"
    except (OverflowError, ValueError):  # the label is the value Python cannot hold
        return "an event whose label Python cannot hold"


def _integer_columns(df) -> dict[str, pa.DataType]:
    """The columns of ``df`` that Spark reads as integers (``read_as_integers``), with
    their types in the input files."""
    return {f.name: f.type for f in input_fields(df.inputFiles()) if read_as_integers(f.type)}


def _rows(directory: str) -> int:
    """Rows in the Parquet parts of a job's output directory."""
    return sum(pq.read_metadata(f).num_rows
               for f in glob.glob(os.path.join(directory, "*.parquet")))


def _with_row_numbers(spark, df, row: str):
    """``df`` plus its 0-based row number over the input files taken in path order, as the
    column ``row``."""
    from pyspark.sql import functions as F

    path, index = F.col(f"{METADATA}.file_path"), F.col(f"{METADATA}.row_index")
    counts = sorted(((row[0], row[1]) for row in df.groupBy(path).count().collect()),
                    key=lambda found: input_path(found[0]))  # by path, not by escaped URI
    offsets, total = [], 0
    for name, count in counts:
        offsets += [F.lit(name), F.lit(total)]
        total += count
    start = F.create_map(*offsets)[path] if offsets else F.lit(0)
    return df.withColumn(row, (start + index).cast("long"))


def check(index_path: str, events_path: str, output: str, force: bool) -> None:
    """Refuse a match-batch job before it starts (the CLI calls this before starting Spark)."""
    check_outputs({"the index": index_path, "the events": events_path},
                  {"the output": output}, force)


def run(spark, index_path: str, events_path: str, output: str, *, event_id: str | None = None,
        force: bool = False, timings: Timings | None = None) -> MatchResult:
    """Write the matches of every event in ``events_path`` to Parquet at ``output``, each
    labelled by the event's ``event_id`` column, or with none (None or ``""``) by its row
    over the files in path order: a label every event has."""
    from pyspark.sql.pandas.types import from_arrow_type

    check(index_path, events_path, output, force)
    event_id = event_id or None
    result = MatchResult(timings=timings or Timings())
    with pbtree.open(index_path, readonly=True) as index:
        id_type = subscription_id_type(index)
    staging = Staging(output, force)
    try:
        with result.timings.stage("read"):
            spark.conf.set(NANOS_AS_LONG, "true")
            df = read_parquet(spark, events_path)
            integers = _integer_columns(df)
            if event_id is not None and event_id not in df.columns:
                raise InputError(f"{events_path}: no event id column {event_id!r}; the columns "
                                 f"are {df.columns}")
            row = unused(ROW_NUMBER, df.columns)  # an event attribute may bear the name
            if event_id is None:
                df, event_id = _with_row_numbers(spark, df, row), row
        event_type = df.schema[event_id].dataType
        schema = (f"{EVENT_ID} {event_type.simpleString()}, "
                  f"{SUBSCRIPTION_ID} {from_arrow_type(id_type).simpleString()}")
        seen = spark.sparkContext.accumulator(0)
        task = _match_task(os.path.abspath(index_path), df.columns, event_id, id_type, seen,
                           integers, row)
        out = os.path.join(staging.path, "matches")
        with result.timings.stage("match"), result.timings.watch(spark, "match-batch"), \
                task_errors(), typed_alike(df.inputFiles()):
            safe_columns(df).mapInArrow(task, schema).write.parquet(out)
        with result.timings.stage("finish"):
            for name in os.listdir(out):
                os.rename(os.path.join(out, name), os.path.join(staging.path, name))
            os.rmdir(out)
            result.events, result.matches = seen.value, _rows(staging.path)
            staging.commit()
        return result
    except BaseException:
        staging.discard()
        raise
