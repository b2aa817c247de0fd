"""The ``build`` and ``match-batch`` subcommands of the ``pbtree`` command (Spark jobs).

``register(subparsers)`` adds them to the pbtree CLI; ``python -m spark_loader.cli`` runs
them on their own. PySpark is imported only when a command runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from pbtree import config
from pbtree.cli.common import common_options, note
from pbtree.errors import PbtreeError, plural

_SPARK_HELP = "Spark master URL (default: embedded local[*])"
_CONF_HELP = "Spark setting key=value (repeatable), e.g. spark.driver.memory=8g"


def _spark_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", help=_SPARK_HELP)
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help=_CONF_HELP)


def register(subparsers, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add the ``build`` and ``match-batch`` subcommands to an argparse subparsers object,
    with the options of ``parents`` (the pbtree command's --quiet and --debug)."""
    build = subparsers.add_parser(
        "build", help="build an index from Parquet subscriptions with Spark", parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  pbtree build subs.parquet -o alerts.pbt --shards 4 "
               "--rejects bad-rows.parquet",
        description="Build an index from a Parquet file, directory or glob in the expression "
                    "layout (id, expr) or the predicate layout (id, attr, op, value).")
    build.add_argument("input", help="Parquet file, directory or glob")
    build.add_argument("-o", "--output", required=True, metavar="INDEX",
                       help="index directory to create")
    build.add_argument("--shards", type=int, help="number of shards (default: Spark's "
                                                  "default parallelism)")
    build.add_argument("--node-bytes", type=int, default=config.NODE_BYTES,
                       help=f"list node size in bytes (default {config.NODE_BYTES})")
    build.add_argument("--rejects", metavar="PATH", help="write bad rows to Parquet at PATH "
                       "in input order, adding columns file, row (from 0) and reason, and "
                       "index the rest (default: fail)")
    build.add_argument("--force", action="store_true", help="replace an existing INDEX "
                       "(and rejects PATH)")
    build.add_argument("--sample-events", metavar="FILE",
                       help="choose access predicates by these events, JSON Lines or Parquet "
                            "(the first 10,000; default: by the subscriptions' constants)")
    _spark_options(build)
    build.set_defaults(func=build_command, command=build.prog)

    match = subparsers.add_parser(
        "match-batch", help="match a Parquet file of events against an index with Spark",
        parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  pbtree match-batch alerts.pbt events.parquet -o matches.parquet "
               "--event-id order_id",
        description="Match every event (one column per attribute) against INDEX and write "
                    "Parquet with columns event_id and subscription_id, one row per match.")
    match.add_argument("index", help="index directory")
    match.add_argument("events", help="Parquet file, directory or glob of events")
    match.add_argument("-o", "--output", required=True, metavar="MATCHES",
                       help="Parquet directory to write")
    match.add_argument("--event-id", metavar="COLUMN",
                       help="column holding the event id (default, or '': the row number, which "
                            "every event has)")
    match.add_argument("--force", action="store_true", help="replace an existing MATCHES")
    _spark_options(match)
    match.set_defaults(func=match_command, command=match.prog)


def _quiet_logging(args: argparse.Namespace) -> None:
    """Without --debug, keep py4j's tracebacks of a call cut by Ctrl-C or by a JVM that
    died off the terminal: the command's one-line error says what happened."""
    if not args.debug:
        logging.getLogger().addHandler(logging.NullHandler())


def build_command(args: argparse.Namespace) -> int:
    """Run ``pbtree build``; prints the summary line; returns the exit code."""
    from spark_loader import build, session
    from spark_loader.timings import Timings

    estimates = None
    if args.sample_events is not None:
        from pbtree.cli.streams import sample_events
        from pbtree.clusters import Estimates

        sampled = sample_events(args.sample_events, config.SAMPLE_EVENTS)
        estimates = Estimates.of_events(sampled).encode()
    opts = build.BuildOptions(args.input, args.output, args.shards, args.node_bytes,
                              args.rejects, args.force, estimates)
    build.check(opts)
    conf = session.parse_conf(args.spark_conf)
    timings = Timings(progress=not args.quiet)
    _quiet_logging(args)
    with session.scratch_beside(args.output) as scratch, \
            session.running(args.master, conf, "pbtree build", timings, scratch) as spark:
        result = build.run(spark, opts, timings)
    note(args, f"pbtree build: {result.layout} layout, {plural(result.shards, 'shard')}: "
                   f"{result.summary()}")
    return 0


def match_command(args: argparse.Namespace) -> int:
    """Run ``pbtree match-batch``; prints the summary line; returns the exit code."""
    from spark_loader import match, session
    from spark_loader.timings import Timings

    match.check(args.index, args.events, args.output, args.force)
    conf = session.parse_conf(args.spark_conf)
    timings = Timings(progress=not args.quiet)
    _quiet_logging(args)
    with session.scratch_beside(args.output) as scratch, \
            session.running(args.master, conf, "pbtree match-batch", timings, scratch) as spark:
        result = match.run(spark, args.index, args.events, args.output,
                           event_id=args.event_id, force=args.force,
                           timings=timings)
    note(args, f"pbtree match-batch: {result.summary()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m spark_loader.cli``."""
    parser = argparse.ArgumentParser(prog="python -m spark_loader.cli")
    register(parser.add_subparsers(dest="command", required=True),
             parents=[common_options(default=False)])
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except PbtreeError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted; nothing was written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
