"""Expressions with 'or', 'not' and parentheses: disjunctive normal form, storage of one
entry per conjunction under one id, and matching against the oracle with churn."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import matches, oracle_match
from strategies import array_events, events, formula_text, formula_tuples, formulas

import pbtree
from pbtree import bulk, layouts
from pbtree.errors import ExpressionError
from pbtree.expr import Disjunction, conjunctions, format_predicates, normalize

SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large,
           HealthCheck.function_scoped_fixture]
BIG = 10**6  # conjunctions a test allows, so that every drawn formula is accepted


def holds(preds: list, event: dict) -> bool:
    """Whether normalised predicates (a conjunction or a Disjunction) hold, by the oracle."""
    return any(matches(format_predicates(conj), event) for conj in conjunctions(preds))


@settings(max_examples=300, deadline=None)
@given(formula=formulas, batch=st.lists(events, min_size=1, max_size=8))
def test_normal_form_means_the_expression(formula, batch):
    """The normal form of an expression holds exactly where the expression does, by the
    oracle's own reading of the tree; text and tuples agree; it prints back to itself."""
    text = formula_text(formula)
    try:
        found = normalize(text, BIG)
    except ExpressionError:  # bounds of mixed types, an overlong prefix: both forms refuse
        with pytest.raises(ExpressionError):
            normalize(formula_tuples(formula), BIG)
        return
    assert normalize(formula_tuples(formula), BIG) == found
    assert normalize(format_predicates(found), BIG) == found
    if type(found) is Disjunction:
        assert len(found) >= 2
        keys = [frozenset(map(repr, conj)) for conj in found]  # repr: False and 0 differ
        assert not any(a < b for a in keys for b in keys), "a conjunction another implies"
    for event in batch:
        assert holds(found, event) == matches(text, event), (text, event)


def test_examples_and_limit(tmp_path):
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe(1, "brand = 'acme' and (price < 100 or discount >= 20)")
        ix.subscribe(2, "not (color = 'red' and size = 'S')")
        ix.subscribe(3, [("a", "=", 1), ("or", [("b", "<", 2)], ("c", ">", 3))])
        assert ix.get(1) == ("(brand = 'acme' and discount >= 20) or "
                             "(brand = 'acme' and price < 100)")
        assert ix.get(2) == "color != 'red' or size != 'S'"
        assert ix.get(3) == "(a = 1 and b < 2) or (a = 1 and c > 3)"
        assert ix.match({"brand": "acme", "price": 50, "discount": 30}) == [1]
        assert ix.count({"brand": "acme", "price": 50, "discount": 30}) == 1
        assert ix.match({"color": "red", "size": "S"}) == []
        assert ix.match({"color": "red", "size": "M"}) == [2]
        assert ix.match({"size": "S"}) == []  # strong semantics: color != 'red' is false
        assert ix.match({"a": 1, "b": 0, "c": 9}) == [3]
        stats = ix.stats()
        assert (len(ix), stats["subscriptions"], stats["conjunctions"]) == (3, 3, 6)
        report = ix.explain(1, {"brand": "acme", "price": 150, "discount": 30})
        assert report["matches"] and [c["holds"] for c in report["conjunctions"]] == [True, False]
        wide = " and ".join(f"(a{i} = 1 or b{i} = 2)" for i in range(7))
        with pytest.raises(ExpressionError, match=r"expands to 128 conjunctions .* limit is 64"):
            ix.subscribe(4, wide)
        assert ix.unsubscribe(1) and ix.stats()["conjunctions"] == 4
        ix.verify()
    with pbtree.open(tmp_path / "ix", max_conjunctions=2) as ix:
        with pytest.raises(ExpressionError, match=r"'a = 1 or b = 2 or c = 3' expands to 3 .*"
                                                  r"limit is 2"):
            ix.subscribe(5, "a = 1 or b = 2 or c = 3")
        ix.subscribe(5, "a = 1 or b = 2")
        assert ix.match({"b": 2}) == [5]
    with pytest.raises(pbtree.PbtreeError, match="max_conjunctions"):
        pbtree.open(tmp_path / "ix", max_conjunctions=0)


