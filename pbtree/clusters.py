"""Access predicates and check rows: how a shard keeps a subscription's predicates.

Each subscription posts one predicate to the trees, its **access predicate**: the one
least likely to hold (``estimate``). Each of its other predicates is a **predicate
entry**: a sid of its own whose record holds that one predicate, posted to the trees
like any other, stored once however many subscriptions use it (``preds`` maps the
predicate to its sid and the number of subscriptions using it). A subscription's
**check row** lists the sids of its other predicates, the least likely to hold first.

An event's hits in the trees are then of two kinds: subscriptions whose access predicate
holds (the candidates) and predicate entries that hold. A candidate matches when every
sid of its check row was hit: a few array steps over the candidates, whatever the number
of subscriptions (Fabret et al.'s clustering; DESIGN §8.1).

The check rows live in the ``rows`` database, ROW_CHUNK sids a record: u4 end offsets
of the rows, then the u4 sids they list. Matching reads them where they lie in LMDB's map
(``Rows``), without copying them.
"""

from __future__ import annotations

import io
import os
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, pairwise

import lmdb
import msgpack
import numpy as np

from pbtree import config
from pbtree.columns import grown
from pbtree.errors import CorruptIndexError, EventError
from pbtree.nested import flattened
from pbtree.normalize import event_name
from pbtree.subs import GAP, INTERVALS, OWN_ENTRY, bounds, levelled, name_bytes
from pbtree.values import is_array, searched
from storage.chunks import Chunks
from storage.keys import const_payload
from storage.meta import ESTIMATES, write_encoded
from storage.records import ROW_CHUNK, decode_rows, encode_rows, key_of
from storage.span import Span

#: the rows database (the predicate entries' is ``storage.records.PREDS``)
DB = "rows"
#: the database of the estimates' samples, a record per attribute (``store_estimates``)
SAMPLES = "samples"
#: what the ``kinds`` column holds per sid: a free sid, a subscription, a predicate entry,
#: an interval entry (a predicate entry of ``between`` or ``prefix``, posted as its two
#: bounds: it holds for a value that hits it twice)
FREE, SUBSCRIPTION, PREDICATE, INTERVAL = 0, 1, 2, 3
#: split values per attribute and family of the interval levels (``Estimates.levels_of``), a
#: format constant: records name nodes by their place among them (gaps from
#: ``subs.GAP`` on). 15 splits: an event value walks through 4 nodes and ends in one of
#: 16 gaps, and every interval wider than a sixteenth of the samples holds a split
LEVEL_SPLITS = 15
#: the weight of the static estimate added to a sampled one, to break its ties
TIE = 1e-9
_pack = msgpack.Packer().pack
_WORDS = np.dtype("<u4")
_EMPTY = np.zeros(0, np.int64)


def estimate(pred: Sequence) -> float:
    """The estimated chance that a core predicate holds for an event, for want of
    statistics (DESIGN §8.1): an equality a small share, an ``in`` that share per value, a
    range more, ``!=`` most. An interval is estimated by its lower bound, the one it
    posts as an access predicate without levels (``subs.posted``)."""
    op = pred[1]
    if op in INTERVALS:
        return estimate(bounds(pred)[0])
    if op == "=":
        return config.EQ_SHARE
    if op == "in":
        return config.EQ_SHARE * len(pred[2])
    if op == "!=":
        return 1 - config.EQ_SHARE
    return config.RANGE_SHARE


