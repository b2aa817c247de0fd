"""Two checkouts of pbtree matching the same events in turns, round after round
(``python -m tools.versionturns PROFILE --old PATH --new PATH``).

A change meant to keep the engine's speed is held to a ratio of the commit before it. This
command generates the profile's workload once and starts one worker process per checkout,
each importing pbtree from its own checkout (its working directory and ``PYTHONPATH``).
Each worker bulk-builds its own index from the same subscriptions, as users write them
(``between`` one predicate), and opens it read-only. Both must give the same matches on
the first events before anything is timed. Then every round times the old checkout and,
right after, the new one on the same events, so a slow spell of the machine slows both
alike. The first round holds the warm-ups and is left out of the median of the ratios
new / old.

The worker is this file run as a script inside the checkout, so its module-level imports
are the standard library only; the parent imports ``tools`` from its own tree when it runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, BinaryIO

#: events matched untimed before each timed batch
WARM = 30
#: events whose matches must be the same in both checkouts before any timing
CHECKED = 30


# ---------------------------------------------------------------------------------------
# worker: runs inside a checkout, answers the parent's requests over its pipes


def _serve(data_path: str, index_path: str, requests: BinaryIO, answers: BinaryIO) -> None:
    """Answer the parent's requests until it asks to quit or closes the pipe.

    The requests are ``("build",)``, ``("matches", n)``, ``("time", warm, events)`` and
    ``("quit",)``. Each answer is ``("ok", value)`` or ``("error", traceback text)``.
    """
    import pbtree
    from pbtree import bulk

    with open(data_path, "rb") as f:
        subs, events = pickle.load(f)
    index = None
    try:
        while True:
            try:
                request = pickle.load(requests)
            except EOFError:
                return
            try:
                if request[0] == "quit":
                    return
                if request[0] == "build":
                    start = time.perf_counter()
                    bulk.build(index_path, subs)
                    seconds = time.perf_counter() - start
                    count = len(subs)
                    subs = None  # a matcher process holds no subscriptions
                    gc.collect()
                    gc.freeze()
                    index = pbtree.open(index_path, readonly=True)
                    value: Any = {"build_s": seconds, "subscriptions": count,
                                  "pbtree": os.path.dirname(os.path.realpath(pbtree.__file__))}
                elif request[0] == "matches":
                    value = [sorted(index.match(event)) for event in events[:request[1]]]
                elif request[0] == "time":
                    _, warm, n = request
                    for event in events[:warm]:
                        index.match(event)
                    batch = events[:n]
                    start = time.perf_counter()
                    for event in batch:
                        index.match(event)
                    value = len(batch) / (time.perf_counter() - start)
                else:
                    raise ValueError(f"unknown request {request!r}")
                answer = ("ok", value)
            except Exception:
                answer = ("error", traceback.format_exc())
            pickle.dump(answer, answers)
            answers.flush()
    finally:
        if index is not None:
            index.close()


def _worker_main(data_path: str, index_path: str) -> None:
    """Serve on stdin and on a copy of stdout; whatever the engine prints goes to stderr,
    so that it cannot corrupt the answers."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    try:
        _serve(data_path, index_path, sys.stdin.buffer, answers)
    except KeyboardInterrupt:
        pass
    finally:
        answers.close()


# ---------------------------------------------------------------------------------------
# parent


class Worker:
    """One checkout's worker process and the pipes to it."""

    def __init__(self, name: str, checkout: str, data_path: str, index_path: str) -> None:
        self.name, self.checkout = name, os.path.abspath(checkout)
        env = dict(os.environ, PYTHONPATH=self.checkout)
        # -P: the directory of this file is not put on sys.path, the checkout's code is
        self.process = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), "--worker", data_path,
             index_path],
            cwd=self.checkout, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(self, *request: Any) -> Any:
        """Send one request and return its answer; RuntimeError if the worker failed."""
        try:
            pickle.dump(request, self.process.stdin)
            self.process.stdin.flush()
            status, value = pickle.load(self.process.stdout)
        except (BrokenPipeError, EOFError):
            raise RuntimeError(f"the {self.name} worker ({self.checkout}) exited with "
                               f"{self.process.wait()}; its stderr says why") from None
        if status != "ok":
            raise RuntimeError(f"the {self.name} worker ({self.checkout}) failed:\n{value}")
        return value

    def stop(self) -> None:
        """Ask the worker to quit, and kill it if it has not within ten seconds."""
        if self.process.poll() is None:
            try:
                pickle.dump(("quit",), self.process.stdin)
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


@contextmanager
def _workers(checkouts: dict[str, str], data_path: str, work: str) -> Iterator[dict[str, Worker]]:
    """One worker per checkout, each stopped when the block ends, however it ends."""
    with ExitStack() as stack:
        workers = {}
        for name, checkout in checkouts.items():
            worker = Worker(name, checkout, data_path, os.path.join(work, name))
            stack.callback(worker.stop)
            workers[name] = worker
        yield workers


