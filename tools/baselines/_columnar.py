"""Columnar encoding of core predicates shared by the in-memory baselines (scan, counting-mem);
``entries`` (a subscription's table entries) serves the SQL baselines too.

Every ``(attribute, type family)`` pair gets a dense *key*. Every constant gets a float64
*code* whose order is the family's order: numbers are their own value, bools 0/1, and the
strings of a key are ranked in a sorted vocabulary of that key's constants (code 2i+1 for
the i-th). An event string that is not a constant gets the even code between its
neighbours, so comparisons on codes are comparisons on strings by code point. Event values
of a family no predicate of that attribute uses have no key and satisfy nothing, which gives
the strong semantics for free.

Predicates become entries ``(key, class, code, local sid)`` with six classes; ``in`` becomes
several EQ entries of one logical predicate (an event has one value per attribute, so at most
one of them can be satisfied and the predicate still counts once).

``SegmentedMatcher`` adds updates on top of immutable segments: unsubscribe sets a tombstone,
subscribe queues the subscription and the next match (or ``flush``) builds a small *delta*
segment from the queue; deltas are rebuilt together while small, never the main segment.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tools.baselines.counter import Counter

NUMBER, STRING, BOOL = 0, 1, 2
EQ, NE, GT, GE, LT, LE = range(6)
N_CLASSES = 6
_CLASS = {"=": EQ, "!=": NE, ">": GT, ">=": GE, "<": LT, "<=": LE}

Subs = Sequence[tuple[Any, Sequence[tuple[str, str, Any]]]]


def family(value: object) -> int:
    t = type(value)
    if t is str:
        return STRING
    if t is bool:
        return BOOL
    if t is int or t is float:
        return NUMBER
    if isinstance(value, bool | np.bool_):
        return BOOL
    if isinstance(value, str):
        return STRING
    if isinstance(value, int | float | np.integer | np.floating):
        return NUMBER
    raise TypeError(f"unsupported value type {type(value).__name__}")


def entries(preds: Sequence[tuple[str, str, Any]]) -> tuple[list[tuple], int]:
    """The entries ``(predicate number, attribute, family, class, constant)`` of one
    subscription's core predicates, identical predicates once (an ``in`` as one predicate of
    several EQ entries, its values once each); and the number of predicates, which a match
    needs satisfied."""
    out: list[tuple] = []
    seen: set = set()
    for attr, op, const in preds:
        if op == "in":
            vals = {(family(v), v): v for v in const}
            dkey: tuple = (attr, op, frozenset(vals))
            if dkey not in seen:
                out += [(len(seen), attr, fam, EQ, v) for (fam, _), v in vals.items()]
                seen.add(dkey)
            continue
        fam = family(const)
        dkey = (attr, op, fam, const)
        if dkey not in seen:
            out.append((len(seen), attr, fam, _CLASS[op], const))
            seen.add(dkey)
    return out, len(seen)


class Segment:
    """Immutable columnar entries of a set of subscriptions, local sids 0..n-1."""

    def __init__(self, subs: Subs, keep_source: bool = False):
        keymap: dict[tuple[str, int], int] = {}
        e_key: list[int] = []
        e_cls: list[int] = []
        e_val: list[Any] = []
        e_sid: list[int] = []
        ids: list[Any] = []
        need: list[int] = []
        for local, (ident, preds) in enumerate(subs):
            ids.append(ident)
            mine, count = entries(preds)
            for _, attr, fam, cls, v in mine:
                e_key.append(keymap.setdefault((attr, fam), len(keymap)))
                e_cls.append(cls)
                e_val.append(v)
            e_sid += [local] * len(mine)
            need.append(count)
        self.n = len(ids)
        self.keymap = keymap
        self.key_family = np.zeros(len(keymap), dtype=np.int8)
        for (_, fam), k in keymap.items():
            self.key_family[k] = fam
        self.ids = _id_array(ids)
        self._id_sorted: tuple[np.ndarray, np.ndarray] | None = None
        self.need = np.asarray(need, dtype=np.int64)
        self.counter = Counter(self.need)  # pbtree's own counting, so all systems count alike
        self.alive = np.ones(self.n, dtype=bool)
        self.n_alive = self.n
        self.source = list(subs) if keep_source else None
        key = np.asarray(e_key, dtype=np.int32)
        # string constants -> codes in each key's sorted vocabulary
        self.vocab: list[list[str] | None] = [None] * len(keymap)
        val = np.empty(len(e_val), dtype=np.float64)
        is_str = self.key_family[key] == STRING if len(key) else np.zeros(0, dtype=bool)
        str_pos = np.flatnonzero(is_str)
        num_pos = np.flatnonzero(~is_str)
        if len(num_pos):
            val[num_pos] = np.asarray([e_val[i] for i in num_pos.tolist()], dtype=np.float64)
        if len(str_pos):
            skeys = key[str_pos]
            svals = np.asarray([e_val[i] for i in str_pos.tolist()], dtype=object)
            order = np.argsort(skeys, kind="stable")
            bounds = np.flatnonzero(np.diff(skeys[order])) + 1
            for grp in np.split(order, bounds):
                k = int(skeys[grp[0]])
                uniq, inv = np.unique(svals[grp], return_inverse=True)
                self.vocab[k] = uniq.tolist()
                val[str_pos[grp]] = 2.0 * inv + 1.0
        self.key = key
        self.cls = np.asarray(e_cls, dtype=np.int8)
        self.val = val
        self.sid = np.asarray(e_sid, dtype=np.int32)

    # -- events ---------------------------------------------------------------------

    def encode_event(self, event: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """(keys, codes) of the event values some predicate of this segment can see."""
        keys: list[int] = []
        codes: list[float] = []
        keymap = self.keymap
        for attr, v in event.items():
            if v is None:
                continue
            fam = family(v)
            k = keymap.get((attr, fam))
            if k is None:
                continue
            if fam == STRING:
                voc = self.vocab[k]
                i = bisect_left(voc, v)  # type: ignore[arg-type]
                code = 2.0 * i + 1.0 if i < len(voc) and voc[i] == v else 2.0 * i  # type: ignore[arg-type]
            else:
                code = float(v)
            keys.append(k)
            codes.append(code)
        return np.asarray(keys, dtype=np.int64), np.asarray(codes, dtype=np.float64)

    # -- ids ------------------------------------------------------------------------

    def locate(self, ident: Any) -> int:
        """Local sid of a live subscription ``ident``, or -1."""
        if self._id_sorted is None:
            order = np.argsort(self.ids, kind="stable")
            self._id_sorted = (self.ids[order], order)
        keys, order = self._id_sorted
        try:
            i = int(np.searchsorted(keys, ident))
        except TypeError:
            return -1
        while i < len(keys) and keys[i] == ident:
            local = int(order[i])
            if self.alive[local]:
                return local
            i += 1
        return -1

    def kill(self, local: int) -> None:
        if self.alive[local]:
            self.alive[local] = False
            self.n_alive -= 1

    def nbytes(self) -> int:
        arrays = sum(a.nbytes for a in vars(self).values() if isinstance(a, np.ndarray))
        return arrays + self.counter.nbytes


def _id_array(ids: list[Any]) -> np.ndarray:
    if all(type(i) is int for i in ids) and (
        not ids or (min(ids) >= -(2**63) and max(ids) < 2**63)
    ):
        return np.asarray(ids, dtype=np.int64)
    arr = np.empty(len(ids), dtype=object)
    arr[:] = ids
    return arr


class SegmentedMatcher:
    """Baseline protocol on top of immutable segments (see module docstring)."""

    name = "segmented"
    #: Delta segments up to this many subscriptions are rebuilt together on flush.
    delta_limit = 200_000

    def build(self, subs: Subs) -> None:
        self.segments: list[Any] = [self._segment(subs, keep_source=False)]
        self.pending: list[tuple[Any, Sequence]] = []

    def _segment(self, subs: Subs, keep_source: bool) -> Any:
        raise NotImplementedError

    def _match_segment(self, seg: Any, event: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    # updates
    def subscribe(self, ident: Any, preds: Sequence) -> None:
        self.pending.append((ident, preds))

    def subscribe_many(self, subs: Iterable[tuple[Any, Sequence]]) -> int:
        before = len(self.pending)
        self.pending.extend(subs)
        return len(self.pending) - before

    def unsubscribe(self, ident: Any) -> bool:
        for i, (pid, _) in enumerate(self.pending):
            if pid == ident:
                del self.pending[i]
                return True
        for seg in reversed(self.segments):
            local = seg.locate(ident)
            if local >= 0:
                seg.kill(local)
                return True
        return False

    def unsubscribe_many(self, ids: Iterable[Any]) -> int:
        return sum(self.unsubscribe(i) for i in ids)

    def flush(self) -> None:
        if not self.pending:
            return
        merged: list[tuple[Any, Sequence]] = []
        keep = []
        for seg in self.segments[1:]:
            if seg.source is not None and seg.n <= self.delta_limit:
                merged.extend(s for s, alive in zip(seg.source, seg.alive, strict=True) if alive)
            else:
                keep.append(seg)
        merged.extend(self.pending)
        self.pending = []
        self.segments = self.segments[:1] + keep + [self._segment(merged, keep_source=True)]

    # matching
    def match(self, event: dict[str, Any]) -> list:
        if self.pending:
            self.flush()
        found = []
        for seg in self.segments:
            local = self._match_segment(seg, event)
            if len(local):
                if seg.n_alive < seg.n:
                    local = local[seg.alive[local]]
                found.append(seg.ids[local])
        if not found:
            return []
        ids = found[0] if len(found) == 1 else np.concatenate(found)
        if ids.dtype == object:
            return sorted(ids.tolist())
        return np.sort(ids).tolist()

    def disk_bytes(self) -> int:
        return 0

    def memory_bytes(self) -> int:
        return sum(s.nbytes() for s in self.segments)

    def close(self) -> None:
        self.segments = []
        self.pending = []
