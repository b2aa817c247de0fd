"""The ``pbtree`` command: create, subscribe, unsubscribe, match, get, stats, verify, generate.

Every subcommand is a handler ``func(args) -> int`` (the exit status). ``main`` turns errors
into one line on standard error: status 2 for usage errors, 1 for failures; ``--debug`` shows
the traceback. Standard output carries results only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from typing import Any

import pbtree
from pbtree import config
from pbtree.cli.common import common_options, note
from pbtree.cli.interrupts import SIGNALS, Interrupted, Stops, terminated
from pbtree.cli.progress import Progress
from pbtree.cli.streams import (
    Bad,
    CliError,
    Record,
    Source,
    batches,
    check_output,
    decode_json,
    open_output,
    output_error,
    output_file,
    sample_events,
)
from pbtree.cli.subscribing import Item, Saved
from pbtree.errors import EventError, IdError, PbtreeError, plural, shown
from pbtree.ids import encode_id
from pbtree.nested import flattened
from pbtree.normalize import normalize
from storage.lists import MAX_NODE_BYTES, MIN_NODE_BYTES

PROG = "pbtree"
_INT_RE = re.compile(r"-?(0|[1-9][0-9]*)")


class UsageError(Exception):
    """The command line is wrong (exit status 2)."""


def parse_id(text: str, string_id: bool = False) -> int | str:
    """A command-line id: an int if it is written like one (``42``, ``-7``), else the string."""
    if not string_id and _INT_RE.fullmatch(text):
        try:
            encode_id(int(text))
        except IdError as exc:
            raise UsageError(f"{exc}; --string-id keeps it the string {text!r}") from None
        return int(text)
    return text


# ---------------------------------------------------------------------------------------
# create, get, stats, verify


def cmd_create(args: argparse.Namespace) -> int:
    with pbtree.create(args.index, shards=args.shards, node_bytes=args.node_bytes):
        pass
    note(args, f"created {args.index} ({plural(args.shards, 'shard')}, "
               f"{args.node_bytes:,}-byte list nodes)")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    sub_id = parse_id(args.id, args.string_id)
    with pbtree.open(args.index, readonly=True) as index:
        try:
            expr = index.get(sub_id)
        except KeyError:
            hint = ""
            if isinstance(sub_id, int) and args.id in index:
                hint = f" (there is a string id {args.id!r}: add --string-id)"
            raise CliError(f"{args.index}: no subscription with id {sub_id!r}{hint}") from None
    print(json.dumps({"id": sub_id, "expr": expr}, ensure_ascii=False) if args.json else expr)
    return 0


_STAT_ROWS = (
    ("subscriptions", "subscriptions"), ("pending", "pending (not yet folded)"),
    ("staged", "staged (folded, not yet merged into trees)"),
    ("dead", "removed (postings not yet purged from trees)"),
    ("predicates", "predicates (core)"),
    ("attributes", "attributes"), ("shards", "shards"), ("node_bytes", "list node size (bytes)"),
    ("leaf_items", "leaf items"), ("gt_nodes", "GT list nodes"), ("gt_items", "GT list items"),
    ("lt_nodes", "LT list nodes"), ("lt_items", "LT list items"),
    ("ineq_nodes", "INEQ list nodes"), ("ineq_items", "INEQ list items"),
    ("overflow_sidsets", "overflow SidSets"),
    ("sids", "sids given (live or not, until a recluster)"),
)


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def stats_table(path: str, stats: dict) -> str:
    """The stats of an index as an aligned two-column table."""
    labels = dict(_STAT_ROWS)
    rows = [("index", path)]
    rows += [(labels[k], f"{stats[k]:,}") for k, _ in _STAT_ROWS if k in stats]
    rows += [(k.replace("_", " "), f"{v:,}" if isinstance(v, int) else "-" if v is None else str(v))
             for k, v in stats.items() if k not in labels and k not in ("bytes", "ok")]
    if "bytes" in stats:
        rows.append(("size on disk", _size(stats["bytes"])))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def cmd_stats(args: argparse.Namespace) -> int:
    with pbtree.open(args.index, readonly=True) as index:
        stats = index.stats()
    print(json.dumps(stats, sort_keys=True) if args.json else stats_table(args.index, stats))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    with pbtree.open(args.index, readonly=True) as index:
        report = index.verify()
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        print(f"OK {args.index}: {plural(report.get('subscriptions', 0), 'subscription')} in "
              f"{plural(report.get('shards', 1), 'shard')}; every invariant holds")
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    target = args.output
    parquet = target != "-" and check_output(target)
    with pbtree.open(args.index, readonly=True) as index:
        if target == "-":
            count = _dump_jsonl(index.items(), sys.stdout)
        else:
            with output_file(target) as written:  # nothing half-written at the user's path
                try:
                    if parquet:
                        count = _dump_parquet(list(index.items()), written, target)
                    else:
                        with open(written, "w", encoding="utf-8") as out:
                            count = _dump_jsonl(index.items(), out)
                except OSError as exc:
                    raise output_error(target, exc, written) from None
    note(args, f"{args.index}: dumped {plural(count, 'subscription')} to "
               f"{'standard output' if target == '-' else target}")
    return 0


def _dump_jsonl(items: Iterator[tuple], out: Any) -> int:
    count = 0
    for sub_id, expr in items:
        out.write(json.dumps({"id": sub_id, "expr": expr}, ensure_ascii=False) + "\n")
        count += 1
    return count


def _dump_parquet(items: list[tuple], path: str, shown_as: str) -> int:
    """The expression layout (id, expr); ids must all be integers or all strings, as
    Parquet takes one type a column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [i for i, _ in items]
    kinds = {type(i) for i in ids}
    if len(kinds) > 1:
        raise CliError(f"{shown_as}: the index mixes integer and string ids, and a Parquet "
                       f"column takes one type; dump to a .jsonl file instead")
    id_type = pa.string() if kinds == {str} else pa.int64()
    pq.write_table(pa.table({"id": pa.array(ids, id_type),
                             "expr": pa.array([e for _, e in items], pa.string())}), path)
    return len(ids)


