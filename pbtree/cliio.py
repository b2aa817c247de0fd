"""Streams in and out of the pbtree command.

In: records of a JSON Lines file, a Parquet file or standard input, read as they arrive.
Out: match results as JSON Lines or Parquet.
"""

from __future__ import annotations

import json
import math
import os
import select
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO, Any

import pbtree
from pbtree.samples import is_parquet_path
from pbtree.staging import as_created

READ_ROWS = 1000  # Parquet rows decoded at a time


#: longest integer literal read from JSON: beyond ±2^63 every id and value is refused
#: anyway, and Python refuses to read ones over 4,300 digits with an obscure message
MAX_INT_DIGITS = 40


def _json_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits} digits is out of range")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # a finite literal beyond the double range
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def decode_json(text: str | bytes) -> Any:
    """A JSON value, or ValueError saying why the text is not one: bad syntax or encoding,
    nesting too deep, or a number out of range (a finite literal that would become ±inf,
    an integer of more than MAX_INT_DIGITS digits), as the expression language refuses
    them."""
    try:
        return json.loads(text, parse_int=_json_int, parse_float=_json_float)
    except json.JSONDecodeError as exc:
        raise ValueError(exc.msg) from None
    except RecursionError:
        raise ValueError("nested too deeply") from None


class CliError(Exception):
    """The command failed for a reason the message explains (exit status 1)."""


# ---------------------------------------------------------------------------------------
# input


@dataclass
class Bad:
    """A record that could not be decoded, with the reason."""

    message: str


Record = tuple[int, Any]  # (line number from 1 or row number from 0, value or Bad)


def _stdin_lines() -> Iterator[bytes | None]:
    """Lines of standard input as they arrive; None whenever no more input is ready yet."""
    fd = sys.stdin.fileno()
    pending = b""
    while True:
        if not select.select([fd], [], [], 0)[0]:
            yield None
            select.select([fd], [], [])
        data = os.read(fd, 1 << 16)
        if not data:
            break
        pending += data
        *lines, pending = pending.split(b"\n")
        yield from lines
    if pending:
        yield pending


def _is_parquet(path: str) -> bool:
    """Whether a file starts with the Parquet magic bytes."""
    with open(path, "rb") as src:
        return src.read(4) == b"PAR1"


class Source:
    """Records of a JSON Lines file, a Parquet file or standard input (path None or ``-``)."""

    def __init__(self, path: str | None) -> None:
        self.stdin = path in (None, "-")
        self.name = "<stdin>" if self.stdin else str(path)
        self.parquet = not self.stdin and _is_parquet(self.name)
        self.done = 0  # bytes (JSON Lines) or rows (Parquet) consumed so far
        self.total: int | None = None
        if self.parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            # Measured: with the default mimalloc pool and reader threads, peak memory grows with
            # the file; the system allocator, one thread and a buffered stream keep it nearly flat.
            pa.set_memory_pool(pa.system_memory_pool())
            self.file = pq.ParquetFile(self.name, buffer_size=1 << 20, pre_buffer=False)
            self.total = self.file.metadata.num_rows
        elif not self.stdin:
            self.total = os.path.getsize(self.name)

    def where(self, n: int) -> str:
        """``file:LINE`` (JSON Lines, from 1) or ``file row N`` (Parquet, from 0)."""
        return f"{self.name} row {n}" if self.parquet else f"{self.name}:{n}"

    def records(self) -> Iterator[Record | None]:
        """(number, value) pairs; None marks a pause in standard input (flush what you have)."""
        if self.parquet:
            return self._parquet_rows()
        if self.stdin:
            return self._json_lines(_stdin_lines())
        return self._json_file()

    def _json_file(self) -> Iterator[Record | None]:
        with open(self.name, "rb") as src:
            yield from self._json_lines(src)

    def _json_lines(self, lines: Iterable[bytes | None]) -> Iterator[Record | None]:
        n = 0
        for line in lines:
            if line is None:
                yield None
                continue
            n += 1
            self.done += len(line)
            if not line.strip():
                continue
            try:
                yield n, decode_json(line)
            except ValueError as exc:
                yield n, Bad(f"not valid JSON ({exc})")

    def _parquet_rows(self) -> Iterator[Record]:
        n = 0
        for batch in self.file.iter_batches(batch_size=READ_ROWS, use_threads=False):
            for row in batch.to_pylist():
                yield n, row
                n += 1
            self.done = n

    def predicate_layout(self) -> bool:
        """Whether this is Parquet in the predicate layout (id, attr, op, value)."""
        if not self.parquet:
            return False
        from spark_loader.layouts import PREDICATE, detect

        return detect(self.file.schema_arrow) == PREDICATE

    def predicate_subscriptions(self) -> list[tuple[str, Any, list]]:
        """All subscriptions of a predicate-layout file (an id's rows may be anywhere)."""
        from spark_loader.layouts import predicates

        table = self.file.read(columns=["id", "attr", "op", "value"])
        subs, rejects = predicates(table)
        if rejects:
            row, sub_id, reason = min(rejects, key=lambda r: (r[2].startswith("another row"), r))
            raise CliError(f"{self.where(row)}: subscription {sub_id!r}: {reason}")
        self.total = len(subs)
        return [(self.name, sub_id, preds) for sub_id, _, preds in subs]


