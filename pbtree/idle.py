"""Release the read snapshots a process keeps pinned while it does not match.

A shard keeps its last read snapshot between matches (``Shard.matching``), and LMDB
reuses no page freed after the oldest snapshot open in any process: a reader left idle
would make every writer's file grow. One daemon thread per process looks at the shards
every IDLE_TICK seconds and releases a snapshot no match (nor write of this process) has
used for IDLE_SECONDS once any commit followed it, or for BEHIND_IDLE_SECONDS once
RELEASE_BEHIND commits of other processes did (this process's own writes keep it for
KEEP_PINNED commits, ``Shard._write``); the next match then reads the shard's tables anew.
Those numbers are in ``pbtree.config``.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Protocol

from pbtree import config


def due(behind: int, foreign: int, unused: float) -> bool:
    """Whether a snapshot ``behind`` commits old, ``foreign`` of them by other processes (or
    Index objects), unused for ``unused`` seconds, is to be released."""
    return behind > 0 and unused >= config.IDLE_SECONDS or \
        foreign >= config.RELEASE_BEHIND and unused >= config.BEHIND_IDLE_SECONDS


class Releasing(Protocol):
    def release_idle(self, now: float) -> bool: ...


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
        time.sleep(config.IDLE_TICK)
        with _guard:
            shards = list(_shards)
            if not shards:
                _running_in = None
                return
        now = time.monotonic()
        for shard in shards:
            shard.release_idle(now)
        del shards