def cmd_explain(args: argparse.Namespace) -> int:
    sub_id = parse_id(args.id, args.string_id)
    try:
        event = decode_json(args.event, event=True)
    except ValueError as exc:
        raise UsageError(f"--event {shown(args.event)}: not valid JSON ({exc})") from None
    with pbtree.open(args.index, readonly=True) as index:
        try:
            report = index.explain(sub_id, event)
        except pbtree.UnknownIdError:
            raise CliError(f"{args.index}: no subscription with id {sub_id!r}") from None
    if args.json:
        print(json.dumps(report, ensure_ascii=False, default=str))
        return 0
    several = len(report["conjunctions"]) > 1
    for n, conjunction in enumerate(report["conjunctions"]):
        if several:
            print(f"conjunction {n + 1}: {'holds' if conjunction['holds'] else 'fails'}")
        for row in conjunction["predicates"]:
            seen = "absent" if row["value"] is None else json.dumps(
                row["value"], ensure_ascii=False, default=str)
            print(f"{'  ' if several else ''}{'holds' if row['holds'] else 'fails'}  "
                  f"{row['predicate']}  (event: {seen})")
    print(f"{shown(sub_id)} {'matches' if report['matches'] else 'does not match'} the event")
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    try:
        with pbtree.open(args.index) as index:
            old = sorted({s.upgraded_from for s in index.shards} - {None})
            shards = sum(s.upgraded_from is not None for s in index.shards)
    except KeyboardInterrupt as stop:  # each shard is upgraded in one transaction
        raise Interrupted(getattr(stop, "signum", signal.SIGINT),
                          "the shards upgraded before the stop stay so, the others are as "
                          "they were; run pbtree upgrade again to finish") from None
    done = (f"upgraded {plural(shards, 'shard')} from format version "
            f"{', '.join(map(str, old))}" if old else "already in this pbtree's format")
    note(args, f"{args.index}: {done}")
    return 0


def cmd_recluster(args: argparse.Namespace) -> int:
    events = None if args.events is None else sample_events(args.events, args.sample)
    with pbtree.open(args.index) as index:
        index.recluster(events)
        count = len(index)
    basis = "the subscriptions' own constants" if events is None else \
        f"{plural(len(events), 'sample event')}"
    note(args, f"{args.index}: chose the access predicates of "
               f"{plural(count, 'subscription')} by {basis}")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    with pbtree.open(args.index) as index:
        moved = index.compact()
    note(args, f"{args.index}: moved {plural(moved, 'pending or staged subscription')} into "
               f"the trees and purged removed ones' postings")
    return 0


# ---------------------------------------------------------------------------------------
# subscribe, unsubscribe


def _file_id(where: str, value: object) -> int | str:
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    try:
        given = json.dumps(value)
    except (TypeError, ValueError):  # a Parquet value JSON has no spelling for
        given = f"a {type(value).__name__} ({shown(value)})"
    raise CliError(f"{where}: id must be an integer or a string, not {given}")


def _decoded(where: str, row: object) -> object:
    """The record itself; one that could not be decoded fails the command."""
    if isinstance(row, Bad):
        raise CliError(f"{where}: {row.message}")
    return row


