"""Streams in and out of the pbtree command.

In: records of a JSON Lines file, a Parquet file or standard input, read as they arrive.
Out: match results as JSON Lines or Parquet.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import select
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from decimal import Decimal
from typing import IO, Any

import pbtree
from pbtree import config
from pbtree.outputs import as_created
from pbtree.samples import is_parquet_path

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


def _event_int(text: str) -> int | Decimal:
    return Decimal(text) if len(text.lstrip("-")) > MAX_INT_DIGITS else int(text)


def _event_float(text: str) -> float | Decimal:
    value = float(text)
    return Decimal(text) if math.isinf(value) else value


def decode_json(text: str | bytes, event: bool = False) -> Any:
    """A JSON value, or ValueError saying why the text is not one: bad syntax (and its
    column) or encoding, nesting too deep, or a number out of range (a finite literal that
    would become ±inf, an integer of more than MAX_INT_DIGITS digits), as the expression
    language refuses them. In an ``event`` such a number is a Decimal, compared exactly as
    any number beyond the doubles is (``pbtree.values``)."""
    try:
        if event:
            return json.loads(text, parse_int=_event_int, parse_float=_event_float)
        return json.loads(text, parse_int=_json_int, parse_float=_json_float)
    except json.JSONDecodeError as exc:
        doc = exc.doc.rstrip("\r\n")  # an error past the line's end is at its end
        column = exc.colno if exc.pos < len(doc) else len(doc) - doc.rfind("\n")
        raise ValueError(f"{exc.msg} at column {column}") from None
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


def _lines(fd: int, pending: bytes = b"") -> Iterator[bytes | None]:
    """Lines of standard input, or of a pipe given by name, as they arrive (after
    ``pending``, read before); None whenever no more input is ready yet."""
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


#: the first bytes of a gzip file (RFC 1952)
GZIP_MAGIC = b"\x1f\x8b"


def _is_parquet(path: str) -> bool:
    """Whether a file starts with the Parquet magic bytes."""
    with open(path, "rb") as src:
        return src.read(4) == b"PAR1"


def _row(batch: Any, i: int) -> dict | Bad:
    """Row ``i`` of a record batch, or Bad naming the column whose value Python cannot
    hold (``layouts.unheld``)."""
    from pbtree.layouts import unheld

    row = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        try:
            row[name] = column[i].as_py()
        except (ValueError, OverflowError) as exc:
            return Bad(f"column {name!r}: {unheld(column.type, exc)}")
    return row


def _head(fd: int, size: int) -> bytes:
    """The first ``size`` bytes of a stream (fewer at its end)."""
    head = b""
    while len(head) < size:
        data = os.read(fd, size - len(head))
        if not data:
            break
        head += data
    return head


class Source:
    """Records of a JSON Lines file, a Parquet file or standard input (path None or ``-``)."""

    def __init__(self, path: str | None, events: bool = False) -> None:
        self.events = events  # JSON decoded as events (``decode_json``)
        self.stdin = path in (None, "-")
        self.name = "<stdin>" if self.stdin else str(path)
        if self.stdin and sys.stdin is None:
            raise CliError("standard input is closed: give a file")
        self.stream: tuple[int, bytes] | None = None  # a pipe given by name: (fd, its head)
        if not self.stdin and os.path.isdir(self.name):
            raise CliError(_directory(self.name))
        if not self.stdin and not os.path.isfile(self.name):
            fd = os.open(self.name, os.O_RDONLY)  # read once: a second open would lose input
            self.stream = fd, _head(fd, 4)
            if self.stream[1] == b"PAR1":
                os.close(fd)
                raise CliError(f"{self.name}: Parquet is read from a file, not a pipe")
        self.parquet = not self.stdin and self.stream is None and _is_parquet(self.name)
        self.done = 0  # bytes (JSON Lines) or rows (Parquet) consumed so far
        self.total: int | None = None
        if self.parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            # Measured: with the default mimalloc pool and reader threads, peak memory grows with
            # the file; the system allocator, one thread and a buffered stream keep it nearly flat.
            pa.set_memory_pool(pa.system_memory_pool())
            try:
                self.file = pq.ParquetFile(self.name, buffer_size=1 << 20, pre_buffer=False)
            except (pa.ArrowException, OSError) as exc:
                reason = (str(exc).splitlines() or [type(exc).__name__])[0]
                raise CliError(f"{self.name}: not a readable Parquet file ({reason})") from None
            names = self.file.schema_arrow.names
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise CliError(f"{self.name}: column {twice[0]!r} appears more than once")
            self.total = self.file.metadata.num_rows
        elif not self.stdin and self.stream is None:
            self.total = os.path.getsize(self.name)

    def where(self, n: int) -> str:
        """``file:LINE`` (JSON Lines, from 1) or ``file row N`` (Parquet, from 0)."""
        return f"{self.name} row {n}" if self.parquet else f"{self.name}:{n}"

    def records(self) -> Iterator[Record | None]:
        """(number, value) pairs; None marks a pause in standard input (flush what you have)."""
        if self.parquet:
            return self._parquet_rows()
        if self.stdin:
            return self._json_lines(_lines(sys.stdin.fileno()))
        if self.stream is not None:
            return self._json_stream(*self.stream)
        return self._json_file()

    def _json_stream(self, fd: int, head: bytes) -> Iterator[Record | None]:
        try:
            yield from self._json_lines(_lines(fd, head))
        finally:
            os.close(fd)

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
            if n == 1 and line[:2] == GZIP_MAGIC:  # a file, a pipe or standard input
                raise CliError(f"{self.name}: gzip-compressed; decompress it first (zcat)")
            self.done += len(line)
            if not line.strip():
                continue
            try:
                yield n, decode_json(line, self.events)
            except ValueError as exc:
                # a first line that is no JSON at all: most often a file of another kind
                other = "; files are JSON Lines or Parquet" if n == 1 and \
                    not line.lstrip().startswith((b"{", b"[", b'"')) else ""
                yield n, Bad(f"not valid JSON ({exc}){other}")

    def _parquet_rows(self) -> Iterator[Record]:
        import pyarrow as pa

        n = 0
        batches = self.file.iter_batches(batch_size=config.READ_ROWS, use_threads=False)
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as exc:  # a damaged page, say
                reason = (str(exc).splitlines() or [type(exc).__name__])[0]
                where = f"the rows after row {n - 1:,} are" if n else "it is"
                raise CliError(f"{self.name}: {where} unreadable ({reason})") from None
            if batch is None:
                return
            try:
                rows = batch.to_pylist()
            except (ValueError, OverflowError):  # a value Python cannot hold: whose row?
                rows = [_row(batch, i) for i in range(batch.num_rows)]
            for row in rows:
                yield n, row
                n += 1
            self.done = n

    def predicate_layout(self) -> bool:
        """Whether this is Parquet in the predicate layout (id, attr, op, value)."""
        if not self.parquet:
            return False
        from pbtree.layouts import PREDICATE, LayoutError, detect

        try:
            return detect(self.file.schema_arrow) == PREDICATE
        except LayoutError as exc:
            raise LayoutError(f"{self.name}: {exc}") from None

    def require(self, column: str) -> None:
        """CliError naming the file when it is Parquet without ``column``."""
        names = self.file.schema_arrow.names if self.parquet else [column]
        if column not in names:
            raise CliError(f"{self.name}: no column {column!r} (the columns are {names})")

    def predicate_subscriptions(self) -> list[tuple[str, Any, list]]:
        """All subscriptions of a predicate-layout file (an id's rows may be anywhere)."""
        from pbtree.expr import Disjunction
        from pbtree.layouts import ANOTHER, GROUP, predicates

        columns = ["id", "attr", "op", "value"]
        table = self.file.read(columns=columns + [GROUP] * (GROUP in
                                                           self.file.schema_arrow.names))
        subs, rejects = predicates(table)
        if rejects:
            row, sub_id, reason = min(rejects, key=lambda r: (r[2].startswith(ANOTHER), r))
            raise CliError(f"{self.where(row)}: subscription {sub_id!r}: {reason}")
        self.total = len(subs)
        # the tuple form subscribe takes: a subscription of several groups as their 'or'
        return [(self.name, sub_id, [("or", *preds)] if type(preds) is Disjunction else preds)
                for sub_id, _, preds in subs]


def sample_events(path: str, most: int) -> list[dict]:
    """The first ``most`` events of a JSON Lines or Parquet file, for selectivity estimates
    (``Index.recluster``); a line that is no JSON object, or a file of none, is a
    CliError naming it."""
    source = Source(path, events=True)
    events: list[dict] = []
    for record in source.records():
        if record is None:
            continue
        n, event = record
        if not isinstance(event, dict):
            reason = event.message if isinstance(event, Bad) else "not a JSON object"
            raise CliError(f"{source.where(n)}: {reason}")
        events.append(event)
        if len(events) >= most:
            break
    if not events:
        raise CliError(f"{path}: no sample events in it (leave the option out to estimate "
                       f"from the subscriptions' own constants)")
    return events


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


def _json_label(value: object) -> object:
    """A label JSON has no type for: a Decimal as the number, a time in ISO 8601, other
    values as their text."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


class JsonOut:
    """Results as JSON Lines, flushed after every batch."""

    def __init__(self, stream: IO[str], shown_as: str | None = None) -> None:
        self.stream, self.shown_as = stream, shown_as

    def write(self, labels: list, results: list, count: bool) -> None:
        """One line per event: its label and its match ids, or (``count``) their number."""
        key = "count" if count else "matches"

        def lines(ascii_only: bool) -> str:
            return "".join(json.dumps({"event": label, key: r}, ensure_ascii=ascii_only,
                                      default=_json_label) + "\n"
                           for label, r in zip(labels, results, strict=True))

        try:
            try:
                self.stream.write(lines(False))
            except UnicodeEncodeError:  # a label holds a lone surrogate: escaped, it is JSON
                self.stream.write(lines(True))
            self.stream.flush()
        except OSError as exc:
            if self.shown_as is None:  # standard output: a closed pipe is the reader's end
                raise
            raise output_error(self.shown_as, exc) from None

    def close(self) -> None:
        if self.stream is not sys.stdout:
            with suppress(OSError):  # what could not be written was reported
                self.stream.close()

    def finish(self) -> None:
        """Close the file; an error flushing its last bytes names the output."""
        if self.stream is not sys.stdout:
            try:
                self.stream.close()
            except OSError as exc:
                raise output_error(self.shown_as or self.stream.name, exc) from None


class ParquetOut:
    """Results as Parquet: columns ``event`` and ``matches`` (list) or ``count``.

    Match ids are int64 when every id in the index is an int, else strings (as match-batch).
    """

    def __init__(self, path: str, shown_as: str, index: pbtree.Index, count: bool) -> None:
        from pbtree.layouts import subscription_id_type

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
            kinds = sorted({type(label).__name__ for label in labels})
            mixed = " and ".join(kinds) if len(kinds) > 1 else f"{kinds[0]}s of mixed types " \
                f"({str(exc).splitlines()[0]})"
            raise CliError(f"{self.shown_as}: Parquet needs one type per column, but the event "
                           f"labels mix {mixed}; write JSON Lines instead") from None
        except OverflowError:
            raise CliError(f"{self.shown_as}: an event label is beyond the 64-bit integers "
                           f"of Parquet; write JSON Lines instead") from None
        try:
            table = pa.table({"event": label_column,
                              "count" if count else "matches": self._column(results, count)})
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.path, table.schema)
            before = self.writer.schema.field("event").type
            if label_column.type not in (before, pa.null()):  # a cast would change them
                raise CliError(f"{self.shown_as}: Parquet needs one type per column, but the "
                               f"event labels turned from {before} to {label_column.type}; "
                               f"write JSON Lines instead")
            self.writer.write_table(table.cast(self.writer.schema))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise CliError(f"{self.shown_as}: a batch does not fit the columns written so far "
                           f"({exc}): its event labels changed type, or the index gained "
                           f"string ids while matching; write JSON Lines instead") from None
        except OSError as exc:
            raise output_error(self.shown_as, exc, self.path) from None

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

        try:
            if self.writer is None:
                name = "count" if self.count else "matches"
                pq.write_table(pa.table({"event": pa.array([], pa.int64()),
                                         name: self._column([], self.count)}), self.path)
            if self.writer is not None:
                self.writer.close()
        except OSError as exc:
            raise output_error(self.shown_as, exc, self.path) from None
        finally:
            self.writer = None

    def close(self) -> None:
        if self.writer is not None:
            with suppress(OSError):  # what could not be written was reported
                self.writer.close()
            self.writer = None


#: suffixes of the JSON Lines files results are written to (none: a plain name, a device)
JSON_SUFFIXES = ("", ".jsonl", ".ndjson", ".jsonlines")


def output_error(path: str, exc: OSError, hidden: str | None = None) -> CliError:
    """The error of writing the output ``path``, naming it, never the ``hidden`` file it is
    written under until it is whole."""
    reason = exc.strerror or str(exc)
    if hidden is not None:
        reason = reason.replace(hidden, path)
    return CliError(f"{path}: cannot write the results ({reason})")


def _directory(path: str) -> str:
    """Why a directory is no input, and its Parquet files to give instead (Spark writes a
    job's output, ``--rejects`` too, as part files in a directory)."""
    parts = sorted(name for name in os.listdir(path)
                   if is_parquet_path(name) and not name.startswith((".", "_")))
    shown = ", ".join(os.path.join(path, name) for name in parts[:3])
    more = f" and {len(parts) - 3} more" if len(parts) > 3 else ""
    return f"{path}: is a directory; give a file" + (f": {shown}{more}" if parts else "")


def check_output(path: str) -> bool:
    """Whether results go to ``path`` as Parquet (else JSON Lines); CliError when its suffix
    names a format pbtree cannot write, or it is a directory."""
    if os.path.isdir(path):
        raise CliError(f"{path}: is a directory; give a file name for the results")
    if is_parquet_path(path):
        return True
    suffix = os.path.splitext(path)[1]
    if suffix.lower() in JSON_SUFFIXES or (os.path.exists(path) and not os.path.isfile(path)):
        return False
    raise CliError(f"{path}: pbtree writes JSON Lines (.jsonl, .ndjson) or Parquet (.parquet, "
                   f".pq), not {suffix} files; name the output with one of those suffixes")


@contextmanager
def _naming(path: str, hidden: str) -> Iterator[None]:
    """OSErrors raised inside as ``output_error`` of ``path``."""
    try:
        yield
    except OSError as exc:
        raise output_error(path, exc, hidden) from None


@contextmanager
def open_output(path: str | None, index: pbtree.Index, source: Source | None,
                count: bool) -> Iterator[JsonOut | ParquetOut]:
    """Where match results go: standard output (None or ``-``), Parquet by suffix, JSON Lines
    for the suffixes ``JSON_SUFFIXES``; any other suffix is refused.

    A new or regular file is written under a hidden name beside it and renamed into place
    when the command succeeds: a failed command leaves no partial output, and an existing
    file is replaced only then (a device, pipe or link is written in place). Writing over
    the input is refused. Errors writing name ``path``, not the hidden file.
    """
    if path is None or path == "-":
        out = JsonOut(sys.stdout)
        yield out
        return
    parquet = check_output(path)
    if source is not None and not source.stdin and os.path.exists(path) \
            and os.path.samefile(path, source.name):
        raise CliError(f"{path}: is the input file; write the results elsewhere")
    with output_file(path) as target:
        out: JsonOut | ParquetOut | None = None
        try:
            with _naming(path, target):
                if parquet:
                    out = ParquetOut(target, path, index, count)
                else:
                    out = JsonOut(open(target, "w", encoding="utf-8"), path)  # noqa: SIM115
            yield out
            out.finish()
        except BaseException:
            if out is not None:
                out.close()
            raise


@contextmanager
def output_file(path: str) -> Iterator[str]:
    """The file to write the output ``path`` to: ``path`` itself where it is a device, pipe
    or link (written as the user pointed at it), else a hidden file beside it, renamed into
    place when the block ends (replacing an old file only then) and removed when it fails.
    Errors making, naming or renaming it name ``path``, not the hidden file."""
    if os.path.lexists(path) and not (os.path.isfile(path) and not os.path.islink(path)):
        yield path
        return
    with _naming(path, path):
        fd, target = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".partial",
                                      dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    try:
        with _naming(path, target):
            as_created(target, 0o666)
        yield target
        with _naming(path, target):
            os.replace(target, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.remove(target)
        raise
