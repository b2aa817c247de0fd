"""Python's cyclic garbage collector, paused while a write runs.

A batch of subscriptions makes tens of thousands of objects (predicate tuples, lists,
keys) that live through the call and form no cycles. Every 700 allocations the collector
scans the young ones, frees none of them and moves them to older generations, which in
turn brings on full collections of every tracked object in the process: on 1M `sparse`,
300,000 subscriptions in batches of 1,000 met 21 full collections, 1.5 s of 15. Paused
for the call, the collector meets those objects only once they are gone. A caller that
disabled the collector finds it disabled after the call; one that disables it from
another thread while a write runs finds it enabled again when the write ends.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class _Pauses:
    """Pauses that may overlap (writes in several threads): the collector is enabled
    again when the last ends, if it was when the first began."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.enabled = False

    def begin(self) -> None:
        with self.lock:
            if not self.count:
                self.enabled = gc.isenabled()
                gc.disable()
            self.count += 1

    def end(self) -> None:
        with self.lock:
            self.count -= 1
            if not self.count and self.enabled:
                gc.enable()


_PAUSES = _Pauses()


def collector_paused(method: Callable[P, T]) -> Callable[P, T]:
    """``method``, run with the cyclic garbage collector paused."""
    @functools.wraps(method)
    def paused(*args: P.args, **kwargs: P.kwargs) -> T:
        _PAUSES.begin()
        try:
            return method(*args, **kwargs)
        finally:
            _PAUSES.end()
    return paused