def subscription_of(where: str, row: object) -> tuple[int | str, Any]:
    """(id, expression) of one input record ``{"id": ..., "expr": ...}``."""
    row = _decoded(where, row)
    if not isinstance(row, dict) or "id" not in row or "expr" not in row:
        raise CliError(f'{where}: expected an object {{"id": ..., "expr": ...}}, '
                       f"found {json.dumps(row, default=str)[:80]}")
    return _file_id(where, row["id"]), row["expr"]


def _subscription_batches(source: Source, size: int) -> Iterator[list[Item]]:
    """(number, where, id, expression) of the input, in batches of ``size``; the number is
    the line (JSON Lines) or row (Parquet), None for the predicate layout.

    Predicate-layout Parquet is read whole first (it sets ``source.total``); the rest streams.
    """
    if source.predicate_layout():
        subs = [(None, *sub) for sub in source.predicate_subscriptions()]
        return (subs[start:start + size] for start in range(0, len(subs), size))
    return ([(n, source.where(n), *subscription_of(source.where(n), row)) for n, row in batch]
            for batch in batches(source.records(), size))


def _explain(index: pbtree.Index, batch: list[Item], replace: bool, exc: PbtreeError,
             written: Saved | None = None) -> str:
    """Which input record made a subscribe batch fail, and why."""
    seen: dict[bytes, int | None] = {}
    for n, where, sub_id, expr in batch:
        at = f"{where}: " if where else ""
        try:
            key = encode_id(sub_id)
            normalize(expr)
        except PbtreeError as bad:
            return f"{at}subscription {sub_id!r}: {bad}"
        if not replace and key in seen and written is not None:
            return written.repeated(where, sub_id, seen[key], n)
        if not replace and (key in seen or sub_id in index):
            first = written.lines_of([key])[0] if written is not None else None
            if first is not None and written is not None:
                return written.repeated(where, sub_id, first, n)
            return (f"{at}subscription id {sub_id!r} already exists (use --replace, or "
                    f"--skip-existing to keep the stored one)")
        seen[key] = n
    return _message(exc)


def _skip_stored(index: pbtree.Index, items: list[Item], written: Saved) -> list[Item]:
    """The items whose id is not in the index yet; an id this command stored itself is a
    repeat in the input, not one to skip."""
    try:
        keys = [encode_id(i) for _, _, i, _ in items]
        missing = {encode_id(i) for i in index.missing([i for _, _, i, _ in items])}
    except PbtreeError as exc:
        raise CliError(_explain(index, items, False, exc, written)) from None
    new = [key in missing for key in keys]
    stored = [(item, key) for item, key, fresh in zip(items, keys, new, strict=True)
              if not fresh]
    for (n, where, sub_id, _), first in zip([item for item, _ in stored],
                                            written.lines_of([key for _, key in stored]),
                                            strict=True):
        if first is not None:
            raise CliError(written.repeated(where, sub_id, first, n))
    return [item for item, fresh in zip(items, new, strict=True) if fresh]


def _summary(written: Saved, replace: bool, before: int, after: int) -> str:
    """The last line of subscribe --file: how many subscriptions it saved, and, with
    --replace, how many of those the index held already and how many ids came twice."""
    kept = written.distinct() if replace else written.records - written.skipped
    line = f"subscribed {plural(kept, 'subscription')} from {written.source.name}"
    notes = []
    if replace and kept > after - before:
        notes.append(f"{kept - (after - before):,} replaced a stored one")
    if replace and written.records > kept:
        notes.append(f"{written.records - kept:,} records repeated an earlier id of the input "
                     f"and replaced it")
    if written.skipped:
        notes.append(f"skipped {plural(written.skipped, 'id')} already in the index")
    if notes:
        line += f" ({'; '.join(notes)})"
    return line + f"; the index holds {plural(after, 'subscription')}"