def batches(records: Iterable[Record | None], size: int) -> Iterator[list[Record]]:
    """Records grouped by ``size``; a pause in the input (None) flushes early."""
    batch: list[Record] = []
    for record in records:
        if record is not None:
            batch.append(record)
            if len(batch) < size:
                continue
        if batch:
            yield batch
            batch = []
    if batch:
        yield batch


# ---------------------------------------------------------------------------------------
# output


class JsonOut:
    """Results as JSON Lines, flushed after every batch."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, labels: list, results: list, count: bool) -> None:
        """One line per event: its label and its match ids, or (``count``) their number."""
        key = "count" if count else "matches"
        self.stream.write("".join(
            json.dumps({"event": label, key: r}, ensure_ascii=False) + "\n"
            for label, r in zip(labels, results, strict=True)))
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not sys.stdout:
            self.stream.close()

    finish = close  # every line is written as it comes


class ParquetOut:
    """Results as Parquet: columns ``event`` and ``matches`` (list) or ``count``.

    Match ids are int64 when every id in the index is an int, else strings (as match-batch).
    """

    def __init__(self, path: str, shown_as: str, index: pbtree.Index, count: bool) -> None:
        from spark_loader.match import subscription_id_type

        self.path, self.shown_as, self.count = path, shown_as, count
        self.id_type = subscription_id_type(index)
        self.writer: Any = None

    def write(self, labels: list, results: list, count: bool) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not labels:  # an empty batch (all skipped) would type its columns null
            return
        try:
            label_column = pa.array(labels)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise CliError(f"{self.shown_as}: Parquet needs one type per column, but the event "
                           f"labels mix types ({exc}); write JSON Lines instead") from None
        try:
            table = pa.table({"event": label_column,
                              "count" if count else "matches": self._column(results, count)})
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.path, table.schema)
            self.writer.write_table(table.cast(self.writer.schema))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise CliError(f"{self.shown_as}: a batch does not fit the columns written so far "
                           f"({exc}): its event labels changed type, or the index gained "
                           f"string ids while matching; write JSON Lines instead") from None

    def _column(self, results: list, count: bool) -> Any:
        import pyarrow as pa

        if count:
            return pa.array(results, pa.int64())
        if self.id_type == pa.string():
            results = [[str(i) for i in r] for r in results]
        return pa.array(results, pa.list_(self.id_type))

    def finish(self) -> None:
        """Close the file; with no results at all, write the empty columns."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.writer is None:
            name = "count" if self.count else "matches"
            pq.write_table(pa.table({"event": pa.array([], pa.int64()),
                                     name: self._column([], self.count)}), self.path)
        self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


@contextmanager
def open_output(path: str | None, index: pbtree.Index, source: Source | None,
                count: bool) -> Iterator[JsonOut | ParquetOut]:
    """Where match results go: standard output (None or ``-``), Parquet by suffix, else JSON.

    A new or regular file is written under a hidden name beside it and renamed into place
    when the command succeeds: a failed command leaves no partial output, and an existing
    file is replaced only then (a device, pipe or link is written in place). Writing over
    the input is refused.
    """
    if path is None or path == "-":
        out = JsonOut(sys.stdout)
        yield out
        return
    if source is not None and not source.stdin and os.path.exists(path) \
            and os.path.samefile(path, source.name):
        raise CliError(f"{path}: is the input file; write the results elsewhere")
    in_place = os.path.lexists(path) and not (os.path.isfile(path)
                                              and not os.path.islink(path))
    if in_place:  # a device, pipe or link: written as the user pointed at it
        target = path
    else:
        fd, target = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".partial",
                                      dir=os.path.dirname(os.path.abspath(path)))
        os.close(fd)
    out: JsonOut | ParquetOut | None = None
    try:
        if not in_place:
            as_created(target, 0o666)
        if is_parquet_path(path):
            out = ParquetOut(target, path, index, count)
        else:
            out = JsonOut(open(target, "w", encoding="utf-8"))  # noqa: SIM115
        yield out
        out.finish()
        if not in_place:
            os.replace(target, path)
    except BaseException:
        if out is not None:
            out.close()
        if not in_place:
            with suppress(FileNotFoundError):
                os.remove(target)
        raise
