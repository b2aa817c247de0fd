"""Access predicates, predicate entries and check rows chosen for a whole build at once
(``pbtree.clusters``' rules over ``Columns``), and the interval levels that pay."""

from __future__ import annotations

import numpy as np

from pbtree import clusters
from pbtree.expr import OPS_STORED, prefix_successor
from pbtree.subs import ELEMENTS, GAP, OP_RANK, level_name
from pbtree.subtable import Columns, const_key
from pbtree.write.wholetree import Record
from storage.records import PREDICATE_ID, ROW_CHUNK, encode_entry, encode_rows, rows_key


def own_estimates(cols: Columns) -> clusters.Estimates:
    """``clusters.Estimates.of_predicates`` of ``cols``, each distinct (attribute,
    constant) weighed once with its count."""
    pairs, counts = np.unique(cols.attr * max(len(cols.consts), 1) + cols.const,
                              return_counts=True)
    attr, const = np.divmod(pairs, max(len(cols.consts), 1))

    def values():
        for a, c, times in zip(attr.tolist(), const.tolist(), counts.tolist(), strict=True):
            value = cols.consts[c]
            for v in value if value.__class__ is tuple else (value,):
                yield cols.attrs[a], v, times

    return clusters.Estimates(len(cols), clusters.Estimates.of(0, values()).attrs)


class Scores:
    """The estimate of every distinct predicate of a build, made once: without interval
    levels, and for the intervals once more with every attribute's levels (and their
    nodes), so that choosing the levels that pay and ordering the predicates under them
    estimate nothing twice. An attribute's splits do not depend on which others have
    levels (``Estimates.levels_of``), so any choice of levelled attributes is a mix of
    the two."""

    def __init__(self, cols: Columns, estimates: clusters.Estimates | None) -> None:
        self.size = max(len(cols.consts), 1)
        self.unique = np.unique(self._triples(cols))
        rest, const = np.divmod(self.unique, self.size)
        self.attr, op = np.divmod(rest, len(OPS_STORED))
        preds = [(cols.attrs[a], OPS_STORED[o], cols.consts[c])
                 for a, o, c in zip(self.attr.tolist(), op.tolist(), const.tolist(),
                                    strict=True)]
        interval = np.flatnonzero(np.isin(op, INTERVAL_OPS))
        self.flat = self.levelled = self._estimated(
            preds, clusters.estimate if estimates is None
            else estimates.with_levels(clusters.NO_LEVELS).estimate)
        self.node = np.full(len(preds), -1, dtype=np.int64)
        self.levels = clusters.NO_LEVELS
        if estimates is not None and interval.size:
            self.levels = estimates.levels_of(cols.attrs)
            inside = [preds[i] for i in interval.tolist()]
            self.levelled = self.flat.copy()
            self.levelled[interval] = self._estimated(
                inside, estimates.with_levels(self.levels).estimate)
            self.node[interval] = [-1 if n is None else n
                                   for n in map(self.levels.node, inside)]

    @staticmethod
    def _estimated(preds: list, estimate) -> np.ndarray:
        return np.array([estimate(pred) for pred in preds], dtype=np.float64)

    def _triples(self, cols: Columns, at: np.ndarray | slice = slice(None)) -> np.ndarray:
        return (cols.attr[at] * len(OPS_STORED) + cols.op[at]) * self.size + cols.const[at]

    def _posts_at_node(self, attrs: list[str], levels: clusters.Levels) -> np.ndarray:
        """Per distinct predicate, whether it is an interval with a node in ``levels``."""
        has = np.array([attr in levels.splits for attr in attrs], dtype=bool)
        return has[self.attr] & (self.node >= 0)

    def of(self, cols: Columns, levels: clusters.Levels) -> np.ndarray:
        """The estimate of every predicate of ``cols`` (the build's columns, in any order)
        when the attributes of ``levels`` have theirs."""
        found = np.searchsorted(self.unique, self._triples(cols))
        return np.where(self._posts_at_node(cols.attrs, levels), self.levelled,
                        self.flat)[found]

    def nodes(self, cols: Columns, at: np.ndarray, levels: clusters.Levels) -> np.ndarray:
        """Per predicate ``at`` of ``cols``, its node of ``levels`` (``Levels.node``), -1
        for none."""
        found = np.searchsorted(self.unique, self._triples(cols, at))
        return np.where(self._posts_at_node(cols.attrs, levels), self.node, -1)[found]


