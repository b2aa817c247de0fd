"""``pbtree build``: Parquet subscriptions to an index directory, one Spark task per shard.

Two jobs. *Route*: the JVM reads the input and computes each row's shard (the same CRC-32
as ``pbtree.ids.shard_of``); each input partition's task appends its rows, unparsed, to one
Arrow file per shard in the staging directory. *Build*: one task per shard reads that
shard's files, parses the rows on Arrow arrays and bulk-loads the shard's LMDB environment
in key order (``pbtree.bulk``). Routing through files instead of a Spark shuffle spares the
JVM serialising every row twice. Each row carries its file and its row in that file, which
locate the rows rejected. The index is staged in a hidden directory and renamed
into place only after the manifest is written.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pbtree import bulk, config, layouts
from pbtree.arrowparse import filled
from pbtree.clusters import Estimates
from pbtree.errors import PbtreeError, plural, shown
from pbtree.manifest import check_layout, new_manifest, shard_dir, write_manifest
from pbtree.outputs import check_outputs, commit_with, stage_outputs
from spark_loader.session import (
    METADATA,
    NANOS_AS_LONG,
    input_fields,
    input_path,
    read_as_integers,
    read_parquet,
    safe_columns,
    task_errors,
    typed_alike,
    unused,
)
from spark_loader.timings import Timings

SHARD = "__pbtree_shard"
#: the columns a rejects file adds to the input's: the row's file, its row in that file
#: (from 0) and why it was rejected; "_" is appended to a name the input has
FILE, ROW, REASON = "file", "row", "reason"
REJECTS_CHUNK = 1 << 16  # rows of the rejects file gathered at a time
ROWS = ".rows"  # staging subdirectory of the routed rows, removed before the manifest
ROUTED = pa.schema([("rows", pa.int64())])
SUMMARY = pa.schema([("shard", pa.int32()), ("rows", pa.int64()), ("subscriptions", pa.int64()),
                     ("predicates", pa.int64()), ("rejected", pa.int64()),
                     ("first_derived", pa.bool_()), ("first_file", pa.int32()),
                     ("first_row", pa.int64()), ("first_reject", pa.string()),
                     ("parse_cpu", pa.float64()), ("load_cpu", pa.float64())])


class BadRowsError(PbtreeError):
    """Input rows could not be indexed and no --rejects path was given."""


@dataclass
class BuildOptions:
    """What ``pbtree build`` was asked to do."""

    input: str
    output: str
    shards: int | None = None
    node_bytes: int = config.NODE_BYTES
    rejects: str | None = None
    force: bool = False
    #: selectivity estimates from sample events (``clusters.Estimates.encode``); None: each
    #: shard estimates from its subscriptions' constants
    estimates: bytes | None = None


@dataclass
class BuildResult:
    """Counts and stage timings of a finished build."""

    layout: str
    shards: int
    rows: int = 0
    subscriptions: int = 0
    predicates: int = 0
    rejected: int = 0
    first_reject: str | None = None  # where the first rejected row is, and why
    parse_cpu: float = 0.0  # CPU seconds of all tasks: parsing rows, bulk-loading shards
    load_cpu: float = 0.0
    timings: Timings = field(default_factory=Timings)

    def summary(self) -> str:
        rate = self.subscriptions / max(self.timings.total(), 1e-9)
        first = f" (first: {self.first_reject})" if self.first_reject else ""
        return (f"{plural(self.rows, 'row')} read, {plural(self.subscriptions, 'subscription')} "
                f"indexed, {plural(self.rejected, 'row')} rejected{first}; "
                f"{self.timings.line()} ({rate:,.0f} subscriptions/s; tasks used "
                f"{self.parse_cpu:.1f} s CPU parsing, {self.load_cpu:.1f} s loading shards)")


def _shard_column(id_type: pa.DataType):
    """Spark column: the shard of each row's id, exactly ``shard_of(encode_id(id), K)`` mod K.
    ``id_type`` is the file's: a uint64 id past 2^63 - 1, no id, has none (shard 0 rejects it)."""
    from pyspark.sql import functions as F

    col = F.col("id")
    if id_type == pa.uint64():  # Spark reads it as decimal(20, 0)
        col = F.when(col <= F.lit(2**63 - 1), col.cast("bigint"))
    if pa.types.is_integer(id_type):
        key = F.concat(F.lit(b"i"), F.unhex(F.lpad(F.hex(col.cast("bigint")), 16, "0")))
    else:
        key = F.concat(F.lit(b"s"), F.encode(col, "UTF-8"))
    return F.crc32(key)


