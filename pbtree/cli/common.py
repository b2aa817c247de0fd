"""What every subcommand of the ``pbtree`` command shares, its own and spark_loader's:
the --quiet and --debug options, and informational notes on standard error.

``pbtree.cli.main`` and ``spark_loader.cli`` both import this module, which imports neither:
the pbtree command loads the Spark subcommands, so they must not import it back.
"""

from __future__ import annotations

import argparse
import sys


def note(args: argparse.Namespace, message: str) -> None:
    """An informational line on standard error, unless --quiet."""
    if not args.quiet:
        print(message, file=sys.stderr, flush=True)


def common_options(default: object = argparse.SUPPRESS) -> argparse.ArgumentParser:
    """--quiet and --debug for a subcommand's parser (``parents``), so they are accepted
    after the subcommand too; by default they leave the top-level parser's values."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", default=default,
                        help="no progress or summary on standard error")
    common.add_argument("--debug", action="store_true", default=default,
                        help="show the Python traceback of errors")
    return common