@settings(max_examples=30, deadline=None, suppress_health_check=SLOW_OK)
@given(data=st.data(), shards=st.sampled_from([1, 2]), fold_at=st.sampled_from([1, 4, 10**6]))
def test_churn_matches_oracle(tmp_path_factory, data, shards, fold_at):
    """Subscriptions with 'or' and 'not' come and go, are replaced (by one of more or
    fewer conjunctions), folded and reclustered; every match, count and explanation is the
    oracle's, and verify() holds."""
    path = tmp_path_factory.mktemp("ix") / "index"
    model: dict = {}
    exprs = st.one_of(formulas.map(formula_text), formulas.map(formula_tuples))
    with pbtree.create(path, shards=shards, node_bytes=256, fold_at=fold_at,
                       max_conjunctions=BIG) as ix:
        for step in range(data.draw(st.integers(2, 6), label="steps")):
            action = data.draw(st.sampled_from(["batch", "replace", "unsubscribe", "fold",
                                                "recluster"]))
            if action == "batch":
                found = data.draw(st.lists(exprs, min_size=1, max_size=12), label="batch")
                pairs = []
                for n, expr in enumerate(found):
                    try:
                        normalize(expr, BIG)
                    except ExpressionError:
                        continue
                    pairs.append((1000 * step + n if n % 2 else f"s{step}-{n}", expr))
                ix.subscribe_many(pairs)
                model.update(pairs)
            elif action == "replace" and model:
                sub_id = data.draw(st.sampled_from(sorted(model, key=str)))
                expr = data.draw(exprs)
                try:
                    ix.subscribe(sub_id, expr, replace=True)
                except ExpressionError:
                    continue
                model[sub_id] = expr
            elif action == "unsubscribe" and model:
                gone = data.draw(st.lists(st.sampled_from(sorted(model, key=str)), max_size=6))
                assert ix.unsubscribe_many(gone) == len(set(gone))
                for sub_id in gone:
                    model.pop(sub_id, None)
            elif action == "fold":
                ix.compact()
            elif action == "recluster":
                ix.recluster(data.draw(st.lists(events, max_size=5)))
            report = ix.verify()
            assert len(ix) == report["subscriptions"] == len(model)
            assert report["conjunctions"] == sum(
                len(conjunctions(normalize(expr, BIG))) for expr in model.values())
            batch = data.draw(st.lists(events | array_events, min_size=1, max_size=5),
                              label="events")
            expected = [oracle_match(model, event) for event in batch]
            assert ix.match_many(batch) == expected
            assert ix.count_many(batch) == list(map(len, expected))
            for event, ids in zip(batch, expected, strict=True):
                for sub_id in list(model)[:5]:
                    assert ix.explain(sub_id, event)["matches"] == (sub_id in ids)


@settings(max_examples=15, deadline=None, suppress_health_check=SLOW_OK)
@given(found=st.lists(formulas.map(formula_text), min_size=1, max_size=30),
       batch=st.lists(events, min_size=1, max_size=6))
def test_bulk_build_matches_oracle(tmp_path_factory, found, batch):
    """A bulk build stores each conjunction under its id as subscribe does."""
    pairs = []
    for n, text in enumerate(found):
        try:
            normalize(text)
        except ExpressionError:
            continue
        pairs.append((n if n % 2 else f"s{n}", text))
    path = tmp_path_factory.mktemp("bulk") / "index"
    assert bulk.build(path, pairs, shards=2) == len(pairs)
    model = dict(pairs)
    with pbtree.open(path) as ix:
        report = ix.verify()
        assert report["subscriptions"] == len(pairs)
        assert report["conjunctions"] == sum(len(conjunctions(normalize(text)))
                                             for text in model.values())
        assert ix.match_many(batch) == [oracle_match(model, event) for event in batch]
        assert dict(ix.items()) == {i: ix.get(i) for i in model}
        with pytest.raises(pbtree.DuplicateIdError):
            bulk.build(path.parent / "twice", [(1, "a = 1 or b = 2"), (1, "c = 3")])


def test_predicate_layout_groups():
    """Rows of one id with several ``group`` values are an 'or' of one conjunction per
    group; rows of one group value, null included, are one conjunction."""
    table = pa.table({"id": [1, 1, 1, 2, 2, 3, 3],
                      "attr": ["a", "b", "c", "a", "b", "z", "z"],
                      "op": ["=", "=", "<", "=", "=", "=", "between"],
                      "value": [[1], [2], [3], [1], [2], [9], [1, 2]],
                      "group": ["x", "x", "y", None, None, "u", "v"]})
    cols, rejects = layouts.subscriptions(layouts.detect(table.schema), table)
    assert rejects == [] and cols.subscriptions() == 3
    parts = sorted(zip(cols.ids, cols.parts().tolist(), cols.counts.tolist(), strict=True))
    assert parts == [(1, 0, 2), (1, 1, 1), (2, 0, 2), (3, 0, 1), (3, 1, 1)]
    bad = table.set_column(4, "group", pa.array([1.5] * 7))
    with pytest.raises(layouts.LayoutError, match="group"):
        layouts.detect(bad.schema)
