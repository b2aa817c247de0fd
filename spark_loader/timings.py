"""Stage timings for the summary line, and periodic progress of running Spark stages."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TextIO


class Timings:
    """Wall-clock seconds per named stage, in the order they ran; and whether running
    stages may print progress (``watch``), which --quiet turns off."""

    def __init__(self, progress: bool = True) -> None:
        self.seconds: dict[str, float] = {}
        self.started = time.perf_counter()
        self.progress = progress

    def watch(self, spark, label: str) -> AbstractContextManager[None]:
        """``watch`` the stages of the block, unless progress is off."""
        return watch(spark, label) if self.progress else nullcontext()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def total(self) -> float:
        return time.perf_counter() - self.started

    def line(self) -> str:
        parts = [f"{name} {sec:.1f} s" for name, sec in self.seconds.items()]
        return ", ".join([*parts, f"total {self.total():.1f} s"])


@contextmanager
def watch(spark, label: str, stream: TextIO | None = None, every: float = 5.0) -> Iterator[None]:
    """While the block runs, print the task counts of active Spark stages every ``every`` s.

    Only when ``stream`` (default: standard error) is a terminal, as the pbtree CLI does.
    """
    stream = stream or sys.stderr
    if not stream.isatty():
        yield
        return
    stop = threading.Event()
    start = time.perf_counter()
    tracker = spark.sparkContext.statusTracker()

    def report() -> None:
        while not stop.wait(every):
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    print(f"{label}: {info.numCompletedTasks}/{info.numTasks} tasks done, "
                          f"{info.numActiveTasks} running "
                          f"({time.perf_counter() - start:.0f} s)", file=stream, flush=True)

    thread = threading.Thread(target=report, name="pbtree-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
