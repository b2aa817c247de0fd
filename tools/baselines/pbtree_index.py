"""The system under test, pbtree, behind the baselines' protocol."""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

from pbtree.config import NODE_BYTES

#: the harness folds once, timed, after its update phase (``compact``), rather than
#: whenever a shard reaches the default fold_at in the middle of a timed phase
HOLD_FOLDS = 10**9


class PbtreeSystem:
    name = "pbtree"

    def __init__(
        self,
        path: str | None = None,
        shards: int = 1,
        node_bytes: int = NODE_BYTES,
        batch: int = 50_000,
        build_mode: str = "auto",
    ):
        self._tmp = None
        if path is None:
            self._tmp = tempfile.mkdtemp(prefix="bench-pbtree-")
            path = os.path.join(self._tmp, "index")
        self.path = path
        self.shards = shards
        self.node_bytes = node_bytes
        self.batch = batch
        if build_mode not in ("auto", "bulk", "api"):
            raise ValueError("build_mode must be auto, bulk or api")
        self.build_mode = build_mode
        self.bulk_error: str | None = None
        self.ix: Any = None

    def build(self, subs: Sequence[tuple[Any, Sequence]]) -> None:
        """Load the subscriptions: the bulk loader (``pbtree.bulk.build``) where there is
        one and ``build_mode`` allows, else ``subscribe_many`` in batches (one txn each)."""
        import pbtree

        if os.path.exists(self.path):
            shutil.rmtree(self.path)
        bulk = None
        if self.build_mode in ("auto", "bulk"):
            try:
                from pbtree import bulk  # type: ignore[no-redef]
            except ImportError:
                if self.build_mode == "bulk":
                    raise
        if bulk is not None:
            try:
                bulk.build(self.path, subs, shards=self.shards, node_bytes=self.node_bytes)
                self.used_build = "bulk"
                self.ix = pbtree.open(self.path, fold_at=HOLD_FOLDS)
                return
            except Exception as exc:
                if self.build_mode == "bulk":
                    raise
                # a broken bulk loader must not hide the API's numbers; say what happened
                self.bulk_error = f"{type(exc).__name__}: {exc}"
                shutil.rmtree(self.path, ignore_errors=True)
        self.used_build = "api"
        self.ix = pbtree.create(self.path, shards=self.shards, node_bytes=self.node_bytes,
                                fold_at=HOLD_FOLDS)
        for start in range(0, len(subs), self.batch):
            self.ix.subscribe_many(subs[start : start + self.batch])
        self.ix.compact()

    def open(self, readonly: bool = False) -> None:
        import pbtree

        self.ix = pbtree.open(self.path, readonly=readonly, fold_at=HOLD_FOLDS)

    def live(self) -> None:
        """Reopen as an application runs it: folding whenever a shard reaches the default
        ``fold_at`` (the phases before hold folds back, to time one fold on its own)."""
        import pbtree

        self.close()
        self.ix = pbtree.open(self.path)

    def match(self, event: dict[str, Any]) -> list:
        return self.ix.match(event)

    def match_many(self, events: Sequence[dict[str, Any]]) -> list[list]:
        return self.ix.match_many(events)

    def subscribe(self, ident: Any, preds: Sequence) -> None:
        self.ix.subscribe(ident, preds)

    def subscribe_many(self, subs: Iterable[tuple[Any, Sequence]]) -> int:
        return self.ix.subscribe_many(list(subs))

    def unsubscribe(self, ident: Any) -> bool:
        return self.ix.unsubscribe(ident)

    def unsubscribe_many(self, ids: Iterable[Any]) -> int:
        return self.ix.unsubscribe_many(list(ids))

    def flush(self) -> None:
        pass

    def compact(self) -> int:
        return self.ix.compact()

    def stats(self) -> dict[str, Any]:
        return dict(self.ix.stats()) if self.ix is not None else {}

    def data_files(self) -> list[str]:
        return sorted(glob.glob(os.path.join(self.path, "shard-*", "data.mdb")))

    def disk_bytes(self) -> int:
        if self.ix is not None:
            try:
                return int(self.ix.stats()["bytes"])
            except (KeyError, TypeError, AttributeError):
                pass
        total = 0
        for root, _dirs, files in os.walk(self.path):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
        return total

    def close(self) -> None:
        if self.ix is not None:
            self.ix.close()
            self.ix = None

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
