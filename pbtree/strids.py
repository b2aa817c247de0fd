"""String ids by sid: a column of chunks on disk, a fixed-width byte table for matching.

On disk (the ``strids`` database) chunk ``c`` holds the ids of sids ``SIZE·c …``: their
end offsets (``<u4`` each), then their UTF-8 bytes. A sid whose id is an integer, or that
is free, has an empty id there (as has the id ""), and a chunk of empty ids only is absent.

Matching holds the ids as one table of fixed-width byte strings indexed by sid, each a
newline then the id, so the ids of thousands of matched sids are one fancy index, one
decode and one split. The width leaves out at most a 64th of the ids; those longer, and
those holding a NUL or a newline, are held apart, sorted by sid, as Python strings. So are
all of them where a row for every sid would take more (few string ids among many
integer ones).
"""

from __future__ import annotations

from collections.abc import Iterable

import lmdb
import numpy as np

from pbtree import config
from pbtree.columns import grown
from pbtree.errors import CorruptIndexError
from storage.chunks import Chunks, chunk_key

DB = "strids"
#: sids per chunk: its offsets fill one 4 KiB page, and a batch of 1,000 new string ids
#: rewrites one or two chunks
SIZE = 1024
_ENDS = np.dtype("<u4")
#: bytes an id held apart takes besides its own: a Python string, its sid and pointer
APART_BYTES = 96
#: the byte that begins each row of the table, so that the rows' bytes are the ids joined
_SEP = b"\n"
_NO_SIDS = np.zeros(0, np.int64)
_NO_IDS = np.zeros(0, object)


def string_of(idkey: bytes) -> bytes:
    """The UTF-8 bytes of an encoded id (``pbtree.ids.encode_id``) that is a string, else
    ``b""``: what the column holds for its sid."""
    return idkey[1:] if idkey[:1] == b"s" else b""


def encode_chunk(ids: list[bytes]) -> bytes:
    """A chunk's record: the end offsets of its ``SIZE`` ids (``b""`` for none), then their
    bytes."""
    return np.cumsum(list(map(len, ids)), dtype=_ENDS).tobytes() + b"".join(ids)