class Levels:
    """A shard's interval levels: per attribute and family, sorted split payloads, the
    nodes of a binary search tree (``node``, ``levels_path``). They decide where records
    post, so they change only with every record rewritten (a build, a recluster)."""

    def __init__(self, splits: dict[str, dict[int, list[bytes]]]) -> None:
        self.splits = splits

    def __bool__(self) -> bool:
        return bool(self.splits)

    def node(self, pred: Sequence) -> int | None:
        """The node of the interval levels an interval predicate posts at, or None: the
        first split on the walk down the levels that lies inside it, else the gap between
        splits that holds it (GAP on). Every event value inside it walks through that node
        (``levels_path``), so its postings there (``subs.posted``) find it exactly where it
        holds, or in a gap where its lower bound does."""
        families = self.splits.get(pred[0])
        if families is None:
            return None
        lower, upper = bounds(pred)
        family, lo = const_payload(lower[2])
        high_family, hi = const_payload(upper[2])
        if family != high_family:
            return None
        found = families.get(family)
        if not found:
            return None
        strict = upper[1] == "<"
        left, right = 0, len(found)
        while left < right:
            mid = (left + right) // 2
            split = found[mid]
            if hi < split or (strict and hi == split):
                right = mid
            elif lo > split:
                left = mid + 1
            else:
                return mid
        return GAP + left

    def encode(self) -> bytes:
        return msgpack.packb(self.splits)

    @classmethod
    def decode(cls, raw: bytes | None) -> Levels:
        if raw is None:
            return NO_LEVELS
        try:
            found = {attr: {int(f): list(splits) for f, splits in families.items()}
                     for attr, families in msgpack.unpackb(raw, strict_map_key=False).items()}
        except (ValueError, TypeError, AttributeError, msgpack.UnpackException) as exc:
            raise CorruptIndexError(f"the stored interval levels are damaged ({exc})") from None
        if any(len(splits) >= GAP for families in found.values() for splits in families.values()):
            raise CorruptIndexError(f"the stored interval levels have {GAP} splits or more "
                                    f"on an attribute: their nodes would name gaps")
        return cls(found)


NO_LEVELS = Levels({})


class Sample:
    """A sorted sample of one attribute's search payloads of one family (at most
    SAMPLE_KEYS, repeats kept), and how many samples hold the family (``total``). Kept as
    its distinct payloads and how many of the sample lie up to each (``ends``): a wide
    schema's estimates would otherwise take a Python object per repeat, hundreds of MB."""

    __slots__ = ("total", "keys", "ends")

    def __init__(self, total: int, keys: list[bytes], ends: list[int]) -> None:
        self.total, self.keys, self.ends = total, keys, ends

    @classmethod
    def listed(cls, total: int, sample: Sequence[bytes]) -> Sample:
        """The sample given with its repeats, sorted."""
        keys = sorted(set(sample))
        return cls(total, keys, [bisect_right(sample, key) for key in keys])

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def below(self, payload: bytes) -> int:
        """How many of the sample lie below ``payload``."""
        at = bisect_left(self.keys, payload)
        return self.ends[at - 1] if at else 0

    def upto(self, payload: bytes) -> int:
        """How many of the sample lie at or below ``payload``."""
        at = bisect_right(self.keys, payload)
        return self.ends[at - 1] if at else 0

    def at(self, place: int) -> bytes:
        """The payload at ``place`` of the sample, repeats counted."""
        return self.keys[bisect_right(self.ends, place)]

    def sound(self) -> bool:
        """Whether the payloads are sorted and distinct, each at least once in the sample."""
        return all(a < b for a, b in pairwise(self.keys)) and \
            all(a < b for a, b in pairwise([0, *self.ends]))

    def counts(self) -> list[int]:
        """How many of the sample each payload of ``keys`` is."""
        return [end - start for start, end in pairwise([0, *self.ends])]


def _attr_record(count: int, families: Mapping[int, Sample]) -> list:
    """An attribute's estimates as MessagePack holds them: how many samples hold it, and
    per family its sample's total, distinct payloads and how many of the sample each is."""
    return [count, {family: [sample.total, sample.keys, sample.counts()]
                    for family, sample in families.items()}]


def _attr_of(record: list) -> tuple[int, dict[int, Sample]]:
    """The (count, families) of an ``_attr_record`` (``Sample.sound`` says whether each
    sample is one: ``verify`` asks, a write only estimates by it)."""
    count, families = record
    found = {}
    for family, (total, keys, counts) in families.items():
        if len(keys) != len(counts):
            raise ValueError(f"a sample of family {family} has {len(keys)} payloads and "
                             f"{len(counts)} counts")
        found[int(family)] = Sample(total, keys, list(accumulate(counts)))
    return int(count), found