def cmd_subscribe(args: argparse.Namespace) -> int:
    if args.replace and args.skip_existing:
        raise UsageError("give --replace or --skip-existing, not both")
    if args.file is None:
        if args.id is None or args.expr is None:
            raise UsageError("give ID and EXPR, or --file FILE")
        sub_id = parse_id(args.id, args.string_id)
        with pbtree.open(args.index) as index:
            if args.skip_existing and sub_id in index:
                note(args, f"skipped {sub_id!r}: already in the index")
                return 0
            try:
                index.subscribe(sub_id, args.expr, replace=args.replace)
            except PbtreeError as exc:
                raise CliError(_explain(index, [(None, "", sub_id, args.expr)], args.replace,
                                        exc)) from None
        note(args, f"subscribed {sub_id!r}")
        return 0
    if args.id is not None:
        raise UsageError("give either ID EXPR or --file FILE, not both")
    source = Source(args.file)
    written = Saved(source)
    start = time.monotonic()

    def kept() -> str:
        saved = written.records - written.skipped
        return f"{plural(saved, 'subscription')} saved, every batch whole; {written.resume()}"

    with pbtree.open(args.index) as index, Stops() as stops:
        before = len(index)
        predicate = source.predicate_layout()
        todo = _subscription_batches(source, args.batch)
        with (closing(Progress("subscribe", "subscriptions", source.total, args.quiet)) as bar,
              _stopped_after(lambda: written.records - written.skipped, "saved"),
              _stopped_saying(kept)):
            for items in todo:
                if predicate:
                    source.done = written.records + len(items)
                kept = _skip_stored(index, items, written) if args.skip_existing else items
                with stops.batch():
                    try:
                        index.subscribe_many([(i, e) for _, _, i, e in kept],
                                             replace=args.replace)
                    except PbtreeError as exc:
                        raise CliError(_explain(index, kept, args.replace, exc,
                                                written)) from None
                    written.add(kept, items)
                bar.update(written.records, source.done)
        after = len(index)
    note(args, f"{_summary(written, args.replace, before, after)} "
               f"(in {time.monotonic() - start:.2f} s)")
    return 0


@contextmanager
def _stopped_saying(kept: Callable[[], str]) -> Iterator[None]:
    """A command stopped between batches (``Stops``) says what it kept: ``kept()``."""
    try:
        yield
    except Interrupted as stop:
        raise Interrupted(stop.signum, kept()) from None


@contextmanager
def _stopped_after(done: Callable[[], int], what: str) -> Iterator[None]:
    """A bad record that stops a command names what earlier batches had already
    committed: ``done()`` subscriptions ``what`` (saved, removed), none included."""
    try:
        yield
    except CliError as exc:
        raise CliError(f"{exc} ({plural(done(), 'subscription')} before it "
                       f"{'was' if done() == 1 else 'were'} {what})") from None


def _file_ids(args: argparse.Namespace, source: Source) -> Iterator[list]:
    """The ids of a file to remove, a batch at a time."""
    for batch in batches(source.records(), args.batch):
        ids = []
        for n, row in batch:
            where = source.where(n)
            row = _decoded(where, row)
            sub_id = _file_id(where, row.get("id") if isinstance(row, dict) else row)
            try:  # here, not in unsubscribe_many, which cannot say where it stands
                encode_id(sub_id)
            except IdError as exc:
                raise CliError(f"{where}: {exc}") from None
            ids.append(sub_id)
        yield ids


def cmd_unsubscribe(args: argparse.Namespace) -> int:
    if bool(args.ids) == (args.file is not None):
        raise UsageError("give the ids to remove, or --file FILE (not both)")
    source = Source(args.file) if args.file is not None else None
    if source is not None:
        source.require("id")
    removed = asked = 0
    missing: list = []
    seen: set = set()  # an id given again, in a later batch, is not missing
    given = None if source else [parse_id(i, args.string_id) for i in args.ids]
    with pbtree.open(args.index) as index, Stops() as stops:
        if given is not None and not args.missing_ok:  # the ids given go together or not at all
            absent = index.missing(list(dict.fromkeys(given)))
            if absent:
                raise CliError(f"{plural(len(absent), 'id')} not in the index: "
                               f"{_first_ten(absent, len(absent))}; nothing removed "
                               f"(--missing-ok removes the others)")
        total = source.total if source else None
        with (closing(Progress("unsubscribe", "ids", total, args.quiet)) as bar,
              _stopped_after(lambda: removed, "removed"),
              _stopped_saying(lambda: f"{plural(removed, 'subscription')} removed, every "
                                      f"batch whole; rerun with --missing-ok to remove the "
                                      f"rest")):
            for ids in [given] if given is not None else _file_ids(args, source):
                unique = [i for i in dict.fromkeys(ids) if i not in seen]
                seen.update(unique)
                if len(missing) < 10:  # enough to name in the error
                    missing += index.missing(unique)
                with stops.batch():  # one transaction per shard: a stop waits for all
                    removed += index.unsubscribe_many(unique)
                asked += len(unique)
                bar.update(asked, source.done if source else None)
    if removed < asked and not args.missing_ok:
        named = f": {_first_ten(missing, asked - removed)}" if missing else ""
        raise CliError(f"removed {plural(removed, 'subscription')}; {asked - removed:,} of the "
                       f"ids were not in the index{named} (--missing-ok to ignore)")
    note(args, f"removed {plural(removed, 'subscription')}")
    return 0


def _first_ten(ids: list, count: int) -> str:
    """Up to ten of ``count`` ids, as an error names them."""
    return ("the first ten: " if count > 10 else "") + ", ".join(map(shown, ids[:10]))


# ---------------------------------------------------------------------------------------
# match