def decode_chunk(raw: bytes | memoryview) -> list[bytes]:
    """The ``SIZE`` ids of a chunk's record, as bytes (``b""`` where there is none)."""
    data = bytes(raw)
    ends = _ends(np.frombuffer(data, np.uint8)).tolist()
    body = data[SIZE * _ENDS.itemsize:]
    return [body[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def _ends(view: np.ndarray) -> np.ndarray:
    """The end offsets of a chunk record's ids (int64, a view of its bytes);
    CorruptIndexError when they do not cut the bytes after them."""
    head = SIZE * _ENDS.itemsize
    ends = view[:head].view(_ENDS).astype(np.int64) if view.size >= head else None
    if ends is None or int(ends[-1]) != view.size - head or (np.diff(ends) < 0).any() \
            or ends[0] < 0:
        raise CorruptIndexError(f"a string id chunk of {view.size:,} bytes is damaged: its "
                                f"offsets do not cut its ids")
    return ends


def chunk_records(idkeys: Iterable[tuple[int, bytes]]) -> list[tuple[bytes, bytes]]:
    """The records, in key order, of the column holding these (sid, encoded id) pairs
    (``pbtree.ids.encode_id``): for a shard written whole."""
    chunks: dict[int, list[bytes]] = {}
    for sid, idkey in idkeys:
        found = string_of(idkey)
        if found:
            number, at = divmod(sid, SIZE)
            chunks.setdefault(number, [b""] * SIZE)[at] = found
    return [(chunk_key(number), encode_chunk(ids)) for number, ids in sorted(chunks.items())]


class StringIdWriter:
    """Changes to the string id column inside a write transaction, chunk by chunk."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict) -> None:
        self.chunks = Chunks(txn, dbs[DB])
        self.dirty: dict[int, list[bytes]] = {}

    def set_run(self, first: int, ids: list[bytes]) -> None:
        """Give the sids from ``first`` on the UTF-8 ``ids`` (``b""``: no string id)."""
        done = 0
        while done < len(ids):
            number, at = divmod(first + done, SIZE)
            n = min(SIZE - at, len(ids) - done)
            if any(ids[done:done + n]) or number in self.dirty or self._stored(number):
                self._chunk(number)[at:at + n] = ids[done:done + n]
            done += n

    def clear(self, sid: int) -> None:
        """Drop a freed sid's string id, if it has one."""
        number, at = divmod(sid, SIZE)
        if number in self.dirty or self._stored(number):
            self._chunk(number)[at] = b""

    def _stored(self, number: int) -> bool:
        return self.chunks.get(number) is not None

    def _chunk(self, number: int) -> list[bytes]:
        chunk = self.dirty.get(number)
        if chunk is None:
            raw = self.chunks.get(number)
            chunk = self.dirty[number] = [b""] * SIZE if raw is None else decode_chunk(raw)
        return chunk

    def flush(self) -> None:
        for number, ids in self.dirty.items():
            if any(ids):
                self.chunks.put(number, encode_chunk(ids))
            else:
                self.chunks.delete(number)


def read_views(txn: lmdb.Transaction, dbs: dict) -> dict[int, np.ndarray]:
    """Every chunk record by number, as a byte view into the map (valid while ``txn`` is)."""
    return {number: np.frombuffer(raw, np.uint8)
            for number, raw in Chunks(txn, dbs[DB]).by_number().items()}


def _split(view: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A chunk record's id starts and lengths (int64), and its bytes."""
    ends = _ends(view)
    starts = np.concatenate(([0], ends[:-1]))
    return starts, ends - starts, view[SIZE * _ENDS.itemsize:]


class StringIdTable:
    """The string ids of a shard's sids as matching reads them (``ids``), from one
    snapshot's chunk ``views``, and renewed chunk by chunk for a later one (``renewed``)."""

    __slots__ = ("table", "width", "apart_sids", "apart_ids", "views", "most_apart")

    def __init__(self, width: int, size: int) -> None:
        self.width = width  # of the ids (0: no table, every id held apart)
        self.table = np.full(size if width else 0, _SEP, f"S{width + 1}")
        self.apart_sids, self.apart_ids = _NO_SIDS, _NO_IDS
        self.views: dict[int, np.ndarray] = {}
        self.most_apart = 0  # held apart beyond this, the table is read anew (``renewed``)

    @classmethod
    def of(cls, views: dict[int, np.ndarray]) -> StringIdTable:
        """The table of every chunk in ``views``: its width leaves out at most
        ``config.APART_SHARE`` of the ids, unless the table (a row for every sid, string id
        or not) would take more than holding them all apart (few string ids among many
        integer ones)."""
        lengths = [_split(view)[1] for view in views.values()]
        found = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        found = found[found > 0]
        size = SIZE * (max(views) + 1) if views else 0
        width = 0 if not found.size else max(1, int(np.quantile(
            found, 1 - config.APART_SHARE, method="higher")))
        if size * (width + 1) > found.size * APART_BYTES + int(found.sum()):
            width = 0
        out = cls(width, size)
        out._load(views, list(views))
        out.most_apart = max(SIZE, 2 * out.apart_sids.size)
        return out

    def renewed(self, txn: lmdb.Transaction, dbs: dict,
                written: set[int] | None) -> StringIdTable | None:
        """This table, updated in place for ``txn``, a newer snapshot begun while
        this one's is still open, in the chunks the commits since wrote (``written``, when
        known), else in those whose records are not the ones it read (as
        ``columns.Column.changed`` tells); None when the ids held apart grew past
        ``most_apart`` (read it anew to choose a new width)."""
        if written is None:
            views = read_views(txn, dbs)
            changed = [n for n, view in views.items()
                       if n not in self.views or not np.may_share_memory(view, self.views[n])]
            changed += [n for n in self.views if n not in views]
        else:
            views, chunks = dict(self.views), Chunks(txn, dbs[DB])
            for number in written:
                raw = chunks.get(number)
                if raw is None:
                    views.pop(number, None)
                else:
                    views[number] = np.frombuffer(raw, np.uint8)
            changed = sorted(written)
        if self.width:
            self.table = grown(self.table, SIZE * (max(views) + 1) if views else 0, _SEP)
        self._load(views, changed)
        return None if self.apart_sids.size > self.most_apart else self

    def _load(self, views: dict[int, np.ndarray], numbers: list[int]) -> None:
        """Copy chunks ``numbers`` of ``views`` (missing ones: no string ids) into the table,
        and hold apart those of their ids that do not fit it."""
        width = self.width
        rows = self.table.view(np.uint8).reshape(-1, width + 1)[:, 1:]  # past the newlines
        keep = np.ones(self.apart_sids.size, bool)
        new_sids, new_ids = [], []
        for number in numbers:
            lo = np.searchsorted(self.apart_sids, [number * SIZE, (number + 1) * SIZE])
            keep[lo[0]:lo[1]] = False
            view = views.get(number)
            inside_table = number * SIZE < self.table.size
            if view is None:
                if inside_table:
                    rows[number * SIZE:(number + 1) * SIZE] = 0
                continue
            starts, lengths, body = _split(view)
            bad = np.zeros(SIZE + 1, np.int64)  # ids holding a NUL or a newline
            np.add.at(bad, np.searchsorted(starts, np.flatnonzero((body == 0) | (body == _SEP[0])),
                                           "right"), 1)
            apart = (lengths > width) | (bad[1:] > 0)
            column = np.arange(width)
            inside = column < np.where(apart, 0, lengths)[:, None]
            padded = np.concatenate((body, np.zeros(width, np.uint8)))
            if inside_table:
                rows[number * SIZE:(number + 1) * SIZE] = np.where(
                    inside, padded[np.minimum(starts[:, None] + column, body.size)], 0)
            for at in np.flatnonzero(apart).tolist():
                new_sids.append(number * SIZE + at)
                new_ids.append(bytes(body[starts[at]:starts[at] + lengths[at]]).decode())
            self.views[number] = view
        for number in [n for n in numbers if n not in views]:
            self.views.pop(number, None)
        if new_sids or not keep.all():
            sids = np.concatenate((self.apart_sids[keep], np.array(new_sids, np.int64)))
            ids = np.concatenate((self.apart_ids[keep], np.array(new_ids + [None], object)[:-1]))
            order = np.argsort(sids, kind="stable")
            self.apart_sids, self.apart_ids = sids[order], ids[order]

    def ids(self, sids: np.ndarray) -> list[str]:
        """The string ids of ``sids`` (sorted, each with a string id), in no set order."""
        found: list[str] = []
        if self.apart_sids.size:
            at = np.minimum(np.searchsorted(self.apart_sids, sids), self.apart_sids.size - 1)
            apart = self.apart_sids[at] == sids
            if apart.any():
                found = self.apart_ids[at[apart]].tolist()
                sids = sids[~apart]
        if sids.size and sids[-1] >= self.table.size:  # in no chunk: empty ids
            beyond = int(np.count_nonzero(sids >= self.table.size))
            found, sids = found + [""] * beyond, sids[:sids.size - beyond]
        if not sids.size:
            return found
        text = self.table[sids].tobytes().translate(None, b"\0").decode("utf-8").split("\n")
        del text[0]  # before the first newline
        return text + found
