"""``pbtree build``: Parquet subscriptions to an index directory, one Spark task per shard.

The JVM computes each row's shard (the same CRC-32 as ``pbtree.ids.shard_of``) and routes
it straight to that shard's partition; the task parses its rows on Arrow batches and
bulk-loads the shard's LMDB environment in key order (``pbtree.bulk``). The index is
staged in a hidden directory and renamed into place only after the manifest is written.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from pbtree import bulk
from pbtree.core import check_layout, new_manifest, shard_dir, write_manifest
from pbtree.errors import PbtreeError
from spark_loader import layouts
from spark_loader.progress import Timings, watch
from spark_loader.session import read_parquet, safe_columns, task_errors
from spark_loader.staging import Staging

SHARD = "__pbtree_shard"
REASON = "reason"
SUMMARY = pa.schema([("shard", pa.int32()), ("rows", pa.int64()), ("subscriptions", pa.int64()),
                     ("predicates", pa.int64()), ("rejected", pa.int64()),
                     ("first_reject", pa.string()), ("parse_cpu", pa.float64()),
                     ("load_cpu", pa.float64())])


class BadRowsError(PbtreeError):
    """Input rows could not be indexed and no --rejects path was given."""


@dataclass
class BuildOptions:
    """What ``pbtree build`` was asked to do."""

    input: str
    output: str
    shards: int | None = None
    node_bytes: int = 4096
    rejects: str | None = None
    force: bool = False


@dataclass
class BuildResult:
    """Counts and stage timings of a finished build."""

    layout: str
    shards: int
    rows: int = 0
    subscriptions: int = 0
    predicates: int = 0
    rejected: int = 0
    parse_cpu: float = 0.0  # CPU seconds of all tasks: parsing rows, bulk-loading shards
    load_cpu: float = 0.0
    timings: Timings = field(default_factory=Timings)

    def summary(self) -> str:
        rate = self.subscriptions / max(self.timings.total(), 1e-9)
        return (f"{self.rows} rows read, {self.subscriptions} subscriptions indexed, "
                f"{self.rejected} rows rejected; {self.timings.line()} "
                f"({rate:,.0f} subscriptions/s; tasks used {self.parse_cpu:.1f} s CPU parsing, "
                f"{self.load_cpu:.1f} s loading shards)")


def _shard_column(id_type: pa.DataType):
    """Spark column: the shard of each row's id, exactly ``shard_of(encode_id(id), K)`` mod K."""
    from pyspark.sql import functions as F

    col = F.col("id")
    if pa.types.is_integer(id_type):
        key = F.concat(F.lit(b"i"), F.unhex(F.lpad(F.hex(col.cast("bigint")), 16, "0")))
    else:
        key = F.concat(F.lit(b"s"), F.encode(col, "UTF-8"))
    return F.crc32(key)


def _shard_task(columns: list[str], layout: str, staging: str, rejects_dir: str | None,
                node_bytes: int, shards: int):
    """The mapInArrow function: one partition = one shard's rows -> its environment."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        start = time.process_time()
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches).rename_columns(columns)
        numbers = set(table.column(SHARD).drop_null().to_pylist())
        if len(numbers) > 1:
            raise PbtreeError(f"one build task received shards {sorted(numbers)}")
        shard = numbers.pop() if numbers else -1
        table = table.drop_columns([SHARD])
        subs, rejects = layouts.subscriptions(layout, table)
        parsed = time.process_time()
        if rejects and rejects_dir is not None:
            _write_rejects(rejects_dir, table, rejects, max(shard, 0))
        if shard >= 0 and (rejects_dir is not None or not rejects):
            path = shard_dir(staging, shard)
            shutil.rmtree(path, ignore_errors=True)  # a retried task starts afresh
            bulk.build_shard(path, subs, node_bytes=node_bytes, shard_no=shard, shards=shards)
        first = f"row with id {rejects[0][1]!r}: {rejects[0][2]}" if rejects else None
        yield pa.RecordBatch.from_pylist([{
            "shard": shard, "rows": table.num_rows, "subscriptions": len(subs),
            "predicates": subs.predicates(), "rejected": len(rejects),
            "first_reject": first, "parse_cpu": parsed - start,
            "load_cpu": time.process_time() - parsed}], schema=SUMMARY)

    return run


def _write_rejects(directory: str, table: pa.Table, rejects: list, part: int) -> None:
    rows = pa.array([row for row, _, _ in rejects], pa.int64())
    bad = table.take(rows).append_column(REASON, pa.array([r for _, _, r in rejects],
                                                           pa.string()))
    pq.write_table(bad, os.path.join(directory, f"part-{part:05d}.parquet"))


def run(spark, opts: BuildOptions, timings: Timings | None = None) -> BuildResult:
    """Build the index ``opts.output`` from ``opts.input`` on ``spark``; see module doc."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    timings = timings or Timings()
    check_layout(opts.shards or 1, opts.node_bytes)
    index = Staging(opts.output, opts.force)
    rejects = Staging(opts.rejects, opts.force) if opts.rejects else None
    try:
        with timings.stage("read"):
            df = read_parquet(spark, opts.input)
            schema = to_arrow_schema(df.schema)
            layout = layouts.detect(schema)
        shards = opts.shards or spark.sparkContext.defaultParallelism
        check_layout(shards, opts.node_bytes)
        result = BuildResult(layout, shards, timings=timings)
        task = _shard_task([*df.columns, SHARD], layout, index.path,
                           rejects.path if rejects else None, opts.node_bytes, shards)
        shard = (_shard_column(schema.field("id").type) % shards).cast("int")
        parted = safe_columns(df.withColumn(SHARD, shard))
        parted = parted.repartitionById(shards, parted.columns[-1])
        with timings.stage("parse+build"), watch(spark, "build"), task_errors():
            summaries = parted.mapInArrow(task, from_arrow_schema(SUMMARY)).collect()
        with timings.stage("finish"):
            _finish(result, summaries, index.path, opts, shards)
            if rejects:
                if not os.listdir(rejects.path):
                    pq.write_table(pa.schema([*schema, pa.field(REASON, pa.string())])
                                   .empty_table(), os.path.join(rejects.path, "part-00000.parquet"))
                rejects.commit()
            index.commit()
        return result
    except BaseException:
        index.discard()
        if rejects:
            rejects.discard()
        raise


def _finish(result: BuildResult, summaries: list, staging: str, opts: BuildOptions,
            shards: int) -> None:
    """Check the task summaries, add empty shards, write the manifest."""
    for row in summaries:
        result.rows += row.rows
        result.subscriptions += row.subscriptions
        result.predicates += row.predicates
        result.rejected += row.rejected
        result.parse_cpu += row.parse_cpu
        result.load_cpu += row.load_cpu
    if result.rejected and not opts.rejects:
        first = min((row.shard, row.first_reject) for row in summaries if row.rejected)[1]
        raise BadRowsError(
            f"{result.rejected} of {result.rows} input rows cannot be indexed; first: {first} "
            f"(--rejects PATH indexes the rest and writes these rows there)")
    built = {row.shard for row in summaries}
    for number in range(shards):
        if number not in built:
            bulk.build_shard(shard_dir(staging, number), [], node_bytes=opts.node_bytes,
                             shard_no=number, shards=shards)
    write_manifest(staging, new_manifest(
        shards, opts.node_bytes, created_by="spark", layout=result.layout, input=opts.input,
        rows=result.rows, subscriptions=result.subscriptions, rejected=result.rejected))