def _route_task(staging: str, shards: int, names: list[str], own: dict[str, pa.DataType],
                files: list[str]):
    """The route job's mapInArrow function: one input partition -> one Arrow file per shard.

    Files are written whole under a name of their own task attempt and renamed, so a
    retried or speculative attempt replaces its partition's output with identical rows.
    Rows without a shard (null id) go to shard 0 to be rejected there. The columns
    ``names`` come in, the input's then its file's URI and the row's index in that file,
    and last the shard; the input's in ``own`` go out cast back to their types in the
    files (``_file_types``), and the URI as the file's number in ``files``.
    """
    file_number = {path: n for n, path in enumerate(files)}
    count = len(names) - 2  # the input's columns

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        task = TaskContext.get()
        part, tmp = task.partitionId(), f".{task.taskAttemptId()}.tmp"
        writers: dict[int, tuple[str, pa.ipc.RecordBatchFileWriter]] = {}
        rows = 0
        try:
            for batch in batches:
                rows += batch.num_rows
                shard = filled(batch.column(len(names)), 0).astype(np.int64)
                order = np.argsort(shard, kind="stable")
                uris = pc.dictionary_encode(batch.column(count))
                try:
                    numbers = pa.array([file_number[input_path(uri)]
                                        for uri in uris.dictionary.to_pylist()], pa.int32())
                except KeyError as exc:
                    raise PbtreeError(f"Spark read rows of {exc.args[0]}, not among the input "
                                      f"files it listed") from None
                batch = pa.RecordBatch.from_arrays(
                    [*(column.cast(own[name]) if name in own else column
                       for name, column in zip(names[:count], batch.columns[:count],
                                               strict=True)),
                     numbers.take(uris.indices), batch.column(count + 1)], names=names)
                batch = batch.take(pa.array(order))
                bounds = np.searchsorted(shard[order], np.arange(shards + 1))
                for number in np.flatnonzero(np.diff(bounds)).tolist():
                    if number not in writers:
                        path = os.path.join(_rows_dir(staging, number), f"part-{part:05d}.arrow")
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        writers[number] = (path, pa.ipc.new_file(path + tmp, batch.schema))
                    low, high = bounds[number], bounds[number + 1]
                    writers[number][1].write_batch(batch.slice(low, high - low))
        finally:
            for _, writer in writers.values():
                writer.close()
        for path, _ in writers.values():
            os.replace(path + tmp, path)
        yield pa.RecordBatch.from_pylist([{"rows": rows}], schema=ROUTED)

    return run


def _rows_dir(staging: str, shard: int) -> str:
    return os.path.join(staging, ROWS, f"shard-{shard:04d}")


def _routed(staging: str, shard: int) -> pa.Table | None:
    """The rows routed to ``shard``, in input-partition order; None when there are none."""
    directory = _rows_dir(staging, shard)
    if not os.path.isdir(directory):
        return None
    names = sorted(name for name in os.listdir(directory) if name.endswith(".arrow"))
    tables = [pa.ipc.open_file(pa.memory_map(os.path.join(directory, name))).read_all()
              for name in names]
    return pa.concat_tables(tables) if tables else None


