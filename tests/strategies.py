"""Hypothesis strategies and seeded generators for subscriptions and events.

Small value domains on few attributes, so that keys collide, lists share
nodes, and every operator meets equal, smaller and larger event values.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

ATTRS = ["a", "b", "c", "x.y"]
LONG = "a" * 504  # as long as a constant may be (505 bytes with one more char)
NUMBERS = [-5, -1.5, 0, 1, 2, 2.5, 3, 7, 10, 1e9, float("inf"), float("-inf")]
STRINGS = ["", "a", "ab", "abc", "b", "ba", "é", "\x00", "zz", LONG, LONG + "b"]
EVENT_ONLY = ["a" * 600, LONG + "c" * 100, "ab" + "\U0010ffff"]

numbers = st.one_of(st.sampled_from(NUMBERS), st.integers(-3, 12))
strings = st.sampled_from(STRINGS)
values = st.one_of(numbers, strings, st.booleans())
attrs = st.sampled_from(ATTRS)
COMPARE = ["<", "<=", "=", "!=", ">=", ">"]

predicates = st.one_of(
    st.tuples(attrs, st.sampled_from(COMPARE), values),
    st.tuples(attrs, st.just("in"), st.lists(values, min_size=1, max_size=4)),
    st.tuples(attrs, st.just("not in"), st.lists(values, min_size=1, max_size=3)),
    st.tuples(attrs, st.just("between"),
              st.one_of(st.tuples(numbers, numbers), st.tuples(strings, strings))),
    st.tuples(attrs, st.just("prefix"), strings),
)
subscriptions = st.lists(predicates, min_size=1, max_size=4)
event_values = st.one_of(values, st.none(), st.sampled_from(EVENT_ONLY))
events = st.dictionaries(st.sampled_from([*ATTRS, "unused"]), event_values, max_size=5)


def random_value(rng: random.Random, domain: int) -> object:
    kind = rng.random()
    if kind < 0.6:
        return rng.randrange(domain) + (0.5 if rng.random() < 0.1 else 0)
    if kind < 0.9:
        return "s" + str(rng.randrange(domain))
    return rng.random() < 0.5


def random_predicate(rng: random.Random, attrs: list[str], domain: int) -> tuple:
    attr = rng.choice(attrs)
    op = rng.choice([*COMPARE, *COMPARE, "in", "not in", "between", "prefix"])
    if op in ("in", "not in"):
        return attr, op, [random_value(rng, domain) for _ in range(rng.randint(1, 3))]
    if op == "between":
        lo = rng.randrange(domain)
        return attr, op, (lo, lo + rng.randrange(domain // 2 + 1))
    if op == "prefix":
        return attr, op, "s" + str(rng.randrange(domain))[:1]
    return attr, op, random_value(rng, domain)


def random_subscription(rng: random.Random, attrs: list[str], domain: int) -> list[tuple]:
    return [random_predicate(rng, attrs, domain) for _ in range(rng.randint(1, 4))]


def random_event(rng: random.Random, attrs: list[str], domain: int) -> dict:
    return {a: random_value(rng, domain) for a in attrs if rng.random() < 0.7}

#: expressions with 'or', 'not' and parentheses, as parse_formula's trees: a predicate,
#: ("and" | "or", [trees]) or ("not", tree)
formulas = st.recursive(
    predicates,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), st.lists(inner, min_size=2, max_size=3)),
        st.tuples(st.just("not"), inner),
    ),
    max_leaves=6,
)


def formula_text(node) -> str:
    """The expression text of a formula tree, every group in parentheses."""
    from pbtree.expr import format_predicates

    if len(node) == 3:
        attr, op, value = node
        return format_predicates([(attr, op, tuple(value) if op in ("in", "not in") else value)])
    word, body = node
    if word == "not":
        return f"not ({formula_text(body)})"
    return f" {word} ".join(f"({formula_text(item)})" for item in body)


def formula_tuples(node) -> list:
    """The tuple form of a formula tree: a list of items, 'or' and 'not' as groups."""
    if len(node) == 3:
        return [node]
    word, body = node
    if word == "not":
        return [("not", formula_tuples(body))]
    if word == "and":
        return [item for part in body for item in formula_tuples(part)]
    return [("or", *map(formula_tuples, body))]

# events holding arrays (DESIGN §8.3): elements of mixed families, duplicates, junk that
# no predicate compares (nested arrays, objects, None, NaN), empty arrays
JUNK = [None, [1], ["a"], {"k": 1}, float("nan"), b"x"]
array_elements = st.one_of(values, st.sampled_from(EVENT_ONLY), st.sampled_from(JUNK))
arrays = st.one_of(
    st.lists(array_elements, max_size=5),
    st.lists(values, min_size=1, max_size=3).map(lambda v: v + v[:1]),  # a duplicate
    st.lists(array_elements, max_size=4).map(tuple),
)
array_events = st.dictionaries(st.sampled_from([*ATTRS, "unused"]),
                               st.one_of(event_values, arrays), max_size=5)


def random_array_event(rng: random.Random, attrs: list[str], domain: int) -> dict:
    """``random_event`` whose attributes hold arrays half of the time: a list or tuple of
    0 to 4 values, with duplicates and junk now and then."""
    out = {}
    for a in attrs:
        if rng.random() >= 0.7:
            continue
        if rng.random() < 0.5:
            out[a] = random_value(rng, domain)
            continue
        items = [random_value(rng, domain) for _ in range(rng.randint(0, 4))]
        if items and rng.random() < 0.3:
            items.append(rng.choice(items))
        if rng.random() < 0.2:
            items.insert(rng.randint(0, len(items)), rng.choice(JUNK))
        out[a] = tuple(items) if rng.random() < 0.2 else items
    return out