class StoredSamples(Mapping):
    """A shard's estimates per attribute, each read from its record in the ``samples``
    database at its first use, in the transaction ``bind`` gave: a write reads those of its
    own subscriptions' attributes, not the thousands of a wide schema."""

    def __init__(self, db: lmdb._Database) -> None:
        self.db, self.txn = db, None
        self._read: dict[str, tuple[int, dict[int, Sample]] | None] = {}

    def bind(self, txn: lmdb.Transaction) -> None:
        """Read the records not read yet in ``txn`` (the write running)."""
        self.txn = txn

    def get(self, attr: str, default: object = None) -> object:
        """The (count, families) of ``attr``, else ``default``: what estimating calls for
        each predicate, without ``Mapping``'s KeyError round trip."""
        found = self._read.get(attr, self)  # self: not read yet
        if found is self:
            found = self._read[attr] = self._load(attr)
        return default if found is None else found

    def __getitem__(self, attr: str) -> tuple[int, dict[int, Sample]]:
        found = self.get(attr)
        if found is None:
            raise KeyError(attr)
        return found

    def _load(self, attr: str) -> tuple[int, dict[int, Sample]] | None:
        raw = self.txn.get(name_bytes(attr), db=self.db)
        try:
            return None if raw is None else _attr_of(msgpack.unpackb(raw, strict_map_key=False))
        except (ValueError, TypeError, AttributeError, msgpack.UnpackException) as exc:
            raise CorruptIndexError(f"the stored selectivity estimates of attribute "
                                    f"{attr!r} are damaged ({exc})") from None

    def __iter__(self) -> Iterator[str]:
        for key in self.txn.cursor(db=self.db).iternext(values=False):
            yield bytes(key).decode("utf-8", "surrogateescape")

    def __len__(self) -> int:
        return self.txn.stat(self.db)["entries"]


def is_header(raw: bytes) -> bool:
    """Whether a meta record ESTIMATES is the header of estimates kept in ``samples``
    (``[n, token]``, ``store_estimates``), not the estimates themselves in one record, as
    format 14 and older kept them."""
    if len(raw) > 32:
        return False
    try:
        found = msgpack.unpackb(raw)
    except (ValueError, TypeError, msgpack.UnpackException):
        return False
    return isinstance(found, list) and len(found) == 2 and isinstance(found[1], bytes)


def store_estimates(txn: lmdb.Transaction, dbs: Mapping, estimates: Estimates | None) -> None:
    """Keep ``estimates`` as the shard's (None: the static rule): the number of samples and
    a token new with every store, which tells a writer that holds them read that they
    changed, in the meta record ESTIMATES; each attribute's in a record of ``samples``."""
    txn.drop(dbs[SAMPLES], delete=False)
    if estimates is None:
        write_encoded(txn, dbs["meta"], ESTIMATES, None)
        return
    for attr in sorted(estimates.attrs, key=name_bytes):
        txn.put(name_bytes(attr), msgpack.packb(_attr_record(*estimates.attrs[attr])),
                db=dbs[SAMPLES])
    write_encoded(txn, dbs["meta"], ESTIMATES, msgpack.packb([estimates.n, os.urandom(8)]))