def _shard_task(layout: str, staging: str, rejects_dir: str | None, node_bytes: int,
                shards: int, estimates: bytes | None, reason: str, files: list[str]):
    """The build job's mapInArrow function: a shard number -> that shard's environment;
    ``reason`` names the column of its rejected rows saying why, and ``files`` the input
    files their numbers stand for."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        tmp = f".{TaskContext.get().taskAttemptId()}.tmp"  # unique, also across stage runs
        for batch in batches:
            for shard in batch.column(0).to_pylist():
                summary = _build_shard(shard, layout, staging, rejects_dir, node_bytes, shards,
                                       tmp, estimates, reason, files)
                if summary is not None:
                    yield summary

    return run


def _build_shard(shard: int, layout: str, staging: str, rejects_dir: str | None,
                 node_bytes: int, shards: int, tmp: str, estimates: bytes | None,
                 reason: str, files: list[str]) -> pa.RecordBatch | None:
    """Parse and load one shard, whose rows' last two columns are their file's number and
    row. Its environment and rejects file are written under names of this task attempt
    (``tmp``) and renamed into place, so an attempt retried, or run twice by speculative
    execution, never leaves a half-written one: the first complete copy stays, and later
    ones (identical) are dropped."""
    start = time.process_time()
    table = _routed(staging, shard)
    if table is None:
        return None
    subs, rejects = layouts.subscriptions(layout, table)
    rejects = _located(table, rejects, files)
    parsed = time.process_time()
    if rejects and rejects_dir is not None:
        _write_rejects(rejects_dir, table, rejects, shard, tmp, reason)
    if rejects_dir is not None or not rejects:
        path = shard_dir(staging, shard)
        mine = os.path.join(staging, f".{os.path.basename(path)}{tmp}")
        shutil.rmtree(mine, ignore_errors=True)  # a retried attempt starts afresh
        bulk.build_shard(mine, subs, node_bytes=node_bytes, shard_no=shard, shards=shards,
                         estimates=None if estimates is None else Estimates.decode(estimates))
        try:
            os.rename(mine, path)
        except OSError:  # another attempt's complete copy is in place
            if not os.path.isdir(path):
                raise
            shutil.rmtree(mine, ignore_errors=True)
    return pa.RecordBatch.from_pylist([{
        "shard": shard, "rows": table.num_rows, "subscriptions": subs.subscriptions(),
        "predicates": subs.predicates(), "rejected": len(rejects), **_first(table, rejects),
        "parse_cpu": parsed - start, "load_cpu": time.process_time() - parsed}],
        schema=SUMMARY)


def _places(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a shard's table, its file's number and its row in that file (the last
    two columns)."""
    return tuple(table.column(table.num_columns - k).to_numpy() for k in (2, 1))


def _located(table: pa.Table, rejects: list[layouts.Reject], files: list[str]
             ) -> list[layouts.Reject]:
    """``rejects`` with each reason that points at other rows naming where they are (all
    rows of an id are in one shard), in input order: a repeated id's first two rows, in
    ``pbtree subscribe --file``'s words; the first bad row of a subscription whose other
    rows are refused with it, with its reason."""
    numbers, rows = _places(table)

    def place(row: int) -> str:
        return f"{files[int(numbers[row])]} row {int(rows[row])}"

    def order(row: int) -> tuple[int, int]:
        return int(numbers[row]), int(rows[row])

    repeated: dict[object, list[int]] = {}
    bad: dict[object, list[int]] = {}
    reasons = {}
    for row, sub_id, why in rejects:
        if why.startswith(layouts.REPEATED):
            repeated.setdefault(sub_id, []).append(row)
        elif not why.startswith(layouts.ANOTHER):
            bad.setdefault(sub_id, []).append(row)
            reasons[row] = why
    located = []
    for row, sub_id, why in rejects:
        if why.startswith(layouts.REPEATED):
            where = " and ".join(map(place, sorted(repeated[sub_id], key=order)[:2]))
            why = f"id {shown(sub_id)} is repeated in the input ({where})"
        elif why.startswith(layouts.ANOTHER) and sub_id in bad:
            first = min(bad[sub_id], key=order)
            why = f"{layouts.ANOTHER} of id {shown(sub_id)} is bad ({place(first)}): " \
                  f"{reasons[first]}"
        located.append((row, sub_id, why))
    return located


def _first(table: pa.Table, rejects: list[layouts.Reject]) -> dict:
    """The summary's fields of the rejected row to name, as ``pbtree subscribe --file``
    picks it: the first in input order, one with a reason of its own before one refused
    for another row of its id."""
    if not rejects:
        return {}
    files, rows = _places(table)
    row, sub_id, why = min(rejects, key=lambda r: (r[2].startswith(layouts.ANOTHER),
                                                   files[r[0]], rows[r[0]]))
    return {"first_derived": why.startswith(layouts.ANOTHER), "first_file": int(files[row]),
            "first_row": int(rows[row]),
            "first_reject": why if sub_id is None else f"subscription {sub_id!r}: {why}"}