def _inline_events(texts: Sequence[str]) -> Iterator[Record]:
    for n, text in enumerate(texts, 1):
        try:
            yield n, decode_json(text, event=True)
        except ValueError as exc:
            raise UsageError(f"--event {shown(text)}: not valid JSON ({exc})") from None


def _match_batch(index: pbtree.Index, events: list, where: Callable[[int], str],
                 numbers: list[int], skip: bool, args: argparse.Namespace
                 ) -> tuple[list, str | None]:
    """match_many (count_many with --count) on a batch: the results, a bad event's None
    with --skip-bad; without it, the results of the events before the first bad one and
    why it is bad."""
    match = index.count_many if args.count else index.match_many
    found = iter(match([e for e in events if not isinstance(e, Bad)], return_errors=True))
    results: list = []
    for n, event in zip(numbers, events, strict=True):
        result = EventError(event.message) if isinstance(event, Bad) else next(found)
        if isinstance(result, EventError):
            if not skip:
                return results, f"{where(n)}: {result}"
            note(args, f"skipped {where(n)}: {result}")
            result = None
        results.append(result)
    return results, None


def cmd_match(args: argparse.Namespace) -> int:
    if args.event and args.events is not None:
        raise UsageError("give an EVENTS file or --event, not both")
    source = None if args.event else Source(args.events, events=True)
    if source is not None and source.stdin and sys.stdin.isatty():
        note(args, "reading events as JSON Lines from the terminal; end with Ctrl-D")
    records = _inline_events(args.event) if source is None else source.records()
    where = source.where if source else (lambda n: f"--event {n}")
    seen = matched = skipped = 0
    unlabelled_noted = False  # that no event of a batch had the --event-id field
    start = time.monotonic()
    with pbtree.open(args.index, readonly=True) as index:
        total = source.total if source else None
        with (open_output(args.output, index, source, args.count) as out,
              closing(Progress("match", "events", total, args.quiet)) as bar):
            for batch in batches(records, args.batch):
                numbers = [n for n, _ in batch]
                events = [e for _, e in batch]
                reopened = index.reopened
                results, bad = _match_batch(index, events, where, numbers, args.skip_bad,
                                            args)
                if index.reopened != reopened:
                    note(args, f"{args.index} was replaced: matching against the new index "
                               f"from {where(numbers[0])}")
                done = len(results)  # all, or those before a bad event
                kept = [(n, e, r) for n, e, r in zip(numbers[:done], events[:done], results,
                                                      strict=True) if r is not None]
                skipped += len(results) - len(kept)
                found = [_label(e, "id" if args.event_id is None else args.event_id)
                         for _, e, _ in kept]
                labels = [n if label is None else label
                          for label, (n, _, _) in zip(found, kept, strict=True)]
                if args.event_id and not unlabelled_noted and kept and \
                        all(label is None for label in found):
                    unlabelled_noted = True
                    note(args, f"--event-id {args.event_id}: no event of the batch from "
                               f"{where(kept[0][0])} has that field: they are labelled by "
                               f"line or row number")
                out.write(labels, [r for _, _, r in kept], args.count)
                seen += len(kept)
                matched += sum(r if args.count else len(r) for _, _, r in kept)
                bar.update(seen, source.done if source else None)
                if bad is not None:  # a file is left unwritten, but standard output has them
                    answered = "" if args.output else f" ({plural(seen, 'event')} before it " \
                                                       f"answered)"
                    raise CliError(bad + answered)
    took = time.monotonic() - start
    extra = f"; skipped {plural(skipped, 'bad event')}" if skipped else ""
    note(args, f"matched {plural(seen, 'event')} in {took:.2f} s "
               f"({seen / max(took, 1e-9):,.0f} events/s): {plural(matched, 'match')}{extra}")
    return 0


def _label(event: dict, field: str) -> object:
    """The event's id field (a dotted name also nested, as attributes are), None when it
    has none (or ``field`` is empty): it is then labelled by its line (or row) number."""
    if not field:
        return None
    value = event.get(field)
    if value is None and "." in field:
        value = flattened(event).get(field)
    return None if isinstance(value, dict) else value


# ---------------------------------------------------------------------------------------
# generate

_KNOBS = (
    ("attrs", "n_attrs", int, "number of attributes"),
    ("cardinality", "cardinality", int, "distinct values per attribute"),
    ("preds", "preds_per_sub", int, "predicates per subscription"),
    ("event_size", "event_size", int, "attributes per event"),
    ("zipf", "zipf_alpha", float, "Zipf skew of the attribute choice (0 = uniform)"),
    ("eq_ratio", "eq_ratio", float, "share of '=' among the predicates"),
    ("match_prob", "match_prob", float, "target fraction of subscriptions an event matches"),
    ("string_share", "string_share", float, "fraction of string-valued attributes"),
)