class Estimates:
    """What a sample of events (or of the subscriptions' own constants) says about each
    attribute: how many of ``n`` samples hold it, and per family of value a ``Sample``."""

    def __init__(self, n: int, attrs: dict[str, tuple[int, dict[int, Sample]]],
                 levels: Levels | None = None) -> None:
        self.n, self.attrs = max(n, 1), attrs
        #: the interval levels the intervals estimated post in (``with_levels``)
        self.levels = NO_LEVELS if levels is None else levels
        self._known: dict[tuple, float] = {}  # estimates made, by predicate

    @classmethod
    def of(cls, n: int, values: Iterable[tuple[str, object, int]]) -> Estimates:
        """The estimates of ``n`` samples holding these (attribute, value, times) triples:
        each attribute once per sample it is in (more if repeated in one)."""
        weights: dict[str, dict[int, dict[bytes, int]]] = {}
        for attr, value, times in values:
            found = searched(value)
            if found is not None:
                keys = weights.setdefault(attr, {}).setdefault(found[0], {})
                keys[found[1]] = keys.get(found[1], 0) + times
        attrs = {}
        for attr, fams in weights.items():
            families = {}
            for family, counts in fams.items():
                keys = sorted(counts)
                ends = np.cumsum([counts[k] for k in keys])
                total = int(ends[-1])
                if len(keys) > config.SAMPLE_KEYS:  # evenly spread over the weight
                    at = np.searchsorted(ends, np.linspace(0, total - 1, config.SAMPLE_KEYS),
                                         "right")
                    families[family] = Sample.listed(total, [keys[i] for i in at.tolist()])
                else:
                    repeats = [max(1, round(config.SAMPLE_KEYS * counts[k] / total))
                               for k in keys]
                    families[family] = Sample(total, keys, list(accumulate(repeats)))
            attrs[attr] = (sum(f.total for f in families.values()), families)
        return cls(n, attrs)

    @classmethod
    def of_predicates(cls, subs: Iterable[Sequence]) -> Estimates:
        """The estimates of the subscriptions' own constants: each subscription a sample
        holding each constant of its core predicates (the values of an ``in`` each)."""
        n = 0

        def values() -> Iterator[tuple[str, object, int]]:
            nonlocal n
            for preds in subs:
                n += 1
                for attr, op, value in preds:
                    for v in value if op == "in" or op == "between" else (value,):
                        yield attr, v, 1

        attrs = cls.of(0, values()).attrs
        return cls(n, attrs)

    @classmethod
    def of_events(cls, events: Sequence[Mapping]) -> Estimates:
        """The estimates of a sample of events (nested objects by their dotted names, an
        array's elements each; attributes no subscription can name left out, as matching
        leaves them); EventError naming the first that is no mapping."""
        for n, event in enumerate(events):
            if not isinstance(event, Mapping):
                raise EventError(f"sample event {n}: an event is a mapping attribute -> "
                                 f"value, not {type(event).__name__}")
        return cls.of(len(events), ((attr, item, 1) for e in events
                                    for attr, value in flattened(e).items()
                                    if event_name(attr) is not None
                                    for item in (value if is_array(value) else (value,))))

    def with_levels(self, levels: Levels) -> Estimates:
        """These estimates for intervals that post in ``levels``."""
        return Estimates(self.n, self.attrs, levels)

    def encode(self) -> bytes:
        """All of these estimates in one value (``decode``), as a Spark build hands them to
        its shards; a shard keeps them with ``store_estimates``."""
        return msgpack.packb([self.n, {attr: _attr_record(*found)
                                       for attr, found in self.attrs.items()}])

    @classmethod
    def decode(cls, raw: bytes) -> Estimates:
        """The estimates ``encode`` wrote."""
        try:
            n, attrs = msgpack.unpackb(raw, strict_map_key=False)
            return cls(n, {attr: _attr_of(found) for attr, found in attrs.items()})
        except (ValueError, TypeError, KeyError, AttributeError,
                msgpack.UnpackException) as exc:
            raise CorruptIndexError(f"the selectivity estimates are damaged ({exc})") from None

    @classmethod
    def decode_repeated(cls, raw: bytes) -> Estimates:
        """The estimates of a shard of format version 14 or older, one meta record holding
        each sample with its repeats, read one family at a time (a wide schema's holds
        millions of payloads): for the upgrade that stores them by ``store_estimates``."""
        try:
            unpacker = msgpack.Unpacker(io.BytesIO(raw), strict_map_key=False)
            if unpacker.read_array_header() != 2:
                raise ValueError("not a pair of a count and attributes")
            n = unpacker.unpack()
            attrs = {}
            for _ in range(unpacker.read_map_header()):
                attr = unpacker.unpack()
                if unpacker.read_array_header() != 2:
                    raise ValueError(f"attribute {attr!r} is not a count and families")
                count = unpacker.unpack()
                families = {}
                for _ in range(unpacker.read_map_header()):
                    family = int(unpacker.unpack())
                    total, listed = unpacker.unpack()
                    families[family] = Sample.listed(total, listed)
                attrs[attr] = (count, families)
            return cls(n, attrs)
        except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
            raise CorruptIndexError(f"the stored selectivity estimates are damaged ({exc})") \
                from None

    @classmethod
    def stored(cls, header: bytes, samples: lmdb._Database) -> Estimates:
        """A shard's estimates (``store_estimates``), given its ESTIMATES meta record: each
        attribute's sample is read from ``samples`` at its first use (``StoredSamples``)."""
        try:
            n, _ = msgpack.unpackb(header)
            return cls(int(n), StoredSamples(samples))
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise CorruptIndexError(f"the stored selectivity estimates are damaged ({exc})") \
                from None

    def estimate(self, pred: Sequence) -> float:
        """The share of the samples a core predicate holds for; the static ``estimate``
        breaks ties and stands in, scaled down, where the samples lack the attribute. An
        interval at a split of its attribute's levels posts exactly where it holds, so the
        share inside it counts; one in a gap posts its lower bound there, so the share from
        it to the gap's end does; one without a node posts its lower bound, so that does."""
        attr, op, value = pred
        # each value with its class: 1, 1.0 and True are equal keys, not equal predicates
        key = (attr, op, tuple((v.__class__, v) for v in value)
               if op in ("in", "between") else (value.__class__, value))
        known = self._known.get(key)
        if known is None:
            if len(self._known) >= config.KNOWN_MOST:
                self._known.clear()
            if op in INTERVALS:
                known = self._interval(pred)
            else:
                known = self._estimate(attr, op, value, estimate(pred))
            self._known[key] = known
        return known

    def _interval(self, pred: Sequence) -> float:
        lower, upper = bounds(pred)
        below = self._estimate(*lower, estimate(lower))
        node = self.levels.node(pred)
        if node is None:
            return below
        family = const_payload(lower[2])[0]
        fams = self.attrs.get(pred[0], (0, {}))[1]
        if node >= GAP:  # its lower bound, up to the split that ends the gap
            splits = self.levels.splits[pred[0]][family]
            gap = node - GAP
            beyond = self._payload_share(fams, family, ">=", splits[gap]) \
                if gap < len(splits) else 0.0
            return max(below - beyond, 0.0)
        above = self._estimate(*upper, estimate(upper))
        holding = fams[family].total / self.n if family in fams else 0.0
        return max(below + above - holding, 0.0) + estimate(lower) * TIE

    def levels_of(self, attrs: Iterable[str]) -> Levels:
        """The interval levels of ``attrs``: per family, at most LEVEL_SPLITS of the sampled
        values, evenly spread (none for a family with fewer than two distinct)."""
        found: dict[str, dict[int, list[bytes]]] = {}
        for attr in attrs:
            for family, sample in self.attrs.get(attr, (0, {}))[1].items():
                k = len(sample)
                n = min(LEVEL_SPLITS, k - 1)
                picked = sorted({sample.at((i * k) // (n + 1)) for i in range(1, n + 1)})
                if len(picked) > 1:
                    found.setdefault(attr, {})[family] = picked
        return Levels(found)

    def _estimate(self, attr: str, op: str, value: object, static: float) -> float:
        found = self.attrs.get(attr)
        if found is None:
            return static / (2 * self.n)
        if op == "in":
            return sum(self._share(found[1], "=", v) for v in value) + static * TIE
        return self._share(found[1], op, value) + static * TIE

    def _share(self, fams: dict[int, Sample], op: str, value: object) -> float:
        family, payload = const_payload(value)
        return self._payload_share(fams, family, op, payload)

    def _payload_share(self, fams: dict[int, Sample], family: int, op: str,
                       payload: bytes) -> float:
        sample = fams.get(family)
        if sample is None or not sample.keys:
            return 0.0
        k, share = len(sample), sample.total / self.n
        lo, hi = sample.below(payload), sample.upto(payload)
        if op == "=":
            return max(hi - lo, 0.5) / k * share
        if op == "!=":
            return (k - (hi - lo)) / k * share
        below = {"<": lo, "<=": hi, ">": k - hi, ">=": k - lo}[op]
        return below / k * share




def worth_levels(estimates: Estimates, gains: Mapping[str, float]) -> Levels:
    """The attributes whose interval levels pay: those where the candidates an event
    would bring fewer (``gains``, per event, from the access predicates levels would
    choose) outweigh the searches the levels add (LEVEL_SEARCH per node an event value
    walks through and one for the gap it ends in, for the events holding the attribute:
    at most all; a subscription's constants count each bound of an interval)."""
    searches = (LEVEL_SPLITS.bit_length() + 1) * config.LEVEL_SEARCH
    return estimates.levels_of(
        attr for attr, gain in gains.items()
        if gain > searches * min(1.0, estimates.attrs[attr][0] / estimates.n))


def levels_path(found: list[bytes], payload: bytes) -> Iterator[tuple[int, bool]]:
    """The nodes of the interval levels (sorted ``found`` splits) that an event value's
    payload walks through, each with whether the value lies at or above its split (an
    inexact payload lies just above itself, so comparing it as it is holds too), and last
    the gap it ends in, below (GAP on)."""
    left, right = 0, len(found)
    while left < right:
        mid = (left + right) // 2
        if payload < found[mid]:
            yield mid, False
            right = mid
        else:
            yield mid, True
            left = mid + 1
    yield GAP + left, False


def recorded(preds: list, levels: Levels) -> list:
    """An ordered subscription (``ordered``) as its record holds it: an interval access
    predicate with its node of the ``levels`` (``subs.levelled``), if it has one."""
    first = preds[0]
    if not levels or first[1] not in INTERVALS:
        return preds
    node = levels.node(first)
    return preds if node is None else [levelled(first, node), *preds[1:]]


def ordered(preds: Sequence, estimates: Estimates | None = None) -> list:
    """A subscription's predicates, the least likely to hold first: the first is its
    access predicate, the rest its check row in order (ties keep their given order; an
    interval by its lower bound, which it posts as an access predicate)."""
    if len(preds) == 1:
        return list(preds)
    return sorted(preds, key=estimate if estimates is None else estimates.estimate)


def checked(preds: Sequence) -> Sequence:
    """The predicates whose entries an ordered subscription's (``ordered``) check row
    lists, in order: all but the first, and the first too when its posting alone does not
    decide it (``!=`` against an array); each interval as its two bounds in place (its
    access as its upper bound only) and its interval entry after all the rest: the bounds
    decide a flat event, the interval entry only an array's (``snapshot.matched``)."""
    first = preds[0]
    if not any(p[1] in INTERVALS for p in preds):
        return preds if first[1] in OWN_ENTRY else preds[1:]
    row, tail = [], []
    for n, pred in enumerate(preds):
        if pred[1] in INTERVALS:
            row += bounds(pred)[1:] if n == 0 else bounds(pred)
            tail.append(pred)
        elif n or pred[1] in OWN_ENTRY:
            row.append(pred)
    return row + tail


def predicate_key(pred: Sequence) -> bytes:
    """A core predicate's key in ``preds`` (``key_of`` its MessagePack, ``pack``)."""
    return key_of(pack(pred))


def pack(pred: Sequence) -> bytes:
    """A core predicate as a subs record holds it: the MessagePack array (attribute, op,
    value), an ``in`` value an array."""
    return _pack(pred)


class RowsWriter:
    """Changes to the check rows inside one write transaction, put at ``flush``."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict) -> None:
        self.records = Chunks(txn, dbs[DB])
        self.dirty: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _read(self, number: int) -> tuple[np.ndarray, np.ndarray]:
        """(row lengths, sids) of a record as this transaction sees it."""
        found = self.dirty.get(number)
        if found is None:
            raw = self.records.get(number)
            found = decode_rows(raw) if raw is not None else (
                np.zeros(ROW_CHUNK, np.int64), _EMPTY)
        return found

    def _chunk(self, number: int) -> tuple[np.ndarray, np.ndarray]:
        """``_read``, to be written back at ``flush``."""
        found = self.dirty[number] = self._read(number)
        return found

    def row(self, sid: int) -> np.ndarray:
        """The check row of ``sid``, as this transaction sees it."""
        number, at = divmod(sid, ROW_CHUNK)
        lengths, pids = self._read(number)
        start = int(lengths[:at].sum())
        return pids[start:start + int(lengths[at])]

    def set_run(self, first: int, rows: list[list[int]]) -> None:
        """Give the new sids from ``first`` on their rows (sids after them have none yet)."""
        done = 0
        while done < len(rows):
            number, at = divmod(first + done, ROW_CHUNK)
            n = min(ROW_CHUNK - at, len(rows) - done)
            part = rows[done:done + n]
            lengths, pids = self._chunk(number)
            if lengths[at:].any():
                raise CorruptIndexError(f"sid {first + done} is new but has a check row")
            lengths = lengths.copy()
            lengths[at:at + n] = list(map(len, part))
            flat = np.fromiter((p for row in part for p in row), np.int64)
            self.dirty[number] = (lengths, np.concatenate((pids, flat)))
            done += n

    def clear(self, sid: int) -> None:
        """Empty the check row of a removed subscription."""
        number, at = divmod(sid, ROW_CHUNK)
        lengths, pids = self._chunk(number)
        if lengths[at]:
            start = int(lengths[:at].sum())
            pids = np.delete(pids, np.s_[start:start + int(lengths[at])])
            lengths = lengths.copy()
            lengths[at] = 0
            self.dirty[number] = (lengths, pids)

    def flush(self) -> None:
        for number, (lengths, pids) in self.dirty.items():
            if lengths.any():
                self.records.put(number, encode_rows(lengths, pids))
            else:
                self.records.delete(number)


class Rows:
    """The check rows of one read snapshot, where they lie in the map (``storage.span``):
    ``at[n]`` is the word offset of rows record ``n`` in ``words`` (-1: no record, all its
    rows empty). The Snapshot that owns them is dropped when the map moves.

    Per sid, ``pos`` is the place in ``words`` where its row starts (0 for an empty row)
    and ``length`` how many sids the row lists (5 bytes a sid): a candidate's row is then
    two array lookups away, not the ten array passes that finding it in its record takes.
    """

    __slots__ = ("span", "words", "at", "pos", "length")

    def __init__(self, span: Span, before: Rows | None = None,
                 changed: Iterable[int] = ()) -> None:
        self.span, self.words, self.at = span, span.values, span.at
        self._places(before, changed)

    def _places(self, before: Rows | None, changed: Iterable[int]) -> None:
        """``pos`` and ``length``: those of ``before`` (in place, unless they must grow)
        with the records ``changed`` since read again, when both spans lie on the map;
        else every record's."""
        size = self.at.size * ROW_CHUNK
        pos_type = np.uint32 if self.words.size < 2**32 else np.int64
        base = self.span.base
        if before is None or before.span.base is None or base is None or \
                before.pos.dtype != pos_type:
            self.pos = np.zeros(size, pos_type)
            self.length = np.zeros(size, np.uint8)
            changed = range(self.at.size)
        else:
            self.pos, self.length = before.pos, before.length
            shift = before.span.base - base  # the words of a record kept moved by this
            if shift:
                kept = self.length > 0
                self.pos[kept] = self.pos[kept].astype(np.int64) + shift
            if self.pos.size < size:
                self.pos, self.length = grown(self.pos, size), grown(self.length, size)
        for n in changed:
            part = slice(n * ROW_CHUNK, (n + 1) * ROW_CHUNK)
            at = int(self.at[n]) if n < self.at.size else -1
            if at < 0:
                self.pos[part] = self.length[part] = 0
                continue
            words = int(self.span.ends[n]) - at  # the record's, offsets then sids
            ends = self.words[at:at + min(ROW_CHUNK, words)].astype(np.int64)
            starts = np.concatenate(([0], ends[:-1]))
            lengths = ends - starts
            if words < ROW_CHUNK or int(ends[-1]) != words - ROW_CHUNK or lengths.min() < 0:
                raise CorruptIndexError(f"check rows record {n} is damaged: its offsets do "
                                        f"not cut its {max(words - ROW_CHUNK, 0):,} sids")
            longest = int(lengths.max())
            if longest > np.iinfo(self.length.dtype).max:
                self.length = self.length.astype(np.min_scalar_type(longest))
            self.pos[part] = np.where(lengths > 0, at + ROW_CHUNK + starts, 0)  # in span
            self.length[part] = lengths

    @classmethod
    def read(cls, txn: lmdb.Transaction, dbs: dict) -> Rows:
        return cls(Span(Chunks(txn, dbs[DB]).by_number(), _WORDS))

    def renewed(self, txn: lmdb.Transaction, dbs: dict, written: set[int] | None) -> Rows:
        """The rows of ``txn``, a newer snapshot begun while this one's is open: records
        no commit since wrote (``written``) are the same pages, kept, and so are their
        rows' places (updated in place)."""
        if written is None:
            return Rows.read(txn, dbs)
        records = Chunks(txn, dbs[DB])
        return Rows(self.span.changed({n: records.get(n) for n in written}, _WORDS), self,
                    written)

    def matched(self, candidates: np.ndarray, hit: np.ndarray) -> np.ndarray:
        """Those of ``candidates`` whose check row's sids are all ``hit`` (a bool per sid),
        sorted: one row position at a time over the candidates left, the row's most
        selective predicate first; an empty row (or none) holds at the first."""
        done = []
        if candidates.size and int(candidates.max()) >= self.pos.size:
            late = candidates >= self.pos.size  # sids after every rows record: no row
            done.append(candidates[late])
            candidates = candidates[~late]
        cands, pos, left = candidates, self.pos.take(candidates), \
            self.length.take(candidates)
        words = self.words
        if cands.size > config.FEW_CANDIDATES:
            empty = left == 0
            first = words.take(pos)
            first[empty] = 0  # a place of no row holds any word; sid 0 is in ``hit``
            ok = hit.take(first)
            ok |= empty
            while True:
                last = ok & (left <= 1)
                done.append(cands[last])
                rows = np.flatnonzero(ok ^ last)  # taken arrays: cheaper than masks
                cands, pos, left = cands.take(rows), pos.take(rows), left.take(rows)
                pos += 1
                left -= 1
                if cands.size <= config.FEW_CANDIDATES:
                    break
                ok = hit.take(words.take(pos))
        else:
            empty = left == 0
            done.append(cands[empty])
            rows = np.flatnonzero(~empty)
            cands, pos, left = cands.take(rows), pos.take(rows), left.take(rows)
        if cands.size:  # the rest of the few rows at once: no step per row position
            pos, left = pos.astype(np.int64), left.astype(np.int64)
            starts = np.cumsum(left) - left
            every = np.arange(int(starts[-1] + left[-1])) + np.repeat(pos - starts, left)
            missed = np.add.reduceat(~hit.take(words.take(every)), starts)
            done.append(cands[missed == 0])
        out = np.concatenate(done)
        out.sort()
        return out