def _write_rejects(directory: str, table: pa.Table, rejects: list[layouts.Reject],
                   shard: int, tmp: str, reason: str) -> None:
    """A shard's rejected rows, with why, as a hidden Arrow file in the rejects directory
    for ``_merge_rejects``, written whole under this attempt's name (``tmp``) and renamed."""
    bad = table.take(pa.array([row for row, _, _ in rejects], pa.int64()))
    bad = bad.append_column(reason, pa.array([why for _, _, why in rejects], pa.string()))
    path = os.path.join(directory, f".shard-{shard:05d}.arrow")
    with pa.ipc.new_file(path + tmp, bad.schema) as out:
        out.write_table(bad)
    os.replace(path + tmp, path)


def _merge_rejects(directory: str, files: list[str], empty: pa.Schema) -> None:
    """Merge the shards' rejected rows into one Parquet file in input order (file by
    path, then row), each row's file number as its path, each input column in the type
    ``empty`` gives it (``_as_input``); a file of schema ``empty`` when no row was
    rejected. The hidden files of the shards, and of attempts that died half-way, are
    removed."""
    hidden = sorted(name for name in os.listdir(directory) if name.startswith("."))
    tables = [pa.ipc.open_file(pa.memory_map(os.path.join(directory, name))).read_all()
              for name in hidden if name.endswith(".arrow")]
    out = os.path.join(directory, "part-00000.parquet")
    if not tables:
        pq.write_table(empty.empty_table(), out)
    else:
        table = pa.concat_tables(tables)
        at = table.num_columns - 3  # the file's number; then the row, the reason
        table = _as_input(table, pa.schema(list(empty)[:at]))
        order = np.lexsort((table.column(at + 1).to_numpy(), table.column(at).to_numpy()))
        paths = pa.array(files, pa.string())
        writer = None
        for start in range(0, len(order), REJECTS_CHUNK):
            chunk = table.take(pa.array(order[start:start + REJECTS_CHUNK]))
            chunk = chunk.set_column(at, chunk.field(at).with_type(pa.string()),
                                     paths.take(chunk.column(at)))
            writer = writer or pq.ParquetWriter(out, chunk.schema)
            writer.write_table(chunk)
        writer.close()
    for name in hidden:
        os.remove(os.path.join(directory, name))