def commit_of(checkout: str) -> str:
    """The checkout's commit (``git describe --always --dirty``), or '?' outside git."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=checkout,
                              capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def run(profile: str, old: str, new: str, n_subs: int | None = None, rounds: int = 4,
        events: int = 300, seed: int = 0, log=print) -> dict[str, Any]:
    """Build the profile's subscriptions with each checkout, check that both match
    alike, then time ``events`` events per checkout per round, old then new."""
    from tools.bench import python_ms, turns_median
    from tools.workloads import generate

    if rounds < 1 or events < 1:
        raise ValueError("versionturns times one round or more of one event or more")
    checkouts = {"old": old, "new": new}
    for checkout in checkouts.values():
        if not os.path.isdir(os.path.join(checkout, "pbtree")):
            raise ValueError(f"{checkout} holds no pbtree package")
    wl = generate(profile, "full", seed, n_subs=n_subs)
    batch = wl.events[:max(events, WARM, CHECKED)]
    with tempfile.TemporaryDirectory(prefix="pbtree-versionturns-") as work:
        data_path = os.path.join(work, "workload.pickle")
        with open(data_path, "wb") as f:
            pickle.dump((wl.subscriptions, batch), f, protocol=pickle.HIGHEST_PROTOCOL)
        n = len(wl.subscriptions)
        del wl
        gc.collect()
        with _workers(checkouts, data_path, work) as workers:
            builds = {}
            for name, worker in workers.items():  # one after the other: no build shares a core
                builds[name] = worker.ask("build")
                if builds[name]["pbtree"] != os.path.realpath(os.path.join(checkouts[name],
                                                                          "pbtree")):
                    raise RuntimeError(f"the {name} worker imported {builds[name]['pbtree']}, "
                                       f"not the checkout's pbtree")
                log(f"{name}: built {n:,} subscriptions in {builds[name]['build_s']:.1f} s")
            answers = {name: worker.ask("matches", CHECKED) for name, worker in workers.items()}
            if answers["old"] != answers["new"]:
                first = next(i for i, (a, b) in enumerate(zip(*answers.values(), strict=True))
                             if a != b)
                raise RuntimeError(f"the checkouts match differently (event {first} of the "
                                   f"first {CHECKED}), so they are not timed")
            speed = [python_ms()]
            rates: dict[str, list[float]] = {"old": [], "new": []}
            for i in range(rounds):
                for name, worker in workers.items():
                    rates[name].append(worker.ask("time", WARM, events))
                log(f"round {i + 1}: old {rates['old'][-1]:.0f}, new {rates['new'][-1]:.0f} "
                    f"events/s, new / old {rates['new'][-1] / rates['old'][-1]:.2f}")
            speed.append(python_ms())
    ratios = [b / a for a, b in zip(rates["old"], rates["new"], strict=True)]
    return {
        "profile": profile, "subscriptions": n, "seed": seed, "events": events,
        "warm_up": WARM, "rounds": rounds,
        "checked_events": CHECKED, "agreed": True,
        "matches_per_event": sum(map(len, answers["old"])) / CHECKED,
        "checkouts": {name: {"path": os.path.abspath(path), "commit": commit_of(path),
                             "pbtree": builds[name]["pbtree"], "build_s": builds[name]["build_s"]}
                      for name, path in checkouts.items()},
        "python_ms": speed, "events_per_s": rates, "new_over_old": ratios,
        "median": turns_median(ratios),
    }


def markdown(report: dict[str, Any]) -> str:
    """The rounds as a table, then the median, the builds and the machine's speed."""
    from tools.bench import speed_note

    rates, c = report["events_per_s"], report["checkouts"]
    lines = ["| round | old events/s | new events/s | new / old |", "|---|---|---|---|"]
    for i, ratio in enumerate(report["new_over_old"]):
        lines.append(f"| {i + 1} | {rates['old'][i]:,.0f} | {rates['new'][i]:,.0f} | "
                     f"{ratio:.2f}× |")
    lines += ["", f"{report['profile']}, {report['subscriptions']:,} subscriptions, "
              f"{report['events']} events a round; old {c['old']['commit']}, new "
              f"{c['new']['commit']}. Median new / old of rounds "
              f"{'2..' if report['rounds'] > 1 else ''}{report['rounds']}: "
              f"{report['median']:.2f}×. Builds: old {c['old']['build_s']:.1f} s, new "
              f"{c['new']['build_s']:.1f} s{speed_note(report)}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    from tools.workloads import PROFILES

    about = __doc__.split("\n\n")[0].replace("\n", " ")
    ap = argparse.ArgumentParser(prog="python -m tools.versionturns", description=about)
    ap.add_argument("profile", choices=sorted(PROFILES))
    ap.add_argument("--old", required=True, help="the checkout to hold the other to")
    ap.add_argument("--new", required=True, help="the checkout under test")
    ap.add_argument("--subs", type=int, default=None, help="default: the profile's 1M")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--events", type=int, default=300, help="events per checkout per round")
    ap.add_argument("--json", metavar="FILE", help="also write the report here")
    args = ap.parse_args(argv)
    # a kill (SIGTERM) unwinds like Ctrl-C: the workers are stopped, the temporary files go
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        report = run(args.profile, args.old, args.new, args.subs, args.rounds, args.events)
    except ValueError as exc:
        ap.error(str(exc))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker_main(*sys.argv[2:4])
    else:
        raise SystemExit(main())
