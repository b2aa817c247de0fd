"""Release the read snapshots a process keeps pinned while it does not match.

A shard keeps its last read snapshot between matches (``Shard.matching``), and LMDB
reuses no page freed after the oldest snapshot open in any process: a reader left idle
would make every writer's file grow. One daemon thread per process looks at the shards
every TICK seconds and releases a snapshot that commits have followed once it has been
idle IDLE_SECONDS, or at once when RELEASE_BEHIND commits have followed it; the next
match then reads the shard's tables anew.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Protocol

#: seconds a snapshot that commits have followed may stay pinned with no match
IDLE_SECONDS = 2.0
#: commits that may follow a snapshot pinned with no match running before it is released
RELEASE_BEHIND = 32
#: seconds between two looks at the shards
TICK = 0.25


class Releasing(Protocol):
    def release_idle(self, now: float, idle: float, behind: int) -> bool: ...


_shards: weakref.WeakSet = weakref.WeakSet()
_guard = threading.Lock()
_running_in: int | None = None  # the pid whose watcher thread runs (threads do not fork)


def watch(shard: Releasing) -> None:
    """Have ``shard``'s idle snapshot released from now on (until it is garbage or
    ``forget`` is called)."""
    global _running_in
    with _guard:
        _shards.add(shard)
        if _running_in != os.getpid():
            _running_in = os.getpid()
            threading.Thread(target=_watch, name="pbtree-idle-snapshots", daemon=True).start()


def forget(shard: Releasing) -> None:
    with _guard:
        _shards.discard(shard)


def _watch() -> None:
    """Release idle snapshots until no shard is left to watch."""
    global _running_in
    while True:
        time.sleep(TICK)
        with _guard:
            shards = list(_shards)
            if not shards:
                _running_in = None
                return
        now = time.monotonic()
        for shard in shards:
            shard.release_idle(now, IDLE_SECONDS, RELEASE_BEHIND)
        del shards