def _as_input(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with each column of ``schema`` (the input columns, typed as in the input
    files, ``input_fields``) in that type where all its values cast back safely: Spark
    reads unsigned integers wider, large strings and dictionaries as strings. A column
    whose values do not fit (another input file types it otherwise) keeps Spark's type."""
    for i, got in enumerate(table.schema):
        at = schema.get_field_index(got.name)
        want = got.type if at < 0 else schema.field(at).type
        if got.type != want:
            try:
                column = table.column(i).cast(want)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
            table = table.set_column(i, got.with_type(want), column)
    return table


def _file_types(first: dict[str, pa.DataType]) -> dict[str, pa.DataType]:
    """The columns Spark reads as a type other than the input's, uint64 as decimal(20, 0),
    nanosecond timestamps and durations as integers (``read_as_integers``), with their
    types in the input files (``first``). Layouts are checked, and rows parsed and
    rejected, in the file's types, as ``pbtree subscribe --file`` does."""
    return {name: kind for name, kind in first.items()
            if kind == pa.uint64() or read_as_integers(kind)}


def check(opts: BuildOptions) -> None:
    """Refuse a build before it starts (the CLI calls this before starting Spark)."""
    check_layout(1 if opts.shards is None else opts.shards, opts.node_bytes)
    check_outputs({"the input": opts.input}, {"the output": opts.output,
                                              "the rejects": opts.rejects}, opts.force)


def run(spark, opts: BuildOptions, timings: Timings | None = None) -> BuildResult:
    """Build the index ``opts.output`` from ``opts.input`` on ``spark``; see module doc."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    timings = timings or Timings()
    check(opts)
    index, rejects = stage_outputs(opts.output, opts.rejects, opts.force)
    try:
        with timings.stage("read"):
            spark.conf.set(NANOS_AS_LONG, "true")
            df = read_parquet(spark, opts.input)
            files = sorted(map(input_path, df.inputFiles()))  # in input order
            first = {f.name: f.type for f in input_fields(files)}
            own = _file_types(first)
            schema = pa.schema([f.with_type(own.get(f.name, f.type))
                                for f in to_arrow_schema(df.schema, timezone="UTC")])
            try:
                layout = layouts.detect(schema)
            except layouts.LayoutError as exc:
                raise layouts.LayoutError(f"{opts.input}: {exc}") from None
        shards = opts.shards or spark.sparkContext.defaultParallelism
        check_layout(shards, opts.node_bytes)
        result = BuildResult(layout, shards, timings=timings)
        shard = (_shard_column(schema.field("id").type) % shards).cast("int")
        file_col, row_col, reason_col = (unused(name, df.columns)
                                         for name in (FILE, ROW, REASON))
        rows = safe_columns(df.select(
            "*", F.col(f"{METADATA}.file_path").alias(file_col),
            F.col(f"{METADATA}.row_index").alias(row_col),
            shard.alias(unused(SHARD, df.columns))))
        route = _route_task(index.path, shards, [*df.columns, file_col, row_col], own, files)
        with timings.stage("route"), timings.watch(spark, "route"), task_errors(), \
                typed_alike(files):
            routed = rows.mapInArrow(route, from_arrow_schema(ROUTED)).collect()
        task = _shard_task(layout, index.path, rejects.path if rejects else None,
                           opts.node_bytes, shards, opts.estimates, reason_col, files)
        numbers = spark.range(0, shards, 1, shards)
        with timings.stage("parse+build"), timings.watch(spark, "build"), task_errors():
            summaries = numbers.mapInArrow(task, from_arrow_schema(SUMMARY)).collect()
        with timings.stage("finish"):
            _finish(result, sum(row.rows for row in routed), summaries, index.path, opts,
                    shards, files)
            if rejects:
                _merge_rejects(rejects.path, files, pa.schema(
                    [*(f.with_type(first.get(f.name, f.type)) for f in schema),
                     pa.field(file_col, pa.string()), pa.field(row_col, pa.int64()),
                     pa.field(reason_col, pa.string())]))
            commit_with(index, rejects)
        return result
    except BaseException:
        index.discard()
        if rejects:
            rejects.discard()
        raise


def _finish(result: BuildResult, routed: int, summaries: list, staging: str,
            opts: BuildOptions, shards: int, files: list[str]) -> None:
    """Check the task summaries against the rows routed, name the first rejected row (in
    ``files``), add empty shards, write the manifest."""
    for row in summaries:
        result.rows += row.rows
        result.subscriptions += row.subscriptions
        result.predicates += row.predicates
        result.rejected += row.rejected
        result.parse_cpu += row.parse_cpu
        result.load_cpu += row.load_cpu
    if result.rows != routed:
        raise PbtreeError(f"{routed} input rows were routed to shards, but the shards read "
                          f"{result.rows}")
    if result.rejected:
        _, number, row, why = min((s.first_derived, s.first_file, s.first_row, s.first_reject)
                                  for s in summaries if s.rejected)
        result.first_reject = f"{files[number]} row {row}: {why}"
    if result.rejected and not opts.rejects:
        raise BadRowsError(
            f"{result.rejected} of {result.rows} input rows cannot be indexed; first: "
            f"{result.first_reject} (--rejects PATH indexes the rest and writes these rows "
            f"there)")
    shutil.rmtree(os.path.join(staging, ROWS), ignore_errors=True)
    for name in os.listdir(staging):  # shards of task attempts that died half-way
        if name.startswith(".shard-"):
            shutil.rmtree(os.path.join(staging, name), ignore_errors=True)
    built = {row.shard for row in summaries}
    for number in range(shards):
        if number not in built:
            bulk.build_shard(shard_dir(staging, number), [], node_bytes=opts.node_bytes,
                             shard_no=number, shards=shards)
    write_manifest(staging, new_manifest(
        shards, opts.node_bytes, created_by="spark", layout=result.layout, input=opts.input,
        rows=result.rows, subscriptions=result.subscriptions, rejected=result.rejected))