def paying_levels(cols: Columns, estimates: clusters.Estimates, scores: Scores
                  ) -> clusters.Levels:
    """The interval levels that pay (``clusters.worth_levels``): per attribute, by how many
    candidates an event would bring fewer if every attribute's intervals posted in levels,
    from the subscriptions whose access predicate would then be an interval on it."""
    levelled = scores.of(cols, scores.levels)
    _, first, order = _ordered(cols, levelled)
    best = order[first]
    flat = np.minimum.reduceat(scores.of(cols, clusters.NO_LEVELS), np.flatnonzero(first))
    at = scores.nodes(cols, best, scores.levels) >= 0
    gain = np.bincount(cols.attr[best][at], (flat - levelled[best])[at], len(cols.attrs))
    return clusters.worth_levels(
        estimates, {cols.attrs[a]: float(gain[a]) for a in np.flatnonzero(gain).tolist()})


def _ordered(cols: Columns, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per predicate of ``cols``: its subscription, and whether it comes first in it; and
    the predicates' order in which each subscription's come as ``clusters.ordered`` puts
    them (by ``scores``, each predicate's estimate)."""
    sub = np.repeat(np.arange(len(cols), dtype=np.int64), cols.counts)
    order = np.lexsort((np.arange(sub.size), scores, sub))
    first = np.zeros(sub.size, dtype=bool)
    first[np.cumsum(cols.counts)[:-1] if len(cols) else []] = True
    if sub.size:
        first[0] = True
    return sub, first, order


def clustered(cols: Columns, scores: Scores, levels: clusters.Levels
              ) -> tuple[Columns, Columns, list[Record], list[Record]]:
    """``cols`` as a shard stores them (``pbtree.clusters``): every predicate entry, then
    every subscription with its predicates in ``clusters.ordered``'s order, as records
    take them; the same with only the first predicate of each, as the trees take them;
    and the records of the check rows and of the predicate entries."""
    n = len(cols)
    size = max(len(cols.consts), 1)
    sub, first, order = _ordered(cols, scores.of(cols, levels))
    # subscriptions of one access predicate take consecutive sids, so that the candidates
    # an event brings read their rows in runs
    access = order[first]
    by_access = np.argsort((cols.attr[access] * len(OPS_STORED) + cols.op[access]) * size
                           + cols.const[access], kind="stable")
    if not np.array_equal(by_access, np.arange(n)):
        cols = cols.take(by_access)
        sub, first, order = _ordered(cols, scores.of(cols, levels))
    attr, op, const = cols.attr[order], cols.op[order], cols.const[order]
    consts, lower, upper, upper_op = _interval_bounds(cols.consts, op, const)
    # the check rows' items (clusters.checked): sub, section (1: interval entries, last),
    # place in the row, and the predicate
    interval = np.isin(op, INTERVAL_OPS)
    at = np.arange(op.size, dtype=np.int64)
    plain = np.flatnonzero(~interval & (~first | (op == OP_RANK["!="])))
    low = np.flatnonzero(interval & ~first)
    both = np.flatnonzero(interval)
    pieces = [(plain, 0, 3 * plain, attr[plain], op[plain], const[plain]),
              (low, 0, 3 * low, attr[low], np.full(low.size, _GE), lower[low]),
              (both, 0, 3 * both + 1, attr[both], upper_op[both], upper[both]),
              (both, 1, at[both], attr[both], op[both], const[both])]
    source = np.concatenate([p for p, *_ in pieces])
    item_sub = sub[source]
    section = np.concatenate([np.full(p.size, k, dtype=np.int64) for p, k, *_ in pieces])
    place = np.concatenate([piece[2] for piece in pieces])
    items = np.lexsort((place, section, item_sub))
    item_sub = item_sub[items]
    i_attr, i_op, i_const = (np.concatenate([piece[n] for piece in pieces])[items]
                             for n in (3, 4, 5))
    size = max(len(consts), 1)
    triple = (i_attr * len(OPS_STORED) + i_op) * size + i_const
    unique, one, entry = np.unique(triple, return_index=True, return_inverse=True)
    entry = entry.reshape(-1)
    one = source[items[one]]  # a predicate of each entry, for its bounds
    m = unique.size
    e_rest, e_const = np.divmod(unique, size)
    e_attr, e_op = np.divmod(e_rest, len(OPS_STORED))
    ones = np.ones(m, dtype=np.int64)
    node = scores.nodes(cols, order[first], levels)
    consts, recorded = _levelled(consts, const, np.flatnonzero(first), node)
    full = Columns([0] * m + cols.ids, [PREDICATE_ID] * m + cols.keys,
                   np.concatenate((ones, cols.counts)), np.concatenate((e_attr, attr)),
                   np.concatenate((e_op, op)), np.concatenate((e_const, recorded)), cols.attrs,
                   consts, cols.members)
    posted = _posted(full, m, (lower[one], upper[one], upper_op[one]),
                     (attr[first], op[first], const[first], lower[first], upper[first],
                      upper_op[first], node))
    lengths = np.concatenate((np.zeros(m, dtype=np.int64), np.bincount(item_sub, minlength=n)))
    row_sub = item_sub + m  # sids of the rows' owners, in sid order
    rows = []
    for number in range(-(-(m + n) // ROW_CHUNK)):
        lo, hi = number * ROW_CHUNK, (number + 1) * ROW_CHUNK
        part = np.zeros(ROW_CHUNK, dtype=np.int64)
        got = lengths[lo:hi]
        part[:got.size] = got
        if part.any():
            a, b = np.searchsorted(row_sub, (lo, hi))
            rows.append((rows_key(number), encode_rows(part, entry[a:b])))
    uses = np.bincount(entry, minlength=m).tolist()
    keys = [clusters.predicate_key((cols.attrs[a], OPS_STORED[o], consts[c]))
            for a, o, c in zip(e_attr.tolist(), e_op.tolist(), e_const.tolist(), strict=True)]
    preds = sorted((key, encode_entry(sid, count))
                   for sid, (key, count) in enumerate(zip(keys, uses, strict=True)))
    return full, posted, rows, preds


INTERVAL_OPS = np.array([OP_RANK["between"], OP_RANK["prefix"]], dtype=np.int64)
_GE, _LE, _LT = OP_RANK[">="], OP_RANK["<="], OP_RANK["<"]


def _interval_bounds(consts: list, op: np.ndarray, const: np.ndarray
                     ) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """``consts`` with the bounds of every interval among the predicates (``op``,
    ``const``) added, and per predicate (0 where no interval) the codes of its lower and
    upper bound and its upper bound's operator (``subs.bounds``)."""
    lower, upper, upper_op = (np.zeros(op.size, dtype=np.int64) for _ in range(3))
    at = np.flatnonzero(np.isin(op, INTERVAL_OPS))
    if not at.size:
        return consts, lower, upper, upper_op
    consts = list(consts)
    codes = {const_key(v): n for n, v in enumerate(consts)}

    def code(value: object) -> int:
        found = codes.setdefault(const_key(value), len(consts))
        if found == len(consts):
            consts.append(value)
        return found

    pairs, inverse = np.unique(op[at] * len(consts) + const[at], return_inverse=True)
    found = []
    for kind, c in zip(*np.divmod(pairs, len(consts)), strict=True):
        value = consts[c]
        if kind == OP_RANK["between"]:
            found.append((code(value[0]), code(value[1]), _LE))
        else:
            found.append((code(value), code(prefix_successor(value)), _LT))
    lo, hi, up = (np.array(column, dtype=np.int64)[inverse.reshape(-1)]
                  for column in zip(*found, strict=True))
    lower[at], upper[at], upper_op[at] = lo, hi, up
    return consts, lower, upper, upper_op


def _levelled(consts: list, const: np.ndarray, access: np.ndarray, node: np.ndarray
              ) -> tuple[list, np.ndarray]:
    """``consts`` with the constants of the levelled access predicates added, and
    ``const`` with theirs in place (``subs.levelled``: the node in the value)."""
    at = np.flatnonzero(node >= 0)
    if not at.size:
        return consts, const
    consts, const = list(consts), const.copy()
    pairs, inverse = np.unique(const[access[at]] * (int(node.max()) + 1) + node[at],
                               return_inverse=True)
    codes = []
    for c, n in zip(*(x.tolist() for x in np.divmod(pairs, int(node.max()) + 1)), strict=True):
        value = consts[c]
        codes.append(len(consts))
        consts.append((*value, n) if isinstance(value, tuple) else (value, n))
    const[access[at]] = np.array(codes, dtype=np.int64)[inverse.reshape(-1)]
    return consts, const


def _posted(full: Columns, m: int, entry_bounds: tuple[np.ndarray, ...],
            access: tuple[np.ndarray, ...]) -> Columns:
    """One record per posted predicate (``subs.posted``) of the first ``m`` records of
    ``full``, the predicate entries (``entry_bounds``: the lower and upper bound codes and
    upper operator of each, ``_interval_bounds``), and of the subscriptions' access
    predicates (``access``: attribute, operator, constant and lower bound code): an
    interval entry as its two bounds under its attribute's ELEMENTS name, an interval
    access at a split as its lower bound below it and its upper bound above it, in a gap
    as its lower bound below the gap, with no node as its lower bound."""
    e_attr, e_op, e_const = full.attr[:m], full.op[:m], full.const[:m]
    lower, upper, upper_op = entry_bounds
    attr, op, const, access_lower, access_upper, access_upper_op, node = access
    entry = np.isin(e_op, INTERVAL_OPS)
    attrs = list(full.attrs)
    named = np.unique(e_attr[entry])
    elements = np.zeros(len(attrs), dtype=np.int64)
    elements[named] = np.arange(len(attrs), len(attrs) + named.size)
    attrs += [attrs[a] + ELEMENTS for a in named.tolist()]
    levelled = np.flatnonzero(node >= 0)
    span = int(node.max()) + 1 if levelled.size else 1
    pairs, inverse = np.unique(attr[levelled] * span + node[levelled], return_inverse=True)
    below = len(attrs) + 2 * inverse.reshape(-1)  # the names of the nodes, below and above
    attrs += [level_name(full.attrs[a], n, above)
              for a, n in zip(*(x.tolist() for x in np.divmod(pairs, span)), strict=True)
              for above in (False, True)]
    split = node[levelled] < GAP  # at a split: its upper bound above it too; in a gap: not
    interval = np.isin(op, INTERVAL_OPS)
    a = np.concatenate((np.where(entry, elements[e_attr], e_attr), attr))
    a[m + levelled] = below
    o = np.concatenate((np.where(entry, _GE, e_op), np.where(interval, _GE, op)))
    c = np.concatenate((np.where(entry, lower, e_const), np.where(interval, access_lower, const)))
    counts = np.ones(a.size, dtype=np.int64)
    counts[np.flatnonzero(entry)] = 2
    counts[m + levelled[split]] = 2
    # each upper bound after its lower: an interval entry's, a levelled access's
    where = np.concatenate((np.flatnonzero(entry), m + levelled[split])) + 1
    return Columns(full.ids, full.keys, counts,
                   np.insert(a, where, np.concatenate((a[np.flatnonzero(entry)],
                                                       below[split] + 1))),
                   np.insert(o, where, np.concatenate((upper_op[entry],
                                                       access_upper_op[levelled[split]]))),
                   np.insert(c, where, np.concatenate((upper[entry],
                                                       access_upper[levelled[split]]))),
                   attrs, full.consts, full.members)