def _profiles() -> list[str]:
    try:
        from tools.workloads import PROFILES
    except ImportError:
        return ["ecommerce"]
    return ["ecommerce", *PROFILES]


def cmd_generate(args: argparse.Namespace) -> int:
    from pbtree import samples

    if args.output is None and args.events is None:
        raise UsageError("give -o SUBSCRIPTIONS and/or --events EVENTS")
    for path in (args.output, args.events):
        if path is not None:
            check_output(path)
    knobs = {field: getattr(args, flag) for flag, field, _, _ in _KNOBS
             if getattr(args, flag) is not None}
    if args.profile == "ecommerce":
        if knobs:
            raise UsageError("the workload knobs apply to the synthetic profiles only")
        data = samples.ecommerce(args.subs or 5000, args.event_count or 1000, args.seed)
        subs, events = data.subscriptions, data.events
    else:
        from dataclasses import replace

        from tools.workloads import PROFILES, generate

        if args.event_count is not None:
            knobs["n_events"] = args.event_count
        profile = replace(PROFILES[args.profile], **knobs)
        try:
            wl = generate(profile, args.scale, args.seed, n_subs=args.subs)
        except (ValueError, OSError) as exc:
            raise CliError(f"profile {args.profile}: {exc}") from None
        subs, events = list(wl.expressions()), wl.events
    written = []
    if args.output is not None:
        samples.write_subscriptions(subs, args.output)
        written.append(f"{len(subs):,} subscriptions to {args.output}")
    if args.events is not None:
        try:
            samples.write_events(events, args.events)
        except ValueError as exc:
            raise CliError(f"{args.events}: {exc}") from None
        written.append(f"{len(events):,} events to {args.events}")
    note(args, "wrote " + " and ".join(written))
    return 0


# ---------------------------------------------------------------------------------------
# argument parsing and dispatch


class Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line on standard error with status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _command(sub: Any, name: str, func: Callable[[argparse.Namespace], int], summary: str,
             example: str, aliases: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=summary, description=summary, parents=[common_options()],
                            aliases=list(aliases),
                            epilog="example:\n  " + example.replace("\n", "\n  "),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=func, command=parser.prog)
    return parser


def _int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from low to high."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            span = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{value} is out of range (must be {span})")
        return value

    return convert


def _add_id_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--string-id", action="store_true",
                        help="take ID as a string even if it looks like an integer")


def _add_file_options(parser: argparse.ArgumentParser, file_help: str, switch: str,
                      switch_help: str, noun: str) -> None:
    """--file, one on/off switch, --batch and --string-id: what subscribe and unsubscribe share."""
    parser.add_argument("-f", "--file", metavar="FILE",
                        help=f"{file_help}; - for standard input")
    parser.add_argument(switch, action="store_true", help=switch_help)
    parser.add_argument("--batch", type=_int_in(1), default=config.SUB_BATCH,
                        metavar="N", help=f"{noun} per transaction (default {config.SUB_BATCH})")
    _add_id_options(parser)


def build_parser() -> Parser:
    parser = Parser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A disk-backed PB+tree predicate index for content-based pub/sub.",
        epilog="On the command line an ID that looks like an integer (42, -7; not 007) is an "
               "integer id;\nuse --string-id for the string. Run 'pbtree COMMAND --help' for "
               "examples.")
    parser.add_argument("--version", action="version", version=f"pbtree {pbtree.__version__}")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress or summary on standard error")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks of errors")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    p = _command(sub, "create", cmd_create, "create a new, empty index",
                 "pbtree create alerts.pbt --shards 4")
    p.add_argument("index", metavar="INDEX", help="directory to create (must not hold files)")
    p.add_argument("--shards", type=_int_in(1, 4096), default=1, metavar="K",
                   help="number of shards (default 1)")
    p.add_argument("--node-bytes", type=_int_in(MIN_NODE_BYTES, MAX_NODE_BYTES),
                   default=config.NODE_BYTES,
                   metavar="N", help=f"list node size in bytes, {MIN_NODE_BYTES} to "
                                     f"{MAX_NODE_BYTES} (default {config.NODE_BYTES})")

    p = _command(sub, "subscribe", cmd_subscribe, "add subscriptions",
                 "pbtree subscribe alerts.pbt 1 \"price < 100 and brand = 'acme'\"\n"
                 "pbtree subscribe alerts.pbt --file subs.parquet   # or subs.jsonl, or - ")
    p.add_argument("index", metavar="INDEX")
    p.add_argument("id", metavar="ID", nargs="?", help="subscription id")
    p.add_argument("expr", metavar="EXPR", nargs="?", help="subscription expression")
    p.set_defaults(late=("id", "expr"))
    _add_file_options(p, 'JSON Lines {"id": ..., "expr": ...} or Parquet (columns id, expr)',
                      "--replace", "replace subscriptions whose id exists", "subscriptions")
    p.add_argument("--skip-existing", action="store_true",
                   help="keep subscriptions whose id exists and skip those records (to resume "
                        "a stopped --file)")

    p = _command(sub, "unsubscribe", cmd_unsubscribe, "remove subscriptions",
                 "pbtree unsubscribe alerts.pbt 1 2 wish-7\n"
                 "pbtree unsubscribe alerts.pbt --file gone.jsonl")
    p.add_argument("index", metavar="INDEX")
    p.add_argument("ids", metavar="ID", nargs="*", help="ids to remove")
    p.set_defaults(late=("ids",))
    _add_file_options(p, 'ids as JSON Lines (42, "x" or {"id": ...}) or Parquet (column id)',
                      "--missing-ok", "ids not in the index are no error", "ids")

    p = _command(sub, "match", cmd_match, "match events against the subscriptions",
                 "pbtree match alerts.pbt events.jsonl -o matches.jsonl\n"
                 "pbtree match alerts.pbt --event '{\"price\": 90, \"brand\": \"acme\"}'\n"
                 "tail -f events.jsonl | pbtree match alerts.pbt --count")
    p.add_argument("index", metavar="INDEX")
    p.add_argument("events", metavar="EVENTS", nargs="?",
                   help="JSON Lines or Parquet file of events (default: standard input)")
    p.set_defaults(late=("events",))
    p.add_argument("-e", "--event", action="append", metavar="JSON",
                   help="match this event (a JSON object); repeatable")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write results here (.parquet for Parquet) instead of standard output")
    p.add_argument("-c", "--count", action="store_true", help="output match counts only")
    p.add_argument("--event-id", metavar="FIELD",
                   help="event field that labels results (default id; a dotted name also "
                        "nested; empty: none); events without it are labelled by line number "
                        "(JSON Lines, from 1) or row (Parquet, from 0)")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip events that cannot be matched (reported on standard error)")
    p.add_argument("--batch", type=_int_in(1), default=config.EVENT_BATCH, metavar="N",
                   help=f"events matched together (default {config.EVENT_BATCH})")

    p = _command(sub, "get", cmd_get, "print the normalised expression of a subscription",
                 "pbtree get alerts.pbt 1")
    p.add_argument("index", metavar="INDEX")
    p.add_argument("id", metavar="ID")
    p.add_argument("--json", action="store_true", help='print {"id": ..., "expr": ...}')
    _add_id_options(p)

    p = _command(sub, "stats", cmd_stats, "show the size and shape of an index",
                 "pbtree stats alerts.pbt --json")
    p.add_argument("index", metavar="INDEX")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")

    p = _command(sub, "verify", cmd_verify, "check every invariant of an index",
                 "pbtree verify alerts.pbt")
    p.add_argument("index", metavar="INDEX")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = _command(sub, "dump", cmd_dump,
                 "write every subscription out in the expression layout (id, expr), to "
                 "rebuild, diff or move an index: `pbtree build` or `pbtree subscribe --file` "
                 "of a dump gives an index with the same matches",
                 "pbtree dump alerts.pbt -o alerts.jsonl   # or alerts.parquet, or - ")
    p.add_argument("index", metavar="INDEX")
    p.add_argument("-o", "--output", metavar="FILE", default="-",
                   help="a .jsonl or .parquet file (default -: JSON Lines on standard output)")

    p = _command(sub, "explain", cmd_explain,
                 "show why a subscription matches an event or not: each predicate, the event "
                 "value it saw and whether it holds",
                 "pbtree explain alerts.pbt 1 --event '{\"price\": 42, \"brand\": \"acme\"}'")
    p.add_argument("index", metavar="INDEX")
    p.add_argument("id", metavar="ID", help="subscription id")
    p.add_argument("--event", required=True, metavar="JSON", help="the event, as JSON")
    p.add_argument("--string-id", action="store_true",
                   help="take ID as a string even if it looks like an integer")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = _command(sub, "upgrade", cmd_upgrade,
                 "rewrite an index written by an older pbtree in this one's format (in place; "
                 "opening it for writes does the same)",
                 "pbtree upgrade alerts.pbt")
    p.add_argument("index", metavar="INDEX")

    p = _command(sub, "recluster", cmd_recluster,
                 "choose each subscription's access predicate (the one the trees hold; the "
                 "others are checked on the candidates it brings) anew: the predicate least "
                 "often true in a sample of events, or among the subscriptions' own constants",
                 "pbtree recluster alerts.pbt --events recent.jsonl")
    p.add_argument("index", metavar="INDEX")
    p.add_argument("--events", metavar="FILE",
                   help="sample events, JSON Lines or Parquet (default: no sample; the "
                        "subscriptions' constants stand for the events)")
    p.add_argument("--sample", type=_int_in(1), default=config.SAMPLE_EVENTS, metavar="N",
                   help=f"events read from FILE at most (default {config.SAMPLE_EVENTS:,})")

    p = _command(sub, "compact", cmd_compact,
                 "move pending and staged subscriptions into the trees, and removed ones' "
                 f"postings out of them, now (writes fold every {config.FOLD_AT:,} per shard into "
                 "staged runs, merge those later, and purge removed ones in bulk)",
                 "pbtree compact alerts.pbt", aliases=["fold"])
    p.add_argument("index", metavar="INDEX")

    p = _command(sub, "generate", cmd_generate,
                 "write sample or synthetic subscriptions and events",
                 "pbtree generate ecommerce -o subs.parquet --events events.jsonl\n"
                 "pbtree generate dense --subs 100000 --zipf 1.0 -o subs.parquet")
    p.add_argument("profile", metavar="PROFILE", nargs="?", default="ecommerce",
                   choices=_profiles(), help="one of %(choices)s (default ecommerce)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="subscriptions file (.parquet or .jsonl)")
    p.add_argument("--events", metavar="FILE", help="events file (.parquet or .jsonl)")
    p.add_argument("--subs", type=_int_in(1), metavar="N", help="number of subscriptions")
    p.add_argument("--event-count", type=_int_in(1), metavar="N", help="number of events")
    p.add_argument("--scale", choices=("small", "full"), default="small",
                   help="size of a synthetic profile when --subs is not given")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    knobs = p.add_argument_group("workload knobs (synthetic profiles)")
    for flag, _, kind, text in _KNOBS:
        knobs.add_argument(f"--{flag.replace('_', '-')}", type=kind, metavar="X", help=text)

    _register_spark(sub)
    return parser


def _register_spark(sub: Any) -> None:
    """Add ``build`` and ``match-batch`` from spark_loader when it is installed.

    The one place the pbtree command reaches the Spark layer; spark_loader.cli imports the
    shared options from pbtree.cli.common, never this module (tests/test_layers.py)."""
    try:
        import spark_loader.cli as spark_cli
    except ModuleNotFoundError as exc:
        if exc.name in ("spark_loader", "spark_loader.cli"):
            return
        raise
    spark_cli.register(sub, parents=[common_options()])


def _place_late(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """Give optional positionals written after an option (``match IDX --count FILE``) their
    values: argparse matched them empty before the option. Returns what is left over."""
    for name in getattr(args, "late", ()):
        while extra and (not extra[0].startswith("-") or extra[0] == "-"
                         or _INT_RE.fullmatch(extra[0])):
            value = getattr(args, name)
            if isinstance(value, list):
                value.append(extra.pop(0))
            elif value is None:
                setattr(args, name, extra.pop(0))
                break
            else:
                break
    return extra


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    return [name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices]


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, KeyError | PbtreeError):
        return str(exc.args[0]) if exc.args else type(exc).__name__
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # a Spark error worded by its JVM, which has stopped
        return type(exc).__name__


def _show_warning(message: Warning | str, *_: object, **__: object) -> None:
    """A warning as one line on standard error, as errors are shown."""
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the pbtree command; returns the exit status."""
    warnings.showwarning = _show_warning
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra[-1:] == ["--"]:  # the end of the options, with nothing after: no argument
        extra.pop()
    if not hasattr(args, "func"):
        parser.error("give a command: " + ", ".join(_commands(parser)))
    command = getattr(args, "command", PROG)
    signal.signal(signal.SIGTERM, terminated)
    try:
        if _place_late(args, extra):
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
        return args.func(args)
    except UsageError as exc:
        print(f"{command}: error: {exc} (see '{command} --help')", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        if args.debug:
            raise
        for signum in SIGNALS:  # the command ends: a second stop must not cut its message
            signal.signal(signum, signal.SIG_IGN)
        said = f": {exc}" if isinstance(exc, Interrupted) and str(exc) else ""
        print(f"{PROG}: interrupted{said}", file=sys.stderr)
        return exc.status if isinstance(exc, Interrupted) else 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        if args.debug:
            raise
        expected = isinstance(exc, CliError | PbtreeError | OSError | ValueError)
        hint = "" if expected else f" ({type(exc).__name__}; rerun with --debug for details)"
        print(f"{command}: error: {_message(exc)}{hint}", file=sys.stderr)
        return 1
